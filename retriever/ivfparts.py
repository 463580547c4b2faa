"""Filling one part of an on-disk IVF index: the work a process (or Ray task) does.

Kept apart from ``retriever.indexing`` so a worker process imports only FAISS, NumPy and
PyArrow, not the encoder stack.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from retriever.errors import RetrieverError
from retriever.files import atomic_write, read_json, write_json
from retriever.integrity import file_sha256
from retriever.shards import read_shard, read_shard_metadata
from retriever.part_memory import check_filling_memory


@dataclass(frozen=True)
class ShardSlice:
    """One shard's place in the index: its i-th row gets label ``first_label + stride * i``
    (its doc-store row: worker w of n encoded corpus positions w, w+n, ...); ``held`` rows stay out."""

    path: str
    first_label: int
    stride: int
    held: tuple[int, ...] = ()


def held_path(part: str | Path) -> Path:
    """Where a part keeps the vectors it held out for tuning (and their labels)."""
    return Path(f"{part}.held.npz")


def fill_part(trained_path: str, slices: list[ShardSlice], output: str, threads: int = 1, sharing: int = 1,
              sharing_flag: str = "--parallel-parts") -> int:
    """Add the slices' vectors to a copy of the trained empty index and write it to ``output``; return
    how many were added (``sharing``: how many parts are filled at once on this machine, sharing the memory, as
    ``sharing_flag`` sets: worker processes and Ray tasks alike go through ``check_filling_memory`` here).

    The held-out vectors go to ``held_path(output)`` first, and each file is written under a temporary
    name then renamed, so a part file with its final name is complete, held-out vectors included.
    The shards were checked against the corpus before (their content hashes), so labels computed
    from their place in the split are the documents' doc-store rows.
    """
    faiss.omp_set_num_threads(threads)
    index = read_part_file(trained_path)
    rows = [read_shard_metadata(Path(piece.path))["shard"]["rows"] for piece in slices]
    check_filling_memory(index, max(rows, default=0), sum(rows), output, sharing, sharing_flag)
    held_vectors, held_labels, added = [np.empty((0, index.d), np.float32)], [np.empty(0, np.int64)], 0
    for piece in slices:
        ids, vectors = read_shard(Path(piece.path))
        labels = piece.first_label + piece.stride * np.arange(len(ids), dtype=np.int64)
        keep = np.ones(len(ids), dtype=bool)
        keep[list(piece.held)] = False
        index.add_with_ids(np.ascontiguousarray(vectors[keep]), labels[keep])
        added += int(keep.sum())
        held_vectors.append(vectors[~keep])
        held_labels.append(labels[~keep])
    held = {"vectors": np.concatenate(held_vectors), "labels": np.concatenate(held_labels)}
    atomic_write(held_path(output), lambda tmp: _save_arrays(tmp, held))
    atomic_write(output, lambda tmp: faiss.write_index(index, str(tmp)))
    write_record(output, [Path(output), held_path(output)], **part_identity(recorded_sha256(trained_path), slices),
                 ntotal=int(index.ntotal))
    return added


def _save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as handle:  # a file object: given a name, np.savez would add ".npz" to it
        np.savez(handle, **arrays)


def read_held(part: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """The (vectors, labels) a finished part held out."""
    with np.load(held_path(part), allow_pickle=False) as held:
        return held["vectors"], held["labels"]


def read_part_file(path: str | Path) -> faiss.Index:
    """A trained index or part file, its damage (FAISS's "read error", several lines of C++) one line naming it."""
    try:
        return faiss.read_index(str(path))
    except RuntimeError:
        raise RetrieverError(f"{path}: FAISS cannot read it (damaged or truncated?); delete it and rerun the same "
                             "command, which builds it again") from None


def record_path(path: str | Path) -> Path:
    """Where the record of a written part (or trained index) lies: beside it, so that a part copied or restored
    without it is not trusted."""
    return Path(f"{path}.json")


def part_identity(trained_sha256: str, slices: list[ShardSlice]) -> dict:
    """What a part's content follows from: the trained index it is a copy of and its shards' places (by name, so
    a moved project folder keeps its parts)."""
    places = [[Path(piece.path).name, piece.first_label, piece.stride, list(piece.held)] for piece in slices]
    return {"trained_sha256": trained_sha256,
            "slices_sha256": hashlib.sha256(json.dumps(places).encode()).hexdigest()}


def file_digest(path: Path) -> list:
    """[size, SHA-256] of a file: what a record holds of it."""
    return [path.stat().st_size, file_sha256(path)]


def write_record(path: str | Path, files: list[Path], **identity) -> None:
    """Record ``files`` (written whole before this) and what they were made from; written last, so a kill
    before it leaves files without a record, which are made again (``record_problem``)."""
    write_json(record_path(path), {**identity, "files": {file.name: file_digest(file) for file in files}})


def record_problem(path: str | Path, files: list[Path], **identity) -> str | None:
    """Why the ``files`` recorded at ``path`` cannot be reused (damaged, replaced, missing, unrecorded or made
    from something else), or None when they are what was written."""
    try:
        record = read_json(record_path(path))
    except RetrieverError:
        return "it has no readable record (a killed run or an older version left it)"
    if not isinstance(record, dict) or any(record.get(key) != value for key, value in identity.items()):
        return "its record is of other inputs"
    recorded = record.get("files") if isinstance(record.get("files"), dict) else {}
    for file in files:
        if not file.is_file():
            return f"{file.name} is missing"
        entry = recorded.get(file.name)  # the size first: a truncated file is not read through
        if not isinstance(entry, list) or entry[:1] != [file.stat().st_size] or entry != file_digest(file):
            return f"{file.name} differs from its record (damaged or replaced)"
    return None


def recorded_sha256(path: str | Path) -> str:
    """The SHA-256 that the record of a verified file gives it."""
    try:
        return read_json(record_path(path))["files"][Path(path).name][1]
    except (RetrieverError, KeyError, IndexError, TypeError):
        raise RetrieverError(f"{record_path(path)}: missing or damaged; delete it and rerun the same command") from None
