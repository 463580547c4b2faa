"""The evaluation report: its note on metrics reaching past the run's depth."""
from __future__ import annotations

import pytest

from retriever.evaluation_report import EvaluationReport
from retriever.metrics import evaluate_run


@pytest.mark.parametrize("metrics, phrase", [(("recall@10",), "recall@10 reaches past"),
                                             (("recall@10", "ndcg@20"), "recall@10, ndcg@20 reach past")])
def test_the_depth_note_agrees_with_one_metric_or_several(metrics, phrase) -> None:
    """It said "recall@10 reach past the run's depth" of a single metric."""
    run = {"q": {"d1": 2.0, "d2": 1.0}}
    report = EvaluationReport(evaluate_run(run, {"q": {"d1": 1}}, metrics), run_depth=2)
    assert f"note: {phrase} the run's depth (2 hits per query)" in report.table()
    one = EvaluationReport(evaluate_run({"q": {"d1": 2.0}}, {"q": {"d1": 1}}, metrics), run_depth=1)
    assert "the run's depth (1 hit per query)" in one.table()  # it said "1 hits"
