"""Corpus → embedding shards, resumable and splittable across workers.

Worker ``i`` of ``n`` takes every document whose position ``p`` has ``p % n == i`` and cuts
its share into parts of ``shard_size`` rows. Each shard records a hash of its part's ids,
titles and texts, so a rerun keeps a shard only when it was made by the same encoder from the same documents:
after a crash it continues past the complete shards, after a corpus edit it re-encodes the parts that changed.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm import tqdm

from retriever.corpus import Document, Fields, ReadStats, count_records, iter_documents, resolve_corpus_path
from retriever.encode_result import EncodeResult
from retriever.encoder import Encoder
from retriever.errors import CORPUS_PATH, RetrieverError, check_kind, given_path
from retriever.recorded_paths import model_record, relative_path
from retriever.files import atomic_write_bytes
from retriever.output_paths import creatable_problem
from retriever.folders import check_output_name, make_folder
from retriever.locks import held_lock
from retriever.pid_names import clear_left_behind, left_behind
from retriever.index_folder import MANIFEST_FILE
from retriever.other_shards import re_encode_advice, refuse_other_shards
from retriever.shard_completeness import worker_shards
from retriever.shard_origin import READING, ContentHash, reading_record
from retriever.texts import whole_number
from retriever.shards import (differing_fields, done_marker, existing_metadata, list_shards, parse_shard_name,
                              note_batch_size, read_shard, read_shard_metadata, shard_name, warn_resized, write_shard)
from retriever.wording import counted

# What encode_part did with one part.
ENCODED, REUSED, CHANGED, DAMAGED = "encoded", "reused", "changed", "damaged"
# One part of the corpus, the shard it becomes, and the metadata that shard carries.
PartJob = tuple[Sequence[Document], Path, dict]


class PartRunner(Protocol):
    """Runs encode_part somewhere else (e.g. on Ray actors); ``encode_corpus`` takes one in place of an Encoder."""

    # A ``batch_size`` attribute, where it has one, is the texts per forward pass its encoders take: a resume in
    # batches of another size is told so (``note_batch_size``).

    def metadata(self) -> dict: ...

    def run_parts(self, jobs: Iterator[PartJob], progress: Callable[[int], None]) -> Iterator[tuple[str, int]]:
        """Run ``encode_part`` on each job; yield (outcome, rows) per part, in any order."""


def part_content_sha256(part: Sequence[Document]) -> str:
    content = ContentHash()
    for document in part:
        content.add(document)
    return content.hexdigest()


def part_metadata(base_metadata: dict, part: Sequence[Document], worker: int, num_workers: int,
                  part_number: int, shard_size: int) -> dict:
    """The metadata a shard of this part carries: encoder record plus where the part sits and its content hash."""
    return {**base_metadata, "shard": {"worker": worker, "num_workers": num_workers, "part": part_number,
                                       "rows": len(part), "shard_size": shard_size,
                                       "content_sha256": part_content_sha256(part)}}


def encode_part(encoder: Encoder, part: Sequence[Document], path: Path, metadata: dict,
                progress: Callable[[int], None] | None = None) -> str:
    """Make the shard at ``path`` for one part unless it already holds exactly these documents.

    Returns ENCODED (new shard), REUSED (existing shard matches), CHANGED (existing shard was made from other
    documents) or DAMAGED (existing shard fails its record); both replaced. A shard from another encoder is refused.
    """
    outcome = ENCODED
    found = existing_metadata(path)
    if found == {}:
        outcome = DAMAGED
    elif found is not None:
        diffs = differing_fields(metadata, found)
        if diffs:
            raise RetrieverError(f"{path}: an existing shard was made by a different encoder ({'; '.join(diffs)}); "
                                 f"{re_encode_advice(path.parent)}")
        outcome = _reuse(path, found, metadata, part)
        if outcome == REUSED:
            if progress is not None:
                progress(len(part))
            return REUSED
    vectors = encoder.encode_passages(part, progress=progress)
    _check_finite(vectors, part, path)
    metadata["shard"]["passages_cut"] = encoder.last_cut
    metadata["shard"]["batch_size"] = encoder.batch_size  # a resume in batches of another size is told so
    write_shard(path, [d.id for d in part], vectors, metadata)
    return outcome


def _check_finite(vectors: np.ndarray, part: Sequence[Document], path: Path) -> None:
    """Refuse NaN or infinite vectors before they are written: weights holding non-finite values, or fp16
    overflowing, make them, and FAISS would index them without a word and rank garbage for every query."""
    if (bad := ~np.isfinite(vectors).all(axis=1)).any():
        raise RetrieverError(f"{path}: the encoder made NaN or infinite vectors for {int(bad.sum())} of "
                             f"{counted(len(part), 'passage')} (first: id {part[int(np.argmax(bad))].id!r}); its "
                             "weights hold non-finite values or its dtype overflowed: check the model, or pass --dtype "
                             "fp32")


def _reuse(path: Path, found: dict, metadata: dict, part: Sequence[Document]) -> str:
    """REUSED when the shard at ``path`` was made from these documents, its id column naming them in order, and
    still holds the vectors it was written with (``read_shard`` checks their SHA-256: a resume reading the ids alone
    reused a shard damaged in place, which `index` then refused); else CHANGED (other documents) or DAMAGED."""
    if found.get("shard", {}).get("content_sha256") != metadata["shard"]["content_sha256"]:
        return CHANGED
    try:
        ids, _ = read_shard(path)
    except RetrieverError as error:  # "PATH: what is wrong; what to do", and here what to do is this run's
        print(f"{str(error).split('; ')[0]}; encoding it again", file=sys.stderr)
        return DAMAGED
    return REUSED if ids == [d.id for d in part] else DAMAGED  # its record names these documents, its ids do not


def encode_parts(encoder: Encoder, jobs: Iterator[PartJob],
                 progress: Callable[[int], None]) -> Iterator[tuple[str, int]]:
    """The PartRunner of one process: the parts one after another, here."""
    for part, path, metadata in jobs:
        yield encode_part(encoder, part, path, metadata, progress), len(part)


def parts(documents: Iterator[Document], worker: int, num_workers: int, shard_size: int) -> Iterator[list[Document]]:
    """This worker's documents cut into parts of ``shard_size``."""
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


