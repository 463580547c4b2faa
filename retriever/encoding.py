"""Corpus → embedding shards, resumable and splittable across workers.

Worker ``i`` of ``n`` takes every document whose position ``p`` has ``p % n == i`` and cuts
its share into parts of ``shard_size`` rows. A part whose shard already exists is skipped
without encoding, so a rerun after a crash continues after the last complete shard and
gives the same shards as an uninterrupted run.
"""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from retriever.corpus import Document, Fields, ReadStats, iter_documents, resolve_corpus_path
from retriever.encoder import Encoder
from retriever.errors import RetrieverError
from retriever.shards import (atomic_write_bytes, differing_fields, done_marker, read_shard_metadata,
                              shard_name, write_shard)


@dataclass
class EncodeResult:
    output: Path
    documents: int
    encoded: int
    skipped: int
    shards: int
    empty_texts: int
    seconds: float


def _parts(documents: Iterator[Document], worker: int, num_workers: int,
           shard_size: int) -> Iterator[list[Document]]:
    part: list[Document] = []
    for position, document in enumerate(documents):
        if position % num_workers != worker:
            continue
        part.append(document)
        if len(part) == shard_size:
            yield part
            part = []
    if part:
        yield part


def _check_existing(path: Path, expected: dict, rows: int) -> None:
    found = read_shard_metadata(path)
    diffs = differing_fields(expected, found)
    if diffs:
        raise RetrieverError(f"{path}: an existing shard was made by a different encoder ({'; '.join(diffs)}); "
                             "encode into an empty folder or delete the old shards")
    if found["shard"]["rows"] != rows:
        raise RetrieverError(f"{path}: existing shard has {found['shard']['rows']} rows where the corpus gives "
                             f"{rows}; the corpus or --shard-size changed, so encode into an empty folder")


def encode_corpus(corpus: str | Path, output: str | Path, encoder: Encoder, fmt: str = "auto",
                  fields: Fields = Fields(), shard_size: int = 10_000, shard_index: int = 0,
                  num_shards: int = 1, progress: bool = True) -> EncodeResult:
    """Encode a corpus (or this worker's share of it) into Parquet shards under ``output``."""
    if shard_size < 1:
        raise RetrieverError("--shard-size must be at least 1")
    if not 0 <= shard_index < num_shards:
        raise RetrieverError(f"--shard-index must be in 0..{num_shards - 1} for --num-shards {num_shards}")
    corpus_path = resolve_corpus_path(corpus)
    output = Path(output)
    created = not output.exists()
    output.mkdir(parents=True, exist_ok=True)
    for stale in output.glob(".*.tmp-*"):
        stale.unlink()
    base_metadata = {**encoder.metadata(), "corpus": str(corpus_path.resolve())}
    stats = ReadStats()
    encoded = skipped = shards = 0
    started = time.perf_counter()
    documents = iter_documents(corpus_path, fmt, fields, stats)
    try:
        with tqdm(desc=f"encode w{shard_index}/{num_shards}", unit="doc", file=sys.stderr, disable=not progress,
                  dynamic_ncols=True) as bar:
            for part_number, part in enumerate(_parts(documents, shard_index, num_shards, shard_size)):
                path = output / shard_name(shard_index, num_shards, part_number)
                metadata = {**base_metadata, "shard": {"worker": shard_index, "num_workers": num_shards,
                                                       "part": part_number, "rows": len(part)}}
                shards += 1
                if path.exists():
                    _check_existing(path, metadata, len(part))
                    skipped += len(part)
                    bar.set_postfix_str(f"resumed past {path.name}")
                    continue
                vectors = encoder.encode_passages(part, progress=bar.update)
                write_shard(path, [d.id for d in part], vectors, metadata)
                encoded += len(part)
    except BaseException:
        if created and not any(output.iterdir()):
            output.rmdir()  # a run that wrote nothing leaves nothing behind
        raise
    seconds = time.perf_counter() - started
    summary = {"worker": shard_index, "num_workers": num_shards, "shards": shards, "rows": encoded + skipped,
               "corpus_documents": stats.records, "empty_texts": stats.empty_texts, "encoder": base_metadata}
    atomic_write_bytes(done_marker(output, shard_index, num_shards),
                       json.dumps(summary, indent=2, sort_keys=True).encode())
    return EncodeResult(output=output, documents=stats.records, encoded=encoded, skipped=skipped, shards=shards,
                        empty_texts=stats.empty_texts, seconds=seconds)
