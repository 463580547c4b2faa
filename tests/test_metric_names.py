from __future__ import annotations

import pytest

from retriever.errors import RetrieverError
from retriever.metric_names import check_metrics, parse_metric_list


def refusal(name: str) -> str:
    with pytest.raises(RetrieverError) as error:
        check_metrics([name])
    message = str(error.value)
    assert message.startswith(f"unknown metric {name!r}") and "\n" not in message
    return message


@pytest.mark.parametrize("name, ours", [("ndcg_cut_10", "ndcg@10"), ("recall_100", "recall@100"),
                                        ("map_cut_1000", "map@1000"), ("ndcg_cut.10", "ndcg@10")])
def test_trec_evals_name_of_a_cut_metric_is_refused_naming_ours(name, ours):
    """Pyserini and trec_eval users type these; the refusal listed our names without saying which one was meant."""
    assert refusal(name) == f"unknown metric {name!r}: {name} is trec_eval's name for {ours}; write {ours}"


@pytest.mark.parametrize("name, ours", [("map", "map@1000"), ("recip_rank", "mrr@1000"), ("ndcg", "ndcg@1000")])
def test_trec_evals_whole_run_metrics_are_refused_naming_ours_at_the_runs_depth(name, ours):
    message = refusal(name)
    assert "over the whole run" in message and "with k the run's depth" in message and message.endswith(
        f"write e.g. {ours}")


@pytest.mark.parametrize("name, measure", [("P_10", "precision at 10"), ("P@10", "precision at 10"),
                                           ("success_5", "success at 5"), ("Rprec", "R-precision")])
def test_a_measure_without_an_equivalent_says_plainly_there_is_none(name, measure):
    message = refusal(name)
    assert f"{name} is {measure}, which this engine does not compute; use one of recall@k" in message
    assert "write" not in message


def test_an_upper_case_spelling_is_refused_naming_the_lower_case_one():
    """BEIR prints NDCG@10 and Recall@100; one spelling per metric is kept, so the refusal names it."""
    assert refusal("NDCG@10") == "unknown metric 'NDCG@10': metric names are lower case; write ndcg@10"


@pytest.mark.parametrize("name", ["bogus@3", "prec@5", "recall_0", "ndcg@0", "mrr@x"])
def test_other_unknown_names_list_ours_without_a_guess(name):
    message = refusal(name)
    assert "trec_eval" not in message and "use one of recall@k, mrr@k, ndcg@k, map@k with k >= 1, e.g." in message


def test_our_names_are_the_only_spelling_accepted():
    assert parse_metric_list("ndcg@10, recall@100,map@1000,mrr@10") == ("ndcg@10", "recall@100", "map@1000", "mrr@10")
    with pytest.raises(RetrieverError):
        parse_metric_list("ndcg@10,recall_100")


@pytest.mark.parametrize("metrics", [[5], ["ndcg@10", None], [["ndcg@10"]]])
def test_a_metric_that_is_not_a_string_is_refused_in_one_line(metrics):
    """A library caller's [5] raised re's TypeError ("expected string or bytes-like object"); a list in the list,
    set()'s "unhashable type"."""
    with pytest.raises(RetrieverError) as error:
        check_metrics(metrics)
    message = str(error.value)
    assert message.startswith("metric names must be strings such as 'ndcg@10', not ") and "\n" not in message


@pytest.mark.parametrize("name", ["recall@" + "9" * 5000, "ndcg_cut_" + "9" * 5000, "P_" + "9" * 5000,
                                  "recall@1" + "0" * 18])
def test_a_cutoff_of_too_many_digits_is_refused_in_one_line(name):
    """`--metrics recall@<5000 digits>` was a ValueError traceback (Python's integer digit limit), also from the
    trec_eval and precision spellings the refusal reads a cutoff from; a cutoff is now at most 18 digits."""
    message = refusal(name)
    if name.startswith("recall@"):
        assert f"the cutoff has {len(name) - 7} digits, and one of at most 18 is taken" in message, message


def test_a_name_ending_in_a_newline_is_refused_not_a_second_metric():
    """`$` matched before a final newline: evaluate_run(..., ["ndcg@10\n", "ndcg@10"]) scored both, one key holding
    the newline (a line read from a file without strip)."""
    refusal("ndcg@10\n")


@pytest.mark.parametrize("name, ours, lower", [("ndcg@010", "ndcg@10", False), ("recall@0100", "recall@100", False),
                                               ("NDCG@010", "ndcg@10", True)])
def test_a_cutoff_with_leading_zeros_is_refused_naming_how_to_write_it(name, ours, lower):
    """`--metrics ndcg@010` got the generic list of families, leaving the user to guess that the zero was wrong."""
    case = "metric names are lower case and " if lower else ""
    assert refusal(name) == f"unknown metric {name!r}: {case}a cutoff has no leading zeros; write {ours}"
