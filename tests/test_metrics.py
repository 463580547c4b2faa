from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import pytrec_eval

from retriever.errors import RetrieverError
from retriever.metrics import (
    DEFAULT_METRICS,
    Evaluation,
    RunScoring,
    evaluate_run,
    format_table,
    trec_order,
)

# ---------------------------------------------------------------------------- hand-computed cases

# Ranked: x (unjudged), a (3), b (0), c (1), d (2); e (1) is relevant but not retrieved.
HAND_RUN = {"q": {"x": 5.0, "a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}}
HAND_QRELS = {"q": {"a": 3, "b": 0, "c": 1, "d": 2, "e": 1}}


def hand(metric: str) -> float:
    return evaluate_run(HAND_RUN, HAND_QRELS, [metric]).per_query["q"][metric]


def test_recall_hand_case() -> None:
    assert hand("recall@1") == 0.0
    assert hand("recall@2") == pytest.approx(1 / 4)
    assert hand("recall@5") == pytest.approx(3 / 4)
    assert hand("recall@1000") == pytest.approx(3 / 4)


def test_mrr_hand_case() -> None:
    assert hand("mrr@10") == pytest.approx(1 / 2)
    assert hand("mrr@1") == 0.0


def test_ndcg_hand_case() -> None:
    dcg = 3 / math.log2(3) + 1 / math.log2(5) + 2 / math.log2(6)
    ideal = 3 + 2 / math.log2(3) + 1 / math.log2(4) + 1 / math.log2(5)
    assert hand("ndcg@10") == pytest.approx(dcg / ideal)
    assert hand("ndcg@2") == pytest.approx((3 / math.log2(3)) / (3 + 2 / math.log2(3)))


def test_map_hand_case() -> None:
    assert hand("map@1000") == pytest.approx((1 / 2 + 2 / 4 + 3 / 5) / 4)
    assert hand("map@2") == pytest.approx((1 / 2) / 4)


def test_ties_break_by_docid_descending_after_float32_rounding() -> None:
    assert trec_order({"a": 1.0, "c": 1.0, "b": 2.0}) == ["b", "c", "a"]
    # 1 + 1e-9 == 1 in float32, so "a" is tied with "b" and loses the tie-break.
    assert trec_order({"a": 1.0 + 1e-9, "b": 1.0}) == ["b", "a"]
    assert trec_order({"a": 1.0 + 1e-6, "b": 1.0}) == ["a", "b"]
    assert evaluate_run({"q": {"a": 1.0, "b": 1.0}}, {"q": {"a": 1}}, ["mrr@10"]).mean["mrr@10"] == 0.5


def test_negative_grades_and_unjudged_docs_count_as_non_relevant() -> None:
    ev = evaluate_run({"q": {"neg": 3.0, "unk": 2.0, "rel": 1.0}}, {"q": {"neg": -1, "rel": 2}}, DEFAULT_METRICS)
    assert ev.per_query["q"]["mrr@10"] == pytest.approx(1 / 3)
    assert ev.per_query["q"]["ndcg@10"] == pytest.approx(1 / math.log2(4))


def test_query_selection_and_counts() -> None:
    run = {"judged": {"a": 1.0}, "no_rel": {"a": 1.0}, "not_in_qrels": {"a": 1.0}}
    qrels = {"judged": {"a": 1}, "no_rel": {"a": 0, "b": -1}, "missing": {"a": 2}}
    ev = evaluate_run(run, qrels)
    assert set(ev.per_query) == {"judged", "missing"}
    assert ev.per_query["missing"] == {m: 0.0 for m in DEFAULT_METRICS}
    assert ev.num_queries == 2
    assert ev.num_unjudged_excluded == 2
    assert ev.num_missing_from_run == 1
    assert ev.mean["recall@1"] == pytest.approx(0.5)
    assert list(ev.mean) == list(DEFAULT_METRICS)


def test_a_query_without_hits_counts_as_a_trec_file_of_the_run_holds_it(tmp_path) -> None:
    """A TREC run has no line for a query without hits, so the file written from a run scored such a query as
    missing (and an unjudged one not at all) while the run itself had counted it present: two counts, one run."""
    from retriever.runs import read_run, write_trec_run

    run = {"judged": {"a": 1.0}, "hitless": {}, "unjudged_hitless": {}}
    qrels = {"judged": {"a": 1}, "hitless": {"a": 1}}
    write_trec_run(run, tmp_path / "run.trec")
    assert evaluate_run(run, qrels) == evaluate_run(read_run(tmp_path / "run.trec"), qrels)
    assert evaluate_run(run, qrels).num_missing_from_run == 1


def test_no_overlap_between_run_and_qrels_is_an_error() -> None:
    with pytest.raises(RetrieverError, match="same query ids"):
        evaluate_run({"1": {"a": 1.0}}, {"q1": {"a": 1}})
    with pytest.raises(RetrieverError, match="same query ids"):
        evaluate_run({"1": {"a": 1.0}}, {"q1": {"a": 1}, "1": {"a": 0}})


def test_qrels_judging_nothing_relevant_say_so_rather_than_blame_the_query_ids() -> None:
    """The ids matched, yet the error said to check that they do."""
    with pytest.raises(RetrieverError, match=r"^the qrels judge no document relevant: their 3 judgments have "
                                             r"grades -1, 0, and only 1 or more is relevant") as error:
        evaluate_run({"q1": {"a": 1.0}}, {"q1": {"a": 0, "b": -1}, "q2": {"a": 0}})
    assert "query ids" not in str(error.value)


def test_the_errors_of_one_run_query_or_one_judgment_agree_in_number() -> None:
    """They said "none of the run's 1 queries has relevance judgments" and "their 1 judgments have grades 0"."""
    with pytest.raises(RetrieverError, match=r"^the run's 1 query has no relevance judgments \(run ids e.g. '1'"):
        evaluate_run({"1": {"a": 1.0}}, {"q1": {"a": 1}})
    with pytest.raises(RetrieverError, match=r"^the qrels judge no document relevant: their 1 judgment has grades 0, "):
        evaluate_run({"q1": {"a": 1.0}}, {"q1": {"a": 0}})


@pytest.mark.parametrize("qrels, held", [({}, "no query"), ({"q1": {}, "q2": {}}, "2 queries and no judgment")])
def test_empty_qrels_are_named_in_one_line(qrels, held) -> None:
    """Empty qrels said "their 0 judgments have grades , and only 1 or more is relevant"."""
    with pytest.raises(RetrieverError) as error:
        evaluate_run({"q1": {"a": 1.0}}, qrels)
    assert str(error.value).startswith(f"the qrels are empty (they hold {held}); ") and "\n" not in str(error.value)
    assert "grades ," not in str(error.value)


@pytest.mark.parametrize("name", ["recall", "recall@0", "p@10", "ndcg_cut_10", "mrr@x"])
def test_unknown_metric_is_an_error(name: str) -> None:
    with pytest.raises(RetrieverError, match="unknown metric"):
        evaluate_run(HAND_RUN, HAND_QRELS, [name])


def test_nan_score_is_an_error() -> None:
    with pytest.raises(RetrieverError, match="NaN"):
        evaluate_run({"q": {"a": float("nan")}}, {"q": {"a": 1}})


def test_to_json_and_format_table() -> None:
    ev = evaluate_run(HAND_RUN, HAND_QRELS)
    data = json.loads(json.dumps(ev.to_json()))
    assert Evaluation(**data) == ev
    table = format_table(ev)
    lines = table.splitlines()
    assert lines[0].split() == ["metric", "mean"]
    assert len(lines) == 2 + len(DEFAULT_METRICS) + 1
    assert f"{ev.mean['ndcg@10']:.4f}" in table
    assert "1 evaluated (0 missing from run, scored 0); 0 run queries" in lines[-1]
    one = format_table(evaluate_run({**HAND_RUN, "u": {"a": 1.0}}, HAND_QRELS)).splitlines()[-1]
    assert one.endswith("; 1 run query without relevant judgments excluded"), one  # it said "1 run queries"


# ---------------------------------------------------------------------------- equality with pytrec_eval

PYTREC_NAMES = {f"recall@{k}": f"recall_{k}" for k in (1, 5, 10, 20, 100, 1000)}
PYTREC_NAMES |= {"ndcg@10": "ndcg_cut_10", "map@1000": "map_cut_1000"}


def random_benchmark(seed: int) -> tuple[dict, dict]:
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(1500)]  # "d10" < "d9": lexicographic tie-breaks matter
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(50):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 40))
        no_relevant = q % 10 == 3
        grades = [0, 1] if q % 10 == 5 else [0, 0, 1, 2, 3]  # grade 1 at most: none at relevance level 2
        qrels[qid] = {d: (0 if no_relevant else rng.choice(grades)) for d in judged}
        if q % 10 == 7:
            continue  # judged query missing from the run
        depth = 1200 if q % 5 == 0 else rng.randint(0, 300)
        # Bias retrieval towards judged docs so metrics are not all zero.
        retrieved = set(rng.sample(docs, depth)) | {d for d in judged if rng.random() < 0.6}
        style = q % 3
        scores = {}
        for d in retrieved:
            if style == 0:
                scores[d] = float(rng.randint(0, 5))  # heavy ties
            elif style == 1:
                scores[d] = 1.0 + rng.randint(0, 3) * 1e-10  # ties only in float32
            else:
                scores[d] = rng.gauss(0, 1) + (qrels[qid].get(d, 0) * 0.5)
        run[qid] = scores
    for extra in range(3):
        run[f"unjudged{extra}"] = {d: rng.random() for d in rng.sample(docs, 20)}
    return run, qrels


