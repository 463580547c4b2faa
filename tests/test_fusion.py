from __future__ import annotations

import re

import numpy as np
import pytest

from retriever.errors import RetrieverError
from retriever.fusion import FusionParams, fuse, fuse_one
from retriever.runs import ranked_hits


def ranking(labels, scores=None):
    labels = np.array(labels, dtype=np.int64)
    scores = np.array(scores if scores is not None else np.linspace(1.0, 0.5, len(labels)), dtype=np.float32)
    return scores, labels


def test_rrf_sums_reciprocal_ranks():
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
    # dense nearly ties 1 and 2, BM25 strongly prefers 2: an even mix follows BM25.
    dense = ranking([1, 2, 3], [0.801, 0.800, 0.1])
    lexical = ranking([2, 1, 3], [20.0, 1.1, 1.0])
    assert fuse_one(dense, lexical, FusionParams("convex", alpha=0.5), k=2)[1].tolist() == [2, 1]


def tied_at_the_top():
    """Labels 1 and 2 at ranks (1, 2) and (2, 1): an exact RRF tie. Dense nearly ties them, BM25 puts 2 far
    ahead, so the scores both systems gave favour 2, the larger label."""
    return ranking([1, 2, 3, 4], [0.801, 0.800, 0.3, 0.1]), ranking([2, 1, 3, 4], [20.0, 1.1, 1.0, 0.9])


def test_an_exact_rrf_tie_goes_to_the_higher_even_score_sum_not_the_label():
    dense, lexical = tied_at_the_top()
    scores, labels = fuse_one(dense, lexical, FusionParams("rrf"), k=4)
    assert labels.tolist()[:2] == [2, 1]
    assert scores[0] > scores[1] and scores[0] == pytest.approx(scores[1]) == pytest.approx(1 / 61 + 1 / 62)
    # the same tie with the lists' roles swapped goes the other way: the rule favours no system
    swapped = ranking([2, 1, 3, 4], [0.801, 0.800, 0.3, 0.1]), ranking([1, 2, 3, 4], [20.0, 1.1, 1.0, 0.9])
    assert fuse_one(*swapped, FusionParams("rrf"), k=2)[1].tolist() == [1, 2]


def test_the_fused_order_survives_ranking_by_score_and_doc_id():
    # search results, run files and evaluation re-sort hits with runs.rank_order (float32 score, then doc id
    # descending); the fused scores must not leave it a tie to break another way.
    dense, lexical = tied_at_the_top()
    scores, labels = fuse_one(dense, lexical, FusionParams("rrf"), k=4)
    ids = {1: "doc-b", 2: "doc-a", 3: "doc-d", 4: "doc-c"}  # doc id order alone would put 1 before 2
    hits = ranked_hits([(ids[label], float(score)) for label, score in zip(labels.tolist(), scores)])
    assert [doc_id for doc_id, _ in hits] == [ids[label] for label in labels.tolist()]
    assert np.all(np.diff(scores) < 0)


def placed(length, at, scores=None):
    """A ranking of ``length`` filler labels (1000+) with label -> 1-based rank ``at``."""
    labels = list(range(1000, 1000 + length))
    for label, rank in at.items():
        labels[rank - 1] = label
    return ranking(labels, scores)


def test_sums_that_float32_rounds_together_keep_their_float64_order():
    # at k=60, ranks (261, 263) sum to 1.9e-10 more than (245, 281): the same float32, distinct float64
    dense, lexical = placed(300, {1: 245, 2: 261}), placed(300, {1: 281, 2: 263})
    assert np.float32(1 / 321 + 1 / 323) == np.float32(1 / 305 + 1 / 341) and 1 / 321 + 1 / 323 > 1 / 305 + 1 / 341
    scores, labels = fuse_one(dense, lexical, FusionParams("rrf"), k=600)
    ids = {label: f"doc{label:05d}" for label in labels.tolist()}
    ids[1], ids[2] = "zz-1", "aa-2"  # doc id descending would put 1 first; the float64 sums put 2 first
    order = [doc_id for doc_id, _ in ranked_hits([(ids[lab], float(sc)) for lab, sc in zip(labels.tolist(), scores)])]
    assert order.index("aa-2") < order.index("zz-1")