def remove_parts_beyond(output: Path, worker: int, num_workers: int, count: int) -> int:
    """Delete this worker's shards numbered ``count`` and up: the corpus no longer has those parts."""
    removed = 0
    for path in list_shards(output, (worker, num_workers)):
        if parse_shard_name(path.name)[2] >= count:
            path.unlink()
            removed += 1
    return removed


def _shard_folder(output: Path, worker_index: int, num_workers: int) -> None:
    """Make the shard folder, refusing an index folder or one nothing can be written in; delete this
    worker's temporaries its dead runs on this host left (other workers' stay, as do another host's: ``pid_names``)."""
    if (output / MANIFEST_FILE).is_file():
        raise RetrieverError(f"{output}: is an index folder; encode into a folder of its own, e.g. {output}.shards")
    make_folder(output)
    problem = creatable_problem(output / "shard")
    if problem:
        raise RetrieverError(f"{output}: {problem}; choose another --output")
    mine = f"-w{worker_index:03d}of{num_workers:03d}"  # in its shards' and its done marker's names
    clear_left_behind([(stale, writer) for stale, writer in left_behind(output, ".", ".tmp-") if mine in stale.name],
                      "written by", "remove it once that worker no longer runs there")


def _share(total: int | None, worker: int, num_workers: int) -> int | None:
    """How many of ``total`` documents fall to this worker (positions p with p % n == worker)."""
    return None if total is None else total // num_workers + (worker < total % num_workers)


def encode_corpus(corpus: str | Path, output: str | Path, encoder: Encoder | PartRunner, fmt: str = "auto",
                  fields: Fields = Fields(), shard_size: int = 10_000, worker_index: int = 0,
                  num_workers: int = 1, progress: bool = True, replace_other_corpus: bool = False) -> EncodeResult:
    """Encode a corpus (or this worker's share of it) into Parquet shards under ``output``.

    ``encoder`` is an Encoder (parts run here, in order) or a PartRunner such as a Ray pool. Other workers may
    encode into ``output`` at the same time; a second run of this worker is refused at once (``held_lock`` on
    ``.encode-wXXXofYYY.lock`` in the folder). Shards there of another corpus file that still exists are refused
    unless ``replace_other_corpus`` (a build's own shard folder): an edited corpus is re-encoded part by part.
    """
    corpus, output = _checked_arguments(corpus, output, encoder, fields)
    shard_size = whole_number(shard_size, "--shard-size", 1)
    num_workers = whole_number(num_workers, "--num-workers", 1)  # numpy ints broke json.dump after the first part
    worker_index = whole_number(worker_index, "--worker-index", 0)
    if not worker_index < num_workers:
        raise RetrieverError(f"--worker-index must be in 0..{num_workers - 1} for --num-workers {num_workers}")
    corpus_path = resolve_corpus_path(corpus)
    check_output_name(output, "--output")  # before exists(), which a name past the file system's limit fails
    made = [] if output.exists() else [output, *itertools.takewhile(lambda folder: not folder.exists(), output.parents)]
    try:
        _shard_folder(output, worker_index, num_workers)
        with held_lock(output / f".encode-w{worker_index:03d}of{num_workers:03d}.lock",
                       lambda pid: f"{output}: another encode of worker {worker_index} of {num_workers} into it is "
                                   f"running (pid {pid}); wait for it to end or choose another --output"):
            return _encode_share(corpus_path, output, encoder, fmt, fields, shard_size, worker_index, num_workers,
                                 progress, replace_other_corpus)
    except BaseException:
        with contextlib.suppress(OSError):  # empty folders it made go, innermost first: a run that wrote nothing
            for folder in made:             # leaves nothing (new/sub/ stayed behind when shards/ alone went)
                folder.rmdir()
        raise


