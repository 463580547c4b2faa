"""Exact top-k by inner product: the truth recall is measured against, and the dev evaluation's search.

One implementation, FAISS's ``knn_ground_truth``: the vectors come block by block (a shard, or one
array), so memory stays at one block plus a k-per-query heap. Ties are left in FAISS's heap order;
whatever ranks hits for people (search results, runs, metrics) re-orders them with ``runs.rank_order``.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import faiss
import numpy as np
from faiss.contrib.exhaustive_search import knn_ground_truth

from retriever.shards import iter_shard_batches


def exact_top_k(queries: np.ndarray, blocks: Iterable[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows) of each query's exact top-k, best first; rows count across the blocks, -1 where fewer
    than k vectors exist."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    scores, rows = knn_ground_truth(queries, (np.ascontiguousarray(b, dtype=np.float32) for b in blocks if len(b)),
                                    k, metric_type=faiss.METRIC_INNER_PRODUCT)
    rows[scores <= np.finfo(np.float32).min] = -1  # a block's padding when it holds fewer than k vectors
    return scores, rows


def exact_neighbours(shards: list[Path], queries: np.ndarray, k: int,
                     exclude_rows: np.ndarray | None = None) -> np.ndarray:
    """Row ids of the exact top-k, best first, streaming the shards.

    With ``exclude_rows`` (sorted global rows), those vectors are skipped and the others are
    numbered consecutively, as they are in an index built without them.
    """
    return exact_top_k(queries, kept_vectors(shards, exclude_rows), k)[1]


def kept_vectors(shards: list[Path], exclude_rows: np.ndarray | None,
                 progress: str | None = None) -> Iterator[np.ndarray]:
    """The shards' vectors block by block, without ``exclude_rows`` (sorted global rows); ``progress`` names a bar
    over the shards (``iter_shard_batches``)."""
    offset = 0
    for _, vectors in iter_shard_batches(shards, progress):
        if exclude_rows is not None and len(exclude_rows):
            local = exclude_rows[(exclude_rows >= offset) & (exclude_rows < offset + len(vectors))] - offset
            offset += len(vectors)
            yield np.delete(vectors, local, axis=0)
        else:
            offset += len(vectors)
            yield vectors