def test_sums_equal_but_for_float64_rounding_are_a_tie_for_the_score_sum():
    # 1/(60+215) + 1/(60+270) and 2/(60+240) are both 1/150, but float64 makes the second one larger; the
    # dense scores drop steeply after rank 215, so the score sum prefers label 1 at ranks (215, 270).
    dense_scores = np.r_[np.linspace(10.0, 9.0, 215), np.linspace(1.0, 0.9, 85)]
    dense, lexical = placed(300, {1: 215, 2: 240}, dense_scores), placed(300, {1: 270, 2: 240})
    assert 1 / 275 + 1 / 330 < 2 / 300
    _, labels = fuse_one(dense, lexical, FusionParams("rrf"), k=600)
    order = labels.tolist()
    assert order.index(1) < order.index(2)


def test_documents_equal_on_both_keys_stay_tied_for_rank_order():
    # two documents at the same place in identical lists' mirror images tie on RRF and on the score sum
    dense = ranking([1, 2], [1.0, 0.0])
    lexical = ranking([2, 1], [1.0, 0.0])
    scores, labels = fuse_one(dense, lexical, FusionParams("rrf"), k=2)
    assert scores[0] == scores[1]


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


@pytest.mark.parametrize("settings, message", [
    # (they said "--alpha '0.3' is outside 0..1", as if text or True were a number out of range)
    ({"alpha": "0.3"}, "--alpha must be a number from 0 to 1 (the weight of the dense score), not str '0.3'"),
    ({"alpha": True}, "--alpha must be a number from 0 to 1 (the weight of the dense score), not bool True"),
    ({"alpha": None}, "--alpha must be a number from 0 to 1 (the weight of the dense score), not NoneType None"),
    ({"rrf_k": "60"}, "--rrf-k must be a positive number up to 1e6, not '60'"),
    ({"rrf_k": None}, "--rrf-k must be a positive number up to 1e6, not None")])
def test_settings_that_are_not_numbers_are_one_line(settings, message):
    """A library call's FusionParams(alpha="0.3") raised a TypeError from a comparison, and True weighed as 1."""
    with pytest.raises(RetrieverError, match=f"^{re.escape(message)}"):
        FusionParams(**settings)
    FusionParams(alpha=np.float32(0.3), rrf_k=np.int64(20))


def test_a_setting_names_the_method_and_only_the_parameter_it_uses():
    assert FusionParams("convex", rrf_k=20, alpha=0.65).setting() == "convex alpha=0.65"
    assert FusionParams("rrf", rrf_k=60, alpha=0.65).setting() == "rrf rrf_k=60"


def test_a_lone_rrf_k_means_rrf_and_a_flag_of_the_other_method_is_refused():
    tuned_convex = FusionParams("convex", alpha=0.8)
    assert tuned_convex.overridden(rrf_k=30) == FusionParams("rrf", rrf_k=30, alpha=0.8)
    assert tuned_convex.overridden(depth=50) == FusionParams("convex", alpha=0.8, depth=50)
    with pytest.raises(RetrieverError, match="--alpha does not apply to --fusion rrf"):
        tuned_convex.overridden(method="rrf", alpha=0.3)
    with pytest.raises(RetrieverError, match="--rrf-k does not apply to --fusion convex"):
        FusionParams().overridden(method="convex", rrf_k=10)
    with pytest.raises(RetrieverError, match="give one of them"):
        FusionParams().overridden(alpha=0.3, rrf_k=10)


@pytest.mark.parametrize("params", [FusionParams("rrf"), FusionParams("convex", alpha=0.5)])
def test_the_top_k_is_the_head_of_the_full_fused_order(params):
    # only the tie classes that can reach the top k are tie-broken; a class straddling place k must come out
    # the same as in the order of every candidate
    rng = np.random.default_rng(3)
    for _ in range(200):
        dense = ranking(rng.permutation(40)[:25], np.sort(rng.choice([0.9, 0.7, 0.5], 25))[::-1])
        lexical = ranking(rng.permutation(40)[:25], np.sort(rng.choice([3.0, 2.0, 1.0], 25))[::-1])
        _, full_labels = fuse_one(dense, lexical, params, k=50)
        for k in (1, 3, 7, 20):
            _, labels = fuse_one(dense, lexical, params, k=k)
            assert labels.tolist() == full_labels[:k].tolist()



