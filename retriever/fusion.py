"""Fusing a dense and a lexical ranking into one: reciprocal-rank fusion or a convex combination.

RRF needs no tuning and ignores score scales, which is why it is the default. The convex combination
``alpha * z(dense) + (1 - alpha) * z(bm25)`` uses the scores themselves, z-normalised per query over
each list's top ``depth``; it can do better with ``alpha`` tuned on judged queries
(``retriever.fusion_tuning``). A document missing from one list gets that list's lowest normalised
score there, as Pyserini's hybrid search does.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from retriever.errors import RetrieverError

MODES = ("dense", "bm25", "hybrid")
METHODS = ("rrf", "convex")


@dataclass(frozen=True)
class FusionParams:
    method: str = "rrf"
    rrf_k: float = 60.0
    alpha: float = 0.5
    depth: int = 1000

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise RetrieverError(f"unknown fusion {self.method!r}; use one of {', '.join(METHODS)}")
        if not 0.0 <= self.alpha <= 1.0:
            raise RetrieverError(f"--alpha {self.alpha} is outside 0..1 (the weight of the dense score)")
        if self.rrf_k <= 0 or self.depth < 1:
            raise RetrieverError("--rrf-k must be positive and --fusion-depth at least 1")

    def record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict | None) -> FusionParams:
        known = {name: record[name] for name in ("method", "rrf_k", "alpha", "depth") if record and name in record}
        return cls(**known)

    def overridden(self, method: str | None = None, rrf_k: float | None = None, alpha: float | None = None,
                   depth: int | None = None) -> FusionParams:
        """These params with the flags a user gave; a lone --alpha means the convex combination."""
        if method is None and alpha is not None:
            method = "convex"
        given = {"method": method, "rrf_k": rrf_k, "alpha": alpha, "depth": depth}
        return replace(self, **{name: value for name, value in given.items() if value is not None})


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise RetrieverError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    return mode


def _zscore(scores: np.ndarray) -> np.ndarray:
    if len(scores) == 0:
        return scores
    spread = scores.std()
    return (scores - scores.mean()) / spread if spread > 0 else np.zeros_like(scores)


def _contributions(scores: np.ndarray, params: FusionParams) -> tuple[np.ndarray, float]:
    """Each listed document's share of the fused score, and the share of a document the list missed."""
    if params.method == "rrf":
        return 1.0 / (params.rrf_k + np.arange(1, len(scores) + 1)), 0.0
    normalised = _zscore(scores.astype(np.float64))
    return normalised, float(normalised.min()) if len(normalised) else 0.0


def fuse_one(dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray], params: FusionParams,
             k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (scores, labels) of one query from two rank-ordered (scores, labels) lists; -1 labels are padding."""
    (d_scores, d_labels), (l_scores, l_labels) = [(s[l >= 0], l[l >= 0]) for s, l in (dense, lexical)]
    labels = np.union1d(d_labels, l_labels)
    weights = (params.alpha, 1.0 - params.alpha) if params.method == "convex" else (1.0, 1.0)
    fused = np.zeros(len(labels), dtype=np.float64)
    for weight, scores, listed in zip(weights, (d_scores, l_scores), (d_labels, l_labels)):
        share, missed = _contributions(scores, params)
        column = np.full(len(labels), missed)
        column[np.searchsorted(labels, listed)] = share
        fused += weight * column
    order = np.lexsort((labels, -fused))[:k]
    return fused[order].astype(np.float32), labels[order]


def fuse(dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray], params: FusionParams,
         k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise ``fuse_one`` over a batch of queries, padded to k with -1 labels like a FAISS result."""
    count = len(dense[0])
    scores = np.full((count, k), -np.inf, dtype=np.float32)
    labels = np.full((count, k), -1, dtype=np.int64)
    for row in range(count):
        row_scores, row_labels = fuse_one((dense[0][row], dense[1][row]), (lexical[0][row], lexical[1][row]),
                                          params, k)
        scores[row, :len(row_scores)] = row_scores
        labels[row, :len(row_labels)] = row_labels
    return scores, labels