@pytest.mark.parametrize("level", [1, 2])
def test_a_run_scored_batch_by_batch_is_scored_as_the_whole_run_to_the_last_digit(level: int) -> None:
    """`evaluate --index` scores each batch of queries as it is searched (it held the whole run first): per-query
    values, means, counts and per-query order are those of the whole run."""
    run, qrels = random_benchmark(6)
    items = list(run.items())
    random.Random(6).shuffle(items)
    scoring = RunScoring(qrels, DEFAULT_METRICS, level)
    for start in range(0, len(items), 7):
        scoring.add(dict(items[start:start + 7]))
    batched, whole = scoring.evaluation(), evaluate_run(run, qrels, DEFAULT_METRICS, relevance_level=level)
    assert json.dumps(batched.to_json()) == json.dumps(whole.to_json()) and whole.num_unjudged_excluded > 0
    assert whole.num_missing_from_run > 0 and format_table(batched) == format_table(whole)


@pytest.mark.parametrize("seed, level", [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2), (5, 3)])
def test_equals_pytrec_eval(seed: int, level: int) -> None:
    """Levels above 1 are trec_eval's -l (TREC DL's -l 2): binary measures count grades >= level, nDCG all grades."""
    run, qrels = random_benchmark(seed)
    ours = evaluate_run(run, qrels, DEFAULT_METRICS, relevance_level=level)

    measures = {"recall.1,5,10,20,100,1000", "ndcg_cut.10", "map_cut.1000", "recip_rank"}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=level).evaluate(run)
    top10 = {qid: {d: scores[d] for d in sorted(scores, key=lambda d: (float(np.float32(scores[d])), d), reverse=True)[:10]}
             for qid, scores in run.items()}
    theirs_rr10 = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}, relevance_level=level).evaluate(top10)

    judged = {q for q, docs in qrels.items() if any(g >= 1 for g in docs.values())}
    compared = judged & set(run)
    assert len(compared) >= 30
    assert set(theirs) - judged  # pytrec_eval also reports queries without relevant docs; we skip them
    for qid in compared:
        for ours_name, their_name in PYTREC_NAMES.items():
            assert ours.per_query[qid][ours_name] == pytest.approx(theirs[qid][their_name], abs=1e-6), (qid, ours_name)
        assert ours.per_query[qid]["mrr@10"] == pytest.approx(theirs_rr10[qid]["recip_rank"], abs=1e-6), qid
        # Independent of how the top 10 was cut: the full-run reciprocal rank, zeroed beyond 10.
        full_rr = theirs[qid]["recip_rank"]
        assert ours.per_query[qid]["mrr@10"] == pytest.approx(full_rr if full_rr >= 0.1 - 1e-12 else 0.0, abs=1e-6)

    missing = judged - set(run)
    assert ours.num_missing_from_run == len(missing) > 0
    assert ours.num_unjudged_excluded == len(set(run) - judged) > 0
    assert ours.num_queries == len(judged)
    for ours_name, their_name in PYTREC_NAMES.items():
        expected = sum(theirs[q][their_name] for q in compared) / len(judged)  # missing queries score 0
        assert ours.mean[ours_name] == pytest.approx(expected, abs=1e-6)
    # The benchmark must exercise deep cutoffs and non-trivial values.
    assert any(ours.per_query[q]["recall@1000"] > ours.per_query[q]["recall@100"] for q in compared)
    assert 0 < ours.mean["ndcg@10"] < 1 and 0 < ours.mean["map@1000"] < 1
    if level > 1:  # judged queries with no document at the level retrieve relevant ones at level 1 and score 0
        below = [q for q in compared if not any(g >= level for g in qrels[q].values())]
        at_one = evaluate_run(run, qrels, ("recall@1000",)).per_query
        assert any(at_one[q]["recall@1000"] > 0 for q in below)
        assert all(ours.per_query[q]["recall@1000"] == 0 for q in below)


