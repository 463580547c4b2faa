"""Top-k cuts in the one tie order (``runs.rank_order``: float32 score descending, then id descending).

FAISS and bm25s break ties by their own row order, so cutting their top k lets that order choose
which of the documents tied at the k-th score are kept: ``k=3`` and ``k=4`` could disagree on the
first three, and a server batching requests of different k could answer differently under load.
Here each search asks for one more hit than needed; while the tied block at the cut runs to the end
of what came back, that query is searched again for twice as many, up to ``MAX_EXTRA`` beyond k. Rows are then put in
``rank_order`` and cut, so any prefix of a result is the result for the smaller k.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from retriever.runs import rank_order

# How far past k a search goes to find every document tied at the cut. Past it, which of a larger
# tied block are kept follows the engine's order: a bound on the work one query can cause.
MAX_EXTRA = 4096

Ranked = tuple[np.ndarray, np.ndarray]


def _ties_may_continue(scores: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Per row: whether the block tied with the k-th hit runs to the last hit returned (so more may follow)."""
    if scores.shape[1] <= k:
        return np.zeros(len(scores), dtype=bool)
    as_f32 = scores.astype(np.float32)
    return (labels[:, -1] >= 0) & (as_f32[:, k - 1] == as_f32[:, -1])


def _tied_with_previous(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per hit after a row's first: whether its float32 score equals the hit's before it (padding never ties)."""
    as_f32 = scores.astype(np.float32)
    return (as_f32[:, 1:] == as_f32[:, :-1]) & (labels[:, 1:] >= 0)


def in_rank_order(scores: np.ndarray, labels: np.ndarray, ids_of: Callable[[Sequence[int]], list[str]],
                  cut: int | None = None) -> Ranked:
    """Rows (score-descending, padded with -1 labels at the end) with their tied blocks put in ``rank_order``;
    only hits in a tied block have their ids looked up. With ``cut``, only the block tied across it is ordered:
    that decides which documents a cut keeps, and a reader blind to order within a block (fusion) needs no more."""
    scores, labels = scores.copy(), labels.copy()
    as_f32 = scores.astype(np.float32)
    same_as_previous = _tied_with_previous(scores, labels)
    if cut is not None:
        across = np.zeros_like(same_as_previous)
        if 0 < cut <= same_as_previous.shape[1]:
            straddling = same_as_previous[:, cut - 1]
            across[straddling] = same_as_previous[straddling] & (as_f32[straddling, 1:] == as_f32[straddling, cut, None])
        same_as_previous = across
    for row in np.flatnonzero(same_as_previous.any(axis=1)):
        tied = np.r_[same_as_previous[row], False] | np.r_[False, same_as_previous[row]]
        positions = np.flatnonzero(tied)
        # Ranking just the tied hits by rank_order keeps each block where it was (blocks differ in score).
        order = positions[rank_order(ids_of(labels[row, positions].tolist()), as_f32[row, positions].tolist())]
        scores[row, positions] = scores[row, order]
        labels[row, positions] = labels[row, order]
    return scores, labels


def top_k(search: Callable[[np.ndarray, int], Ranked], queries: int, k: int, available: int,
          ids_of: Callable[[Sequence[int]], list[str]], order_within_ties: bool = True) -> Ranked:
    """The first k hits per query in ``rank_order``; ``search(rows, depth)`` is an engine's score-descending
    top-``depth`` for those query rows, and ``available`` the most hits it can return. Only the queries whose
    tie at the cut is still open are searched again, deeper. Without ``order_within_ties`` the same documents
    are kept, but tied blocks before the cut stay in the engine's order (for fusion, which reads a block as one)."""
    limit = min(available, k + MAX_EXTRA)
    depth = min(k + 1, limit)
    rows = np.arange(queries)
    scores, labels = search(rows, depth)
    if not _tied_with_previous(scores, labels).any():  # no tie anywhere: the usual case
        return scores[:, :k], labels[:, :k]
    width = min(k, scores.shape[1])
    kept_scores = np.empty((queries, width), dtype=scores.dtype)
    kept_labels = np.empty((queries, width), dtype=labels.dtype)
    while True:
        still_open = _ties_may_continue(scores, labels, k) & (depth < limit)
        done = ~still_open
        ordered_scores, ordered_labels = in_rank_order(scores[done], labels[done], ids_of,
                                                       None if order_within_ties else width)
        kept_scores[rows[done]], kept_labels[rows[done]] = ordered_scores[:, :width], ordered_labels[:, :width]
        if not still_open.any():
            return kept_scores, kept_labels
        rows, depth = rows[still_open], min(2 * depth, limit)
        scores, labels = search(rows, depth)