@pytest.mark.parametrize("lexical_order", [[1, 2, 3], [3, 2, 1], [2, 3, 1]])
def test_rrf_of_documents_tied_in_a_list_does_not_depend_on_the_order_the_engine_lists_them(lexical_order):
    # three copies of one passage: tied in both lists, which FAISS and bm25s list in their own row orders
    dense = ranking([3, 2, 1, 4], [0.9, 0.9, 0.9, 0.5])
    lexical = ranking(lexical_order, [2.5, 2.5, 2.5])
    scores, labels = fuse_one(dense, lexical, FusionParams("rrf", rrf_k=60), k=4)
    assert labels[:3].tolist() == [1, 2, 3] and labels[3] == 4
    assert scores[0] == scores[1] == scores[2] == pytest.approx(2 * (1 / 61 + 1 / 62 + 1 / 63) / 3)


@pytest.mark.parametrize("fusion", ["x", {"method": "bogus"}, {"method": "convex", "alpha": "0.3"}])
def test_a_damaged_record_says_which_modes_still_work_and_how_to_repair_it(tmp_path, fusion):
    """The message said "dense and bm25 search still work" without the flags that choose them; it names
    `--mode dense` and `--mode bm25`, then the two repairs the code supports (retune, or drop with --drop-fusion)."""
    from retriever.fusion import recorded_fusion

    params, damage = recorded_fusion(tmp_path, {"fusion": fusion}, None)
    assert params == FusionParams() and damage is not None
    message = str(damage)
    assert "\n" not in message and "--mode dense and --mode bm25 still work" in message, message
    assert message.index("still work") < message.index(f"`retriever bm25 {tmp_path} --tune-fusion-on DATASET")
    assert f"`retriever bm25 {tmp_path} --drop-fusion`" in message


@pytest.mark.parametrize("lexical", [ranking([6], [3.2]), ranking([6, 2], [3.2, 3.2])])
def test_a_list_of_one_score_still_lifts_the_documents_it_found_above_the_ones_it_missed(lexical):
    # BM25 matched only label 6 (or scored its matches equally): z-scores have no spread, and its documents
    # must still outrank those it missed, so a mostly-BM25 mix puts 6 first and a mostly-dense one keeps dense's.
    dense = ranking([1, 3, 4, 5, 6], [0.9, 0.8, 0.7, 0.6, 0.5])
    assert fuse_one(dense, lexical, FusionParams("convex", alpha=0.05), k=1)[1].tolist() == [6]
    assert fuse_one(dense, lexical, FusionParams("convex", alpha=0.95), k=2)[1].tolist() == [1, 3]


def test_a_list_weighted_0_brings_no_documents():
    """`serve`/`search` hybrid at --alpha 0 (all weight on BM25) with a query of stopwords alone, which BM25 finds
    nothing for, returned the dense list's k documents, every one scored 0.0 and the last -1.4e-45, where bm25 mode
    says there are no hits. At alpha 0 hybrid ranks what BM25 found, at alpha 1 what dense found."""
    dense, lexical, nothing = ranking([1, 3, 4, 5]), ranking([5, 2], [3.0, 1.0]), ranking([-1, -1])
    for empty in (nothing, ranking([])):
        scores, labels = fuse_one(dense, empty, FusionParams("convex", alpha=0.0), k=3)
        assert labels.tolist() == [] and scores.tolist() == []
        assert fuse_one(empty, lexical, FusionParams("convex", alpha=1.0), k=3)[1].tolist() == []
    scores, labels = fuse_one(dense, lexical, FusionParams("convex", alpha=0.0), k=3)
    assert labels.tolist() == [5, 2] and scores[0] > scores[1]  # bm25 mode's ranking
    assert fuse_one(dense, lexical, FusionParams("convex", alpha=1.0), k=9)[1].tolist() == [1, 3, 4, 5]
    assert fuse_one(dense, nothing, FusionParams("convex", alpha=0.01), k=3)[1].tolist() == [1, 3, 4]  # weighed: kept


SOUND_RECORD = {"method": "convex", "rrf_k": 60.0, "alpha": 0.3, "depth": 1000}


@pytest.mark.parametrize("fusion, problem", [
    ({"method": "convex"}, "fusion.rrf_k is missing"),
    ({k: v for k, v in SOUND_RECORD.items() if k != "alpha"}, "fusion.alpha is missing"),
    ({**SOUND_RECORD, "tuned": 5}, "fusion.tuned is int '5', not dict or null")])