def test_relevance_level_must_be_a_positive_integer() -> None:
    for level in (0, -1, 1.5, True, "2"):
        with pytest.raises(RetrieverError, match="relevance level"):
            evaluate_run({"q": {"d": 1.0}}, {"q": {"d": 1}}, relevance_level=level)


def test_evaluate_run_reads_ids_as_the_text_run_files_hold() -> None:
    """A run of integer document ids against qrels read from a file scored 0 with no word (the writers write the
    ids as text, so the same run written and read back scored 1); hits as (id, score) pairs, which the writers
    take, were a TypeError traceback; metrics="ndcg@10" was read letter by letter."""
    qrels = {"q1": {"7": 1, "8": 0}, "2": {"9": 2}}
    expected = evaluate_run({"q1": {"7": 0.9, "8": 0.5}, "2": {"9": 0.1}}, qrels, ["ndcg@10"]).mean
    assert expected == {"ndcg@10": 1.0}
    assert evaluate_run({"q1": {7: 0.9, 8: 0.5}, 2: {np.int64(9): 0.1}}, qrels, ["ndcg@10"]).mean == expected
    assert evaluate_run({"q1": [("8", 0.5), ("7", 0.9)], "2": [("9", 0.1)]}, qrels, ["ndcg@10"]).mean == expected
    assert evaluate_run({"q1": {"7": 0.9}, "2": {"9": 1}}, {"q1": {7: 1}, 2: {9: 1}}, ["ndcg@10"]).mean == expected
    with pytest.raises(RetrieverError, match=r"metrics must be a list of names, not the string 'ndcg@10'"):
        evaluate_run({"q1": {"7": 0.9}}, qrels, "ndcg@10")
    with pytest.raises(RetrieverError, match=r"the score of document '7' for query 'q1' is '0.9', not a number"):
        evaluate_run({"q1": {"7": "0.9"}}, qrels, ["ndcg@10"])


