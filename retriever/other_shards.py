"""Shards another encoder, split or reading made in a folder being encoded: refused before anything in it changes,
or deleted by ``build --overwrite``."""
from __future__ import annotations

import os
from pathlib import Path
from shlex import quote

from retriever.errors import RetrieverError
from retriever.recorded_paths import locate
from retriever.shard_origin import READING, check_reading, reading_problem
from retriever.shards import differing_fields, existing_metadata, list_shards


def re_encode_advice(output: Path) -> str:
    """How to replace the shards another encoder, split or reading made in ``output``: `encode` has no --overwrite,
    so the files to delete are named; `build --overwrite` deletes them in a build's own OUT.shards folder."""
    folder = quote(str(output))
    advice = (f"encode into another --output, or delete its shards and done markers (rm {folder}/embeddings-w*.parquet "
              f"{folder}/*done-w*of*.json)")
    if output.name.endswith(".shards"):  # where `build -o OUT` encodes
        advice += ", or use `build --overwrite` if a build made it (as OUT.shards for -o OUT)"
    return advice


def clear_other_encoder(output: Path, metadata: dict, num_workers: int = 1) -> bool:
    """Delete the shards and done markers another encoder (or split) made in a shard folder (``build --overwrite``);
    True if deleted. Only those files go: anything else a user keeps there stays. Every readable shard is looked
    at: a damaged one says nothing of its encoder, and when only the first was read, a damaged first shard left
    the other encoder's shards to refuse the very `build --overwrite` that was asked to replace them."""
    if not output.is_dir():
        return False
    shards = list_shards(output)
    if not any(_other_shard(metadata, found, num_workers) or _other_reading(metadata, found)
               for found in map(existing_metadata, shards)):
        return False
    for path in [*shards, *output.glob("*done-w*of*.json")]:
        path.unlink()
    return True


def _other_shard(metadata: dict, found: dict | None, num_workers: int) -> list[str]:
    """How a readable shard's record differs from this run's encoder and split (empty: it does not, or is damaged)."""
    if not found:
        return []
    diffs = differing_fields(metadata, found)
    if not diffs and found["shard"]["num_workers"] != num_workers:
        diffs = [f"num_workers: {found['shard']['num_workers']} vs {num_workers}"]
    return diffs


def _other_reading(metadata: dict, found: dict | None) -> tuple[str, str] | None:
    """``reading_problem`` of a readable shard read with other flags than this run's ``metadata`` records."""
    return reading_problem(found.get(READING), metadata[READING]) if found and READING in metadata else None


def refuse_other_shards(output: Path, metadata: dict, num_workers: int, corpus: Path | None = None,
                        replace_other_corpus: bool = False) -> None:
    """Refuse a folder holding shards of another encoder or another --num-workers, before anything in it changes.
    ``encode_part`` looks only at the shards a run rewrites: another split's shards stayed beside the new ones,
    so the folder held two encoders' vectors until `index` refused it (and a refused rerun un-finished it).
    Unless ``replace_other_corpus`` (a build's own OUT.shards), shards of another corpus file that is still there
    are refused too: its parts all "changed", so each of its shards was replaced, with a note of re-encoded parts."""
    for path in list_shards(output):
        found = existing_metadata(path)
        diffs = _other_shard(metadata, found, num_workers)  # a damaged one is re-encoded
        if diffs:
            raise RetrieverError(f"{path}: an existing shard was made by a different encoder or split "
                                 f"({'; '.join(diffs)}); {re_encode_advice(output)}")
        if _other_reading(metadata, found):
            check_reading(output, found[READING], metadata[READING], re_encode_advice(output), corpus)
        if found and corpus is not None and not replace_other_corpus:
            theirs = locate(found.get("corpus"), output)
            theirs = theirs and Path(os.path.normpath(theirs))  # S/../c.jsonl as c.jsonl
            if theirs is not None and theirs.is_file() and not _same_file(theirs, corpus):
                raise RetrieverError(f"{output}: its shards were encoded from {theirs}, which is still there, and this "
                                     f"run reads another corpus file, {corpus}: encoding it here would replace them "
                                     f"all; {re_encode_advice(output)}")


def _same_file(one: Path, other: Path) -> bool:
    try:
        return one.samefile(other)
    except OSError:
        return False
