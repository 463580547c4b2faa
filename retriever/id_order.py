"""``ids.sorted.arrow``: the doc store's ids in sorted order, each with its row, for id → row lookups
by binary search (see ``retriever.docstore.MappedDocuments``).

Built by an external sort, so memory stays bounded however large the collection: runs of at most
``run_rows`` ids are sorted and written as Arrow files, then merged block by block (all ids up to
the smallest of the runs' current block ends are final; they are sorted together and appended).
The merged columns are appended to plain files and written out as the one record batch the file
has always held, from memory maps of those files: its pages are the page cache's, not the
process's, so old and new index folders read alike.
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retriever.errors import RetrieverError
from retriever.files import atomic_write
from retriever.pid_names import writer_name

ID_ORDER_SCHEMA = pa.schema([("id", pa.string()), ("row", pa.int64())])
# Ids sorted in memory at once (and at most this many merged per round): this, not the collection's size,
# sets the sort's memory.
RUN_ROWS = 1_000_000
_MIN_BLOCK = 1024
_MAX_ID_BYTES = 2**31 - 1  # Arrow `string` (32-bit offsets): the limit of the file's format


def write_id_order(docstore: pa.ipc.RecordBatchFileReader, target: Path, run_rows: int = RUN_ROWS,
                   source: Path | str = "the corpus") -> None:
    """Write ``target`` (atomically) from the mapped doc store; refuse duplicate ids, naming ``source``
    (the corpus file) and the two records that share one."""
    work = target.with_name(f".{target.name}.sorting-{writer_name()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        count = sum(docstore.get_batch(i).num_rows for i in range(docstore.num_record_batches))
        runs = math.ceil(count / run_rows)
        block = max(_MIN_BLOCK, run_rows // max(runs, 1))
        paths = _write_runs(docstore, work, run_rows, block)
        columns = _ColumnFiles(work, str(source))
        _merge(paths, columns)
        columns.close()
        atomic_write(target, lambda tmp: write_arrow_batch(columns.mapped_batch(), tmp))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_arrow_batch(batch: pa.RecordBatch, path: Path) -> None:
    """One record batch as an Arrow IPC file: the layout the sorted id order and BM25 vocabulary are mapped in."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def _write_runs(docstore: pa.ipc.RecordBatchFileReader, work: Path, run_rows: int, block: int) -> list[Path]:
    """Sorted runs of consecutive doc-store rows, each an Arrow file of ``block``-row batches."""
    paths: list[Path] = []
    pending: list[pa.Array] = []
    start = held = 0
    for number in range(docstore.num_record_batches):
        ids = docstore.get_batch(number).column("id")
        while len(ids):
            taken = ids.slice(0, run_rows - held)
            pending.append(taken)
            held += len(taken)
            ids = ids.slice(len(taken))
            if held == run_rows:
                paths.append(_write_run(pending, start, work / f"run-{len(paths):05d}.arrow", block))
                pending, start, held = [], start + held, 0
    if held:
        paths.append(_write_run(pending, start, work / f"run-{len(paths):05d}.arrow", block))
    return paths


def _write_run(pieces: list[pa.Array], start: int, path: Path, block: int) -> Path:
    ids = pa.chunked_array(pieces, pa.string())
    order = pc.sort_indices(ids)
    run = pa.table({"id": ids.take(order), "row": pc.add(order.cast(pa.int64()), start)}, schema=ID_ORDER_SCHEMA)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, ID_ORDER_SCHEMA) as writer:
        writer.write_table(run, max_chunksize=block)
    return path


class _RunCursor:
    """The current batch of one run file (mapped), or None once the run is used up."""

    def __init__(self, path: Path) -> None:
        self._reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        self._next = 0
        self.block: pa.RecordBatch | None = None
        self.advance()

    def advance(self) -> None:
        self.block = None
        while self.block is None and self._next < self._reader.num_record_batches:
            batch = self._reader.get_batch(self._next)
            self._next += 1
            self.block = batch if batch.num_rows else None

    def take_up_to(self, cutoff: str) -> pa.RecordBatch:
        """The block's rows with ids ≤ cutoff (a prefix: the run is sorted)."""
        taken = pc.sum(pc.less_equal(self.block.column("id"), cutoff)).as_py() or 0
        head, self.block = self.block.slice(0, taken), self.block.slice(taken)
        if not self.block.num_rows:
            self.advance()
        return head


