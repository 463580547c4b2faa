"""Top-k cuts that keep the tie order whatever k is: an engine's own tie order never picks who is kept."""
from __future__ import annotations

import numpy as np

from retriever import tie_cut
from retriever.runs import rank_order

# One query: label i has id "d{i:02d}"; labels 1..9 tie at 0.5, and the engine lists them by label ascending,
# the opposite of rank_order's id-descending tie order.
SCORES = [0.9, *[0.5] * 9, 0.1, 0.05]
IDS = [f"d{i:02d}" for i in range(len(SCORES))]


def ids_of(labels):
    return [IDS[label] for label in labels]


class Engine:
    """A fake score-descending top-depth search that remembers the depths it was asked for."""

    def __init__(self, scores=SCORES):
        self.scores, self.depths = np.asarray(scores, dtype=np.float32), []

    def __call__(self, rows, depth):
        self.depths.append(depth)
        order = np.lexsort((np.arange(len(self.scores)), -self.scores))[:depth]
        return np.tile(self.scores[order], (len(rows), 1)), np.tile(order.astype(np.int64), (len(rows), 1))


def expected(k):
    return [IDS.index(d) for d in [IDS[i] for i in rank_order(IDS, SCORES)][:k]]


def test_every_k_keeps_the_first_k_of_rank_order_and_each_prefix_is_the_smaller_k():
    whole = tie_cut.top_k(Engine(), 1, len(SCORES), len(SCORES), ids_of)[1][0].tolist()
    assert whole == expected(len(SCORES))
    for k in range(1, len(SCORES) + 1):
        scores, labels = tie_cut.top_k(Engine(), 1, k, len(SCORES), ids_of)
        assert labels[0].tolist() == expected(k) == whole[:k]
        assert scores.shape == (1, k)


def test_a_tied_block_past_the_cut_is_searched_deeper_until_it_ends():
    engine = Engine()
    tie_cut.top_k(engine, 1, 2, len(SCORES), ids_of)
    assert engine.depths == [3, 6, 12]  # the tie at 0.5 runs to the end of 3 and 6 hits; 12 ends it
    engine = Engine()
    tie_cut.top_k(engine, 1, 1, len(SCORES), ids_of)
    assert engine.depths == [2]  # no tie at the cut: one hit more than asked, once


def test_the_deepening_stops_at_the_bound_and_at_the_collection():
    engine = Engine([0.5] * 50)
    original, tie_cut.MAX_EXTRA = tie_cut.MAX_EXTRA, 5
    try:
        scores, labels = tie_cut.top_k(engine, 1, 3, 50, lambda labels: [f"d{i:02d}" for i in labels])
    finally:
        tie_cut.MAX_EXTRA = original
    assert engine.depths == [4, 8] and labels.shape == (1, 3)
    engine = Engine([0.5] * 5)
    tie_cut.top_k(engine, 1, 3, 5, ids_of)
    assert engine.depths == [4, 5]


def test_padding_is_left_at_the_end_and_rows_without_ties_look_up_no_ids():
    scores = np.array([[0.7, 0.5, 0.5, -np.inf], [0.9, 0.8, -np.inf, -np.inf]], dtype=np.float32)
    labels = np.array([[3, 1, 2, -1], [4, 5, -1, -1]])
    looked_up = []
    ordered = tie_cut.in_rank_order(scores, labels, lambda ls: looked_up.append(list(ls)) or ids_of(ls))
    assert ordered[1].tolist() == [[3, 2, 1, -1], [4, 5, -1, -1]]
    assert looked_up == [[1, 2]]  # only the tied hits


def test_only_queries_whose_tie_is_still_open_are_searched_again():
    tables = [np.asarray(SCORES, dtype=np.float32), np.linspace(1, 0, len(SCORES), dtype=np.float32)]  # 2nd: no tie
    asked = []

    def search(rows, depth):
        asked.append((rows.tolist(), depth))
        orders = [np.lexsort((np.arange(len(tables[r])), -tables[r]))[:depth] for r in rows]
        return np.stack([tables[r][o] for r, o in zip(rows, orders)]), np.stack(orders).astype(np.int64)

    scores, labels = tie_cut.top_k(search, 2, 2, len(SCORES), ids_of)
    assert asked == [([0, 1], 3), ([0], 6), ([0], 12)]
    assert labels.tolist() == [expected(2), [0, 1]]


def test_without_order_within_ties_the_same_documents_are_kept_and_only_the_cut_block_is_ordered():
    """Fusion reads a tied block as one, so hybrid skips ordering blocks before the cut (their id lookups were
    most of what the tie cut added to a hybrid search): which documents a cut keeps must not change."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        scores = np.sort(rng.integers(0, 6, size=rng.integers(2, 30)).astype(np.float32) / 4)[::-1]
        ids = [f"d{i:02d}" for i in rng.permutation(len(scores))]
        looked_up = []

        def ids_looked_up(labels):
            looked_up.append(len(labels))
            return [ids[label] for label in labels]

        for k in range(1, len(scores)):
            ordered = tie_cut.top_k(Engine(scores), 1, k, len(scores), lambda labels: [ids[i] for i in labels])
            looked_up.clear()
            kept = tie_cut.top_k(Engine(scores), 1, k, len(scores), ids_looked_up, order_within_ties=False)
            assert sorted(kept[1][0].tolist()) == sorted(ordered[1][0].tolist())
            assert np.array_equal(np.sort(kept[0][0]), np.sort(ordered[0][0]))
            assert sum(looked_up) <= int((scores == scores[k - 1]).sum())
