"""Filling one part of an on-disk IVF index: the work a process (or Ray task) does.

Kept apart from ``retriever.indexing`` so a worker process imports only FAISS, NumPy and
PyArrow, not the encoder stack.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from retriever.files import atomic_write
from retriever.shards import read_shard


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


def fill_part(trained_path: str, slices: list[ShardSlice], output: str, threads: int = 1) -> int:
    """Add the slices' vectors to a copy of the trained empty index and write it to ``output``; return
    how many were added.

    The held-out vectors go to ``held_path(output)`` first, and each file is written under a temporary
    name then renamed, so a part file with its final name is complete, held-out vectors included.
    The shards were checked against the corpus before (their content hashes), so labels computed
    from their place in the split are the documents' doc-store rows.
    """
    faiss.omp_set_num_threads(threads)
    index = faiss.read_index(trained_path)
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
    return added


def _save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as handle:  # a file object: given a name, np.savez would add ".npz" to it
        np.savez(handle, **arrays)


def read_held(part: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """The (vectors, labels) a finished part held out."""
    with np.load(held_path(part), allow_pickle=False) as held:
        return held["vectors"], held["labels"]