def _merge(paths: list[Path], columns: _ColumnFiles) -> None:
    """k-way merge of sorted runs, a round at a time: every id up to the smallest current block end is
    in the current blocks (each run's later blocks start above it), so those rows are final."""
    cursors = [cursor for cursor in map(_RunCursor, paths) if cursor.block is not None]
    while cursors:
        cutoff = min(cursor.block.column("id")[-1].as_py() for cursor in cursors)
        final = pa.Table.from_batches([cursor.take_up_to(cutoff) for cursor in cursors], ID_ORDER_SCHEMA)
        final = final.take(pc.sort_indices(final, sort_keys=[("id", "ascending")])).combine_chunks()
        columns.append(final.column("id").chunk(0), final.column("row").chunk(0))
        cursors = [cursor for cursor in cursors if cursor.block is not None]


class _ColumnFiles:
    """The sorted columns as raw Arrow buffers in three files, checked for duplicate ids on the way."""

    def __init__(self, work: Path, source: str) -> None:
        self._source = source
        self._paths = {name: work / f"{name}.bin" for name in ("offsets", "data", "rows")}
        self._files = {name: open(path, "wb") for name, path in self._paths.items()}
        self._files["offsets"].write(np.zeros(1, np.int32).tobytes())
        self._bytes, self._count, self._last = 0, 0, (None, -1)

    def append(self, ids: pa.StringArray, rows: pa.Int64Array) -> None:
        if not len(ids):
            return
        _check_unique(ids, rows, self._last, self._source)
        offsets = np.frombuffer(ids.buffers()[1], np.int32)[ids.offset:ids.offset + len(ids) + 1].astype(np.int64)
        if self._bytes + offsets[-1] - offsets[0] > _MAX_ID_BYTES:
            raise RetrieverError("the corpus's ids total more than 2 GiB, the limit of ids.sorted.arrow; "
                                 "use shorter document ids")
        self._files["data"].write(memoryview(ids.buffers()[2])[offsets[0]:offsets[-1]])
        self._files["offsets"].write((offsets[1:] - offsets[0] + self._bytes).astype(np.int32).tobytes())
        self._files["rows"].write(rows.to_numpy(zero_copy_only=False).astype(np.int64).tobytes())
        self._bytes += int(offsets[-1] - offsets[0])
        self._count += len(ids)
        self._last = (ids[-1].as_py(), rows[-1].as_py())

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()

    def mapped_batch(self) -> pa.RecordBatch:
        """The whole sorted map as one batch whose buffers are memory maps of the column files."""
        buffers = {name: _mapped_buffer(path) for name, path in self._paths.items()}
        ids = pa.StringArray.from_buffers(self._count, buffers["offsets"], buffers["data"])
        rows = pa.Array.from_buffers(pa.int64(), self._count, [None, buffers["rows"]])
        return pa.record_batch([ids, rows], schema=ID_ORDER_SCHEMA)


def _mapped_buffer(path: Path) -> pa.Buffer:
    if not path.stat().st_size:  # an empty file cannot be mapped
        return pa.py_buffer(b"")
    return pa.memory_map(str(path), "r").read_buffer()


def _check_unique(ids: pa.StringArray, rows: pa.Int64Array, previous: tuple[str | None, int], source: str) -> None:
    """Sorted ids repeat only next to each other: in this block, or across its start."""
    at = 0 if previous[0] == ids[0].as_py() else None
    if at is None and len(ids) > 1:
        same = pc.equal(ids.slice(1), ids.slice(0, len(ids) - 1))
        if pc.any(same).as_py():
            at = pc.index(same, True).as_py() + 1
    if at is not None:
        first = previous[1] if at == 0 else rows[at - 1].as_py()
        records = sorted((first + 1, rows[at].as_py() + 1))
        raise RetrieverError(f"{source}: duplicate document id {ids[at].as_py()!r} (records {records[0]} and "
                             f"{records[1]}); give every document its own id")


def sorted_position(sorted_keys: pa.StringArray, key: str) -> int | None:
    """Where ``key`` is in a sorted Arrow string column (a memory-mapped one reads only the ~log2(n)
    pages it touches), or None. Arrow sorts strings by UTF-8 bytes, the order of Python's ``<``."""
    low, high = 0, len(sorted_keys)
    while low < high:
        middle = (low + high) // 2
        if sorted_keys[middle].as_py() < key:
            low = middle + 1
        else:
            high = middle
    return low if low < len(sorted_keys) and sorted_keys[low].as_py() == key else None