def test_a_record_missing_a_setting_or_with_a_tuned_entry_not_an_object_is_damaged(tmp_path, fusion, problem):
    """{"method": "convex"} fused with the default alpha 0.5, and "tuned": 5 was taken, without a word."""
    from retriever.fusion import recorded_fusion

    params, damage = recorded_fusion(tmp_path, {"fusion": fusion}, None)
    assert params == FusionParams() and damage is not None
    assert str(damage).startswith(f"{tmp_path / 'manifest.json'}: {problem}, so the hybrid fusion's record is damaged")


@pytest.mark.parametrize("fusion", [SOUND_RECORD, {**SOUND_RECORD, "tuned": None},
                                    {**SOUND_RECORD, "tuned": {"dataset": "scifact", "split": "train"}}, {}, None])
def test_a_whole_record_is_sound(tmp_path, fusion):
    from retriever.fusion import recorded_fusion

    params, damage = recorded_fusion(tmp_path, {"fusion": fusion}, None)
    assert damage is None and params == FusionParams.from_record(fusion)


@pytest.mark.parametrize("overrides, used", [({"method": "rrf", "rrf_k": 60}, FusionParams("rrf", rrf_k=60)),
                                             ({"rrf_k": 30, "depth": 200}, FusionParams("rrf", rrf_k=30, depth=200)),
                                             ({"method": "convex", "alpha": 0.2}, FusionParams("convex", alpha=0.2)),
                                             ({"alpha": 0.2, "method": None}, FusionParams("convex", alpha=0.2))])
def test_flags_giving_the_method_and_its_setting_need_no_damaged_record(tmp_path, overrides, used):
    """Hybrid was refused over a damaged record even when the flags said everything it is used for."""
    from retriever.fusion import recorded_fusion

    assert recorded_fusion(tmp_path, {"fusion": {"method": "convex", "alpha": "0.3"}}, overrides) == (used, None)


@pytest.mark.parametrize("overrides", [None, {"method": "rrf"}, {"method": "convex", "depth": 100},
                                       {"method": None, "rrf_k": None, "alpha": None, "depth": None}])
def test_flags_that_leave_a_setting_to_a_damaged_record_still_refuse_hybrid(tmp_path, overrides):
    from retriever.fusion import recorded_fusion

    damage = recorded_fusion(tmp_path, {"fusion": {"method": "convex"}}, overrides)[1]
    assert damage is not None and "--fusion rrf --rrf-k K or --alpha A" in str(damage)


def test_numpy_numbers_are_taken_as_python_numbers():
    """np.int64 depth was refused as 'must be a whole number of at least 1, not np.int64(100)', and an np.float64
    rrf_k or alpha stayed NumPy in the record a tuning writes to the manifest."""
    params = FusionParams("convex", rrf_k=np.float64(30), alpha=np.float32(0.25), depth=np.int64(100))
    assert params.record() == {"method": "convex", "rrf_k": 30.0, "alpha": 0.25, "depth": 100}
    assert [type(value) for value in params.record().values()] == [str, float, float, int]
    assert FusionParams().overridden(depth=np.int32(50)).depth == 50


def test_rrf_at_the_largest_k_taken_still_ranks_by_the_sum_of_ranks():
    """RRF's constant tends to summing ranks: (50, 50) over (1, 100). Past the limit, ranks' shares differed by less
    than the fused-score tie tolerance, so every document tied and the convex tie-break ranked them instead (the
    lone dense leader first); at 1e300 every score was 0 or, lowered one float32 step apart, "-0.0000"."""
    dense = ranking(list(range(100)), [10.0] + list(np.linspace(1.0, 0.5, 99)))
    lexical = ranking([i for i in range(1, 100) if i != 49][:49] + [49] + [i for i in range(1, 100) if i != 49][49:]
                      + [0])
    labels = fuse_one(dense, lexical, FusionParams("rrf", rrf_k=1e6), k=100)[1].tolist()
    assert labels.index(49) < labels.index(0)
    for too_large in (1e13, 1e300):
        with pytest.raises(RetrieverError, match=r"^--rrf-k must be a positive number up to 1e6, not 1"):
            FusionParams("rrf", rrf_k=too_large)
