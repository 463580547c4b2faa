"""A batch run written into a file so that a rerun of the same search continues after its last complete batch.

The lines of finished batches go to a hidden ``.NAME.partial`` beside the output, and after each batch
``.NAME.partial.json`` records how many queries and bytes are complete, under a fingerprint of everything the
lines depend on (index, queries, k, mode, fusion, settings, format, tag). A rerun whose fingerprint matches cuts
the partial file to the recorded bytes (a batch half-written when the process died goes) and searches on from
there; any other partial file is discarded. The finished file is renamed to NAME, so NAME only ever holds a
complete run, the same bytes as an uninterrupted search.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

import retriever
from retriever.errors import RetrieverError
from retriever.files import folders_made_for, read_json_object, sync_folder, write_errors_named, write_json
from retriever.output_paths import through_link, written_in_place
from retriever.folders import exclusive_build
from retriever.index_folder import manifest_bytes
from retriever.runs import HitlessRun, Run, check_some_hit, run_lines, write_run

if TYPE_CHECKING:
    from retriever.searching import Searcher

RECORD_KEYS = ("fingerprint", "queries", "bytes", "short", "fewest")


def search_fingerprint(searcher: Searcher, ids: list[str], texts: list[str], k: int, settings: dict, fmt: str,
                       tag: str) -> str:
    """SHA-256 of everything a batch run's bytes depend on, as canonical JSON of plain values (never a pickle):
    the index (its manifest), the queries, k, mode, fusion, search settings, device and dtype, how many queries
    a batch takes, the format and tag."""
    depth = searcher.fusion_depth(k) if searcher.mode == "hybrid" else k
    encoder = searcher.encoder if searcher.mode != "bm25" else None  # a BM25 run's bytes depend on no model
    inputs = {"manifest": hashlib.sha256(manifest_bytes(searcher.index_dir) or b"").hexdigest(),
              "queries": queries_sha256(ids, texts), "k": k, "mode": searcher.mode, "fusion": asdict(searcher.fusion),
              "settings": settings, "device": encoder and str(encoder.device), "dtype": encoder and encoder.dtype,
              "per_batch": searcher.queries_per_batch(depth), "format": fmt, "tag": tag,
              "version": retriever.__version__}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def queries_sha256(ids: Iterable[str], texts: Iterable[str]) -> str:
    """The queries as searched (ids and texts in order), whatever file or format they were read from."""
    digest = hashlib.sha256()
    for query_id, text in zip(ids, texts):
        digest.update(json.dumps([query_id, text], ensure_ascii=False).encode("utf-8") + b"\n")
    return digest.hexdigest()


class PartialRun:
    """The partial file of one output: what is done, and appending a batch's lines then recording it."""

    def __init__(self, output: Path, key: str, fmt: str, tag: str, depth: int, total: int) -> None:
        self.target = through_link(output)
        self.data = self.target.with_name(f".{self.target.name}.partial")
        self.record_path = self.target.with_name(f".{self.target.name}.partial.json")
        self.key, self.depth = key, depth
        self.fmt, self.tag = fmt, tag
        self.record = {"fingerprint": key, "queries": 0, "bytes": 0, "short": 0, "fewest": None}
        for path in (self.data, self.record_path):  # a folder there was a traceback, or failed after the first batch
            if (path.exists() or path.is_symlink()) and not path.is_file():
                raise RetrieverError(f"{path}: is not a file, where search keeps the partial run of {self.target.name} "
                                     "(a folder of that name?); move it away and rerun the same command")
        self.note = self._resume(total)

    @property
    def queries_done(self) -> int:
        return self.record["queries"]

    def _resume(self, total: int) -> str | None:
        """Take up the recorded progress if it is this search's, else start over; a note when a partial run of
        other inputs, or a damaged record, is discarded."""
        if not self.record_path.is_file():
            self.data.unlink(missing_ok=True)
            return None
        try:
            record = read_json_object(self.record_path)
        except RetrieverError:
            record = {}
        if set(RECORD_KEYS) <= set(record) and record["fingerprint"] == self.key and self.data.is_file():
            damage = record_damage(record, total, self.data.stat().st_size, self.depth)
            if damage is None:
                self.record = {key: record[key] for key in RECORD_KEYS}
                return None
            self.discard()
            return (f"note: {self.record_path}: damaged ({damage}), so the partial run {self.data} is discarded; "
                    "starting over")
        self.discard()
        return (f"note: discarded the partial run {self.data} left by a search with other inputs (index, queries, "
                f"k, mode, settings, format or tag) or damaged; starting over")

    def discard(self) -> None:
        self.data.unlink(missing_ok=True)
        self.record_path.unlink(missing_ok=True)

    def write(self, batches: Iterable[Run]) -> None:
        """Append each batch, make it durable, then record it; at the end the file becomes the output."""
        with write_errors_named(self.target, self.data), open(self.data, "ab") as handle:
            handle.truncate(self.record["bytes"])
            for batch in batches:
                handle.write("".join(run_lines(batch, self.fmt, self.tag)).encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
                self._count(batch, handle.tell())
            try:
                check_some_hit(self.fmt, handle.tell(), self.record["queries"], self.target)
            except HitlessRun:
                self.discard()
                raise
            os.replace(self.data, self.target)
        self.record_path.unlink(missing_ok=True)
        sync_folder(self.target.parent)

    def _count(self, batch: Run, size: int) -> None:
        counts = [len(hits) for hits in batch.values()]
        short = [count for count in counts if count < self.depth]
        fewest = min(short + ([self.record["fewest"]] if self.record["fewest"] is not None else []), default=None)
        self.record.update(queries=self.record["queries"] + len(counts), bytes=size,
                           short=self.record["short"] + len(short), fewest=fewest)
        write_json(self.record_path, self.record)

    def shortfall(self) -> str:
        return shortfall_note(self.record["short"], self.record["fewest"])


def record_damage(record: dict, total: int, size: int, depth: int) -> str | None:
    """What in a partial run's record cannot be true of a run of ``total`` queries whose partial file has ``size``
    bytes, or None: counts that are not whole numbers from 0 to what they count (they were trusted, so `queries`
    past the total wrote only the partial lines as the run, and a negative byte count failed as a disk error)."""
    counts = {"queries": total, "bytes": size, "short": record["queries"]}
    for key, most in counts.items():
        value = record[key]
        if type(value) is not int or not 0 <= value <= most:
            return f"{key} is {json.dumps(value)[:40]}, not a whole number from 0 to {most}"
    fewest = record["fewest"]
    if record["short"] == 0:
        return None if fewest is None else f"fewest is {json.dumps(fewest)[:40]} where no query got fewer hits"
    if type(fewest) is not int or not 0 <= fewest < depth:
        return f"fewest is {json.dumps(fewest)[:40]}, not a whole number from 0 to {depth - 1}"
    return None


def shortfall_note(short: int, fewest: int | None) -> str:
    """What the summary adds for ``short`` queries that got fewer hits than it names: an IVF searched at a low
    nprobe, or BM25, returns only what it reaches, and the summary said every query had the top k."""
    return f"; {short} of them got fewer (as few as {fewest}), all the search reached" if short else ""


@contextmanager
def resumable_run(output: Path, key: str, fmt: str, tag: str, depth: int, total: int) -> Iterator[PartialRun]:
    """The partial run of ``output`` for the search ``key`` of ``total`` queries, held against a second search of the
    same output; a failure before any batch is complete leaves nothing behind (no partial file, no folder it made)."""
    with folders_made_for(through_link(output)), exclusive_build(output, "search"):
        partial = PartialRun(output, key, fmt, tag, depth, total)
        try:
            yield partial
        except BaseException:
            if partial.queries_done == 0:
                partial.discard()
            raise


class StreamedRun:
    """Runs of successive query batches as one run for the run writers, which only iterate ``items()``."""

    def __init__(self, batches: Iterator[Run]) -> None:
        self._batches = batches
        self.hit_counts: list[int] = []

    def items(self) -> Iterator[tuple[str, dict[str, float]]]:
        for part in self.parts():
            yield from part.items()

    def parts(self) -> Iterator[Run]:
        """The batches as they come, their hits counted for ``shortfall``."""
        for part in self._batches:
            self.hit_counts.extend(len(hits) for hits in part.values())
            yield part

    def shortfall(self, depth: int) -> str:
        short = [count for count in self.hit_counts if count < depth]
        return shortfall_note(len(short), min(short, default=None))


Search = Callable[[int, Callable[[int], None]], Iterator[Run]]
"""The batches of a search from query ``start`` on, calling ``progress`` with each batch's query count."""


def resumes(output: Path | None) -> bool:
    """Whether a search into ``output`` goes on from its partial run when rerun: a file by name does, standard output
    and a stream written in place (a pipe, /dev/stdout) do not."""
    return output is not None and not written_in_place(output)


def write_search_run(search: Search, total: int, output: Path | None, fmt: str, tag: str, depth: int,
                     key: str) -> str:
    """Search every query into ``output`` (None: standard output) with a progress bar; a file is resumed from its
    partial run when ``key`` is the same. Returns the summary's note on queries that got fewer than ``depth``."""
    if not resumes(output):
        with tqdm(total=total, desc="search", unit="q", file=sys.stderr) as bar:
            run = StreamedRun(search(0, bar.update))
            if output:  # a stream by name gets batch after batch
                write_run(run, output, fmt, tag)
            else:  # each batch checked whole, then printed: holding the whole run took gigabytes for many queries
                for part in run.parts():
                    write_run(part, None, fmt, tag, whole=False)
                check_some_hit(fmt, sum(run.hit_counts), len(run.hit_counts))
        return run.shortfall(depth)
    with resumable_run(output, key, fmt, tag, depth, total) as partial:
        if partial.note:
            print(partial.note, file=sys.stderr)
        done = partial.queries_done
        desc = f"search ({done} already done)" if done else "search"
        with tqdm(total=total, initial=done, desc=desc, unit="q", file=sys.stderr) as bar:
            partial.write(search(done, bar.update))  # one batch of hits held at a time
        return partial.shortfall()