def test_evaluate_run_takes_grades_as_trec_eval_reads_them_or_names_the_one_it_cannot() -> None:
    """Library qrels with a text grade ("1", from a CSV) or a list of documents (ir_datasets-style) were a TypeError
    or AttributeError traceback; a grade of 0.5 gave gain 0.5 to a document counted non-relevant (nDCG 0.86 where
    trec_eval, which keeps grades as C ints, gives 0.63). Integral floats (1.0, from pandas) and numpy ints count as
    the integers they are."""
    run = {"q": {"d": 1.0, "e": 0.5}}
    expected = evaluate_run(run, {"q": {"d": 0, "e": 1}}, ["ndcg@10"]).mean
    assert evaluate_run(run, {"q": {"d": 0.0, "e": np.int64(1)}}, ["ndcg@10"]).mean == expected
    for qrels, message in (({"q": {"d": "1"}}, r"the grade of document 'd' for query 'q' is '1', not an integer"),
                           ({"q": {"d": 0.5, "e": 1}}, r"the grade of document 'd' for query 'q' is 0.5, not an int"),
                           ({"q": {"d": True}}, r"the grade of document 'd' for query 'q' is True, not an integer"),
                           ({"q": ["d"]}, r"the judgments of query 'q' must be a mapping of document id to grade"),
                           # an OverflowError traceback, and nDCG 1.0 for 2**40, which the qrels readers refuse
                           ({"q": {"d": 10**400}}, r"the grade of document 'd' for query 'q' is 1000.*, beyond a 32-bit"),
                           ({"q": {"d": 2**40, "e": 1}}, r"the grade of document 'd' for query 'q' is 1099511627776, "
                                                         r"beyond a 32-bit integer; trec_eval keeps grades in a C int"),
                           ({"q": {"d": np.int64(-2**31 - 1)}}, r"is -2147483649, beyond a 32-bit integer"),
                           # past Python's digit limit: str() of it was a ValueError traceback (probe round 18)
                           ({"q": {"d": 10**5000}}, r"is a number of 16610 bits, beyond a 32-bit integer")):
        with pytest.raises(RetrieverError, match=message):
            evaluate_run(run, qrels, ["ndcg@10"])


