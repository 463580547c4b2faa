from __future__ import annotations

import numpy as np
import pytest

from retriever.errors import RetrieverError
from retriever.fusion import FusionParams, fuse, fuse_one


def ranking(labels, scores=None):
    labels = np.array(labels, dtype=np.int64)
    scores = np.array(scores if scores is not None else np.linspace(1.0, 0.5, len(labels)), dtype=np.float32)
    return scores, labels


def test_rrf_sums_reciprocal_ranks_and_breaks_ties_by_label():
    scores, labels = fuse_one(ranking([1, 2, 3]), ranking([3, 4]), FusionParams("rrf", rrf_k=60), k=10)
    assert labels.tolist() == [3, 1, 2, 4]
    assert scores[0] == pytest.approx(1 / 61 + 1 / 63) and scores[1] == pytest.approx(1 / 61)
    assert scores[2] == pytest.approx(1 / 62) == scores[3]


@pytest.mark.parametrize("alpha, expected", [(1.0, [7, 8]), (0.0, [9, 5])])
def test_convex_weight_one_or_zero_gives_back_one_list(alpha, expected):
    dense = ranking([7, 8, 9], [0.9, 0.5, 0.1])
    lexical = ranking([9, 5, 7], [12.0, 6.0, 1.0])
    _, labels = fuse_one(dense, lexical, FusionParams("convex", alpha=alpha), k=2)
    assert labels.tolist() == expected


def test_convex_uses_score_gaps_not_just_ranks():
    # dense nearly ties 1 and 2, BM25 strongly prefers 2: an even mix follows BM25, while RRF (ranks
    # only) sees a tie and falls back to the label order.
    dense = ranking([1, 2, 3], [0.801, 0.800, 0.1])
    lexical = ranking([2, 1, 3], [20.0, 1.1, 1.0])
    assert fuse_one(dense, lexical, FusionParams("convex", alpha=0.5), k=2)[1].tolist() == [2, 1]
    assert fuse_one(dense, lexical, FusionParams("rrf"), k=2)[1].tolist() == [1, 2]


def test_batch_fusion_skips_padding_and_pads_to_k():
    dense = (np.array([[0.9, 0.8], [0.7, -np.inf]], np.float32), np.array([[1, 2], [3, -1]]))
    lexical = (np.array([[5.0, -np.inf], [-np.inf, -np.inf]], np.float32), np.array([[2, -1], [-1, -1]]))
    scores, labels = fuse(dense, lexical, FusionParams(), k=4)
    assert labels.tolist() == [[2, 1, -1, -1], [3, -1, -1, -1]]
    assert np.isneginf(scores[0, 2:]).all()


def test_params_validate_and_a_lone_alpha_means_convex():
    with pytest.raises(RetrieverError, match="alpha"):
        FusionParams(alpha=1.5)
    with pytest.raises(RetrieverError, match="unknown fusion"):
        FusionParams("max")
    tuned = FusionParams("rrf", rrf_k=20, depth=500)
    assert tuned.overridden(alpha=0.3) == FusionParams("convex", rrf_k=20, alpha=0.3, depth=500)
    assert FusionParams.from_record(tuned.record() | {"tuned": {}}) == tuned
