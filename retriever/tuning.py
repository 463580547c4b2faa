"""Pick nprobe / efSearch for a target recall, measured rather than guessed.

Queries are a sample of the collection's own vectors and the truth is an exact search over all
shards, so the choice fits this collection's geometry; the smallest setting that reaches the
target is kept because it is the fastest one that does.
"""
from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from retriever.errors import RetrieverError
from retriever.shards import iter_shard_batches

NPROBE_CANDIDATES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
EF_SEARCH_CANDIDATES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048)


def downcast_hnsw(index: faiss.Index):
    try:
        downcast = faiss.downcast_index(index)
    except RuntimeError:
        return None
    return downcast if hasattr(downcast, "hnsw") else None


def ivf_part(index: faiss.Index):
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def apply_search_params(index: faiss.Index, nprobe: int | None = None, ef_search: int | None = None) -> None:
    """Set nprobe / efSearch on whichever part of the index has them."""
    if nprobe is not None:
        ivf = ivf_part(index)
        if ivf is not None:
            ivf.nprobe = int(nprobe)
    if ef_search is not None:
        hnsw = downcast_hnsw(index)
        if hnsw is not None:
            hnsw.hnsw.efSearch = int(ef_search)


def exact_neighbours(shards: list[Path], queries: np.ndarray, k: int) -> np.ndarray:
    """Row ids of the exact top-k by inner product, streaming the shards."""
    best_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_ids = np.full((len(queries), k), -1, dtype=np.int64)
    offset = 0
    for _, vectors in iter_shard_batches(shards):
        scores = queries @ vectors.T
        ids = np.broadcast_to(np.arange(offset, offset + len(vectors)), scores.shape)
        merged_scores = np.concatenate([best_scores, scores], axis=1)
        merged_ids = np.concatenate([best_ids, ids], axis=1)
        top = np.argpartition(-merged_scores, min(k, merged_scores.shape[1] - 1), axis=1)[:, :k]
        best_scores = np.take_along_axis(merged_scores, top, axis=1)
        best_ids = np.take_along_axis(merged_ids, top, axis=1)
        offset += len(vectors)
    return best_ids


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean share of the exact top-k that the approximate search returned."""
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k]) & set(t)) / k for f, t in zip(found, truth)]))


def tunable_parameter(index: faiss.Index) -> tuple[str, tuple[int, ...]] | None:
    ivf = ivf_part(index)
    if ivf is not None:
        return "nprobe", tuple(n for n in NPROBE_CANDIDATES if n <= ivf.nlist) or (ivf.nlist,)
    if downcast_hnsw(index) is not None:
        return "ef_search", EF_SEARCH_CANDIDATES
    return None


def choose_search_params(index: faiss.Index, queries: np.ndarray, truth: np.ndarray,
                         target_recall: float) -> dict:
    """The smallest nprobe/efSearch whose measured recall@k reaches the target."""
    if not 0 < target_recall <= 1:
        raise RetrieverError("--target-recall must be in (0, 1]")
    k = truth.shape[1]
    tunable = tunable_parameter(index)
    if tunable is None:
        _, found = index.search(queries, k)
        return {"parameter": None, "value": None, "measured_recall": recall_at_k(found, truth),
                "target_recall": target_recall, "k": k, "sample_queries": len(queries), "reached": True}
    name, candidates = tunable
    sweep = []
    for value in candidates:
        apply_search_params(index, **{name: value})
        _, found = index.search(queries, k)
        recall = recall_at_k(found, truth)
        sweep.append({"value": value, "recall": round(recall, 4)})
        if recall >= target_recall:
            break
    chosen = sweep[-1]
    return {"parameter": name, "value": chosen["value"], "measured_recall": chosen["recall"],
            "target_recall": target_recall, "k": k, "sample_queries": len(queries),
            "reached": chosen["recall"] >= target_recall, "sweep": sweep}