def test_metrics_may_be_any_iterable_of_names_a_generator_included():
    """A generator was read up by the name check, then len() of it was a TypeError."""
    run, qrels = {"q1": {"d1": 2.0, "d2": 1.0}}, {"q1": {"d2": 1}}
    wanted = evaluate_run(run, qrels, ["mrr@10", "recall@1"]).to_json()
    assert evaluate_run(run, qrels, (m for m in ["mrr@10", "recall@1"])).to_json() == wanted
    assert evaluate_run(run, qrels, {"mrr@10": 1, "recall@1": 1}.keys()).to_json() == wanted
    with pytest.raises(RetrieverError, match="^metrics must be a list of names such as 'ndcg@10', not int 10$"):
        evaluate_run(run, qrels, 10)


@pytest.mark.parametrize("run, qrels, message", [
    ({1: {"d1": 1.0}, "1": {"d2": 0.5}}, {"1": {"d1": 1}}, r"query '1' is given twice in the run \(as 1 and '1'\)"),
    ({"q": {"d1": 1.0}}, {7: {"d1": 1}, "7": {"d1": 0}, "q": {"d1": 1}}, r"query '7' is given twice in the qrels"),
    ({"q": {"1": 1.0}}, {"q": {1: 0, "1": 1}}, r"document '1' of query 'q' is given twice in the qrels"),
])
def test_ids_that_become_the_same_text_are_refused_not_one_dropped(run, qrels, message) -> None:
    """Ids are scored as the text a run file holds (``7`` is ``"7"``): a run or qrels holding both kept only the last,
    and scored it without a word (recall 1.0 for the run's first query, whose hits were dropped)."""
    with pytest.raises(RetrieverError, match=message):
        evaluate_run(run, qrels, ["recall@10"])


