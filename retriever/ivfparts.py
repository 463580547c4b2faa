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


@dataclass(frozen=True)
class PartResult:
    path: str
    added: int
    held_vectors: np.ndarray
    held_labels: np.ndarray


def fill_part(trained_path: str, slices: list[ShardSlice], output: str, threads: int = 1) -> PartResult:
    """Add the slices' vectors to a copy of the trained empty index and write it to ``output``.

    The shards were checked against the corpus before (their content hashes), so labels computed
    from their place in the split are the documents' doc-store rows.
    """
    faiss.omp_set_num_threads(threads)
    index = faiss.read_index(trained_path)
    held_vectors, held_labels, added = [], [], 0
    for piece in slices:
        ids, vectors = read_shard(Path(piece.path))
        labels = piece.first_label + piece.stride * np.arange(len(ids), dtype=np.int64)
        keep = np.ones(len(ids), dtype=bool)
        keep[list(piece.held)] = False
        index.add_with_ids(np.ascontiguousarray(vectors[keep]), labels[keep])
        added += int(keep.sum())
        held_vectors.append(vectors[~keep])
        held_labels.append(labels[~keep])
    atomic_write(output, lambda tmp: faiss.write_index(index, str(tmp)))
    dim = index.d
    return PartResult(output, added,
                      np.concatenate(held_vectors) if held_vectors else np.empty((0, dim), np.float32),
                      np.concatenate(held_labels) if held_labels else np.empty(0, np.int64))