def _checked_arguments(corpus: object, output: object, encoder: object, fields: object) -> tuple[Path, Path]:
    """The corpus and output paths (``given_path``); library arguments of the wrong kind are refused in one line naming
    them: they failed deep in the run, as an AttributeError (``'str' object has no attribute 'metadata'``) or
    pathlib's TypeError naming no argument."""
    paths = (given_path(corpus, "corpus", CORPUS_PATH),
             given_path(output, "output", "a path to the shard folder"))
    if not isinstance(encoder, Encoder) and not callable(getattr(encoder, "run_parts", None)):
        check_kind(encoder, Encoder, "encoder", "an Encoder (or a pool such as RayEncoderPool)")
    check_kind(fields, Fields, "fields", "retriever.corpus.Fields, e.g. Fields(id='_id', text='text')")
    return paths


def _encode_share(corpus_path: Path, output: Path, encoder: Encoder | PartRunner, fmt: str, fields: Fields,
                  shard_size: int, worker_index: int, num_workers: int, progress: bool,
                  replace_other_corpus: bool) -> EncodeResult:
    """``encode_corpus`` once it holds this worker's lock: a second run of the same worker in the same folder
    would re-encode the same parts beside it and overwrite its shards."""
    # model and corpus re-expressed relative to the shard folder, or as names; the flags that read the corpus
    recorded = {**encoder.metadata(), READING: reading_record(corpus_path, fmt, fields)}
    refuse_other_shards(output, recorded, num_workers, corpus_path, replace_other_corpus)
    earlier_size = warn_resized(output, worker_index, num_workers, shard_size)
    note_batch_size(output, worker_index, num_workers, getattr(encoder, "batch_size", None))
    # Until this run finishes, this worker's shards may mix old and new content: not complete.
    done_marker(output, worker_index, num_workers).unlink(missing_ok=True)
    base_metadata = {**recorded, **model_record(recorded["model"], output),
                     "corpus": relative_path(corpus_path, output) or corpus_path.name}
    stats = ReadStats()
    counts = dict.fromkeys((ENCODED, REUSED, CHANGED, DAMAGED), 0)
    encoded = skipped = shards = 0
    started = time.perf_counter()
    documents = iter_documents(corpus_path, fmt, fields, stats)
    run_parts = functools.partial(encode_parts, encoder) if isinstance(encoder, Encoder) else encoder.run_parts
    jobs = ((part, output / shard_name(worker_index, num_workers, number),
             part_metadata(base_metadata, part, worker_index, num_workers, number, shard_size))
            for number, part in enumerate(parts(documents, worker_index, num_workers, shard_size)))
    with tqdm(desc=f"encode w{worker_index}/{num_workers}", unit="doc", file=sys.stderr, disable=not progress,
              total=_share(count_records(corpus_path, fmt) if progress else None, worker_index, num_workers),
              dynamic_ncols=True) as bar:
        for outcome, rows in run_parts(jobs, bar.update):
            counts[outcome] += 1
            shards += 1
            if outcome == REUSED:
                skipped += rows
                bar.set_postfix_str(f"{skipped} already done")
            else:
                encoded += rows
    removed = remove_parts_beyond(output, worker_index, num_workers, shards)
    cut = sum(read_shard_metadata(path)["shard"].get("passages_cut", 0)
              for path in worker_shards(output, worker_index, num_workers, shards))  # all there, or no done marker
    seconds = time.perf_counter() - started
    summary = {"worker": worker_index, "num_workers": num_workers, "shards": shards, "rows": encoded + skipped,
               "corpus_documents": stats.records, "empty_texts": stats.empty_texts, "passages_cut": cut,
               "encoder": base_metadata}
    atomic_write_bytes(done_marker(output, worker_index, num_workers),
                       json.dumps(summary, indent=2, sort_keys=True).encode())
    return EncodeResult(output=output, documents=stats.records, encoded=encoded, skipped=skipped, shards=shards,
                        empty_texts=stats.empty_texts, seconds=seconds, changed_parts=counts[CHANGED],
                        removed_parts=removed, passages_cut=cut, earlier_shard_size=earlier_size,
                        damaged_parts=counts[DAMAGED])