def test_a_relevance_level_above_every_grade_is_refused_when_a_binary_measure_is_asked() -> None:
    """`--relevance-level 2` (TREC DL's) on binary qrels (BEIR's) scored recall, MRR and MAP 0 for every query, with
    no word that no document reached the level."""
    run, qrels = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d3": 1.0}}, {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 1}}
    with pytest.raises(RetrieverError, match=r"^no judgment reaches relevance level 2: the judged queries' grades go "
                                             r"up to 1, so recall@1 and mrr@10 would be 0 for every query; "):
        evaluate_run(run, qrels, ["ndcg@10", "recall@1", "mrr@10"], relevance_level=2)
    assert evaluate_run(run, qrels, ["ndcg@10"], relevance_level=2).mean == evaluate_run(run, qrels, ["ndcg@10"]).mean
    qrels["q2"]["d3"] = 2  # one query at the level: the others score 0 on it, as in trec_eval
    assert evaluate_run(run, qrels, ["recall@1"], relevance_level=2).per_query == {"q1": {"recall@1": 0.0},
                                                                                   "q2": {"recall@1": 1.0}}


@pytest.mark.parametrize("run, qrels, message", [
    ({3.0: {"d1": 1.0}}, {"3": {"d1": 1}}, r"^query id 3\.0 is float, not a string or an integer"),
    ({None: {"d1": 1.0}}, {"None": {"d1": 1}}, r"^query id None is NoneType, not a string"),
    ({"3": {"d1": 1.0}}, {3.0: {"d1": 1}}, r"^query id 3\.0 is float"),
    ({"q": {"1": 1.0}}, {"q": {1.0: 1}}, r"^document id 1\.0 of query 'q' is float"),
])
def test_ids_evaluate_run_takes_are_those_the_run_writers_take(run, qrels, message) -> None:
    """A float or None id was made '3.0' or 'None' with str(), which the run writers refuse (``runs.id_text``): a
    float id matched nothing and the run was refused as unjudged, a float qrels document scored 0 without a word."""
    with pytest.raises(RetrieverError, match=message):
        evaluate_run(run, qrels, ["recall@10"])
    assert evaluate_run({b"3": {"d1": 1.0}}, {np.int64(3): {"d1": 1}}, ["recall@10"]).mean == {"recall@10": 1.0}


@pytest.mark.parametrize("qid", ["q1", "unjudged"])
def test_a_query_in_two_batches_is_refused_not_counted_twice(qid: str) -> None:
    """`RunScoring.add` took an unjudged query given in two batches twice: `2 run queries … excluded` for one query."""
    scoring = RunScoring({"q1": {"d1": 1}}, ["ndcg@10"])
    scoring.add({qid: {"d1": 1.0}, "q2" if qid == "q1" else "q1": {"d2": 0.5}})
    with pytest.raises(RetrieverError, match=f"query '{qid}' is given twice in the run; give each once"):
        scoring.add({qid: {"d3": 0.1}})
    assert scoring.evaluation().num_unjudged_excluded == 1  # the batch refused added nothing


def test_the_relevance_level_is_recorded_with_the_metrics_it_changed() -> None:
    """`evaluate --relevance-level 2 -o m.json` wrote the same keys as level 1, so two metrics files at two levels
    could not be told apart, and the table did not say which level its recall, MRR and MAP counted."""
    two = evaluate_run(HAND_RUN, HAND_QRELS, ["recall@5", "ndcg@10"], relevance_level=2)
    assert json.loads(json.dumps(two.to_json()))["relevance_level"] == 2 and two.mean["recall@5"] == 1.0
    assert format_table(two).splitlines()[-1] == ("relevance level 2: recall, MRR and MAP count a grade of 2 or more "
                                                  "as relevant; nDCG keeps every grade")
    one = evaluate_run(HAND_RUN, HAND_QRELS, ["recall@5"])
    assert one.to_json()["relevance_level"] == 1 and "relevance level" not in format_table(one)
