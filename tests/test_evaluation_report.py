"""The evaluation report: its note on metrics reaching past the run's depth."""
from __future__ import annotations

import pytest

from retriever.evaluation import evaluate_run_file
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


@pytest.mark.parametrize("text", ['{"qid": "q1", "hits": []}\n{"qid": "q2", "hits": []}\n', '{"q1": {}, "q2": {}}\n'])
def test_a_json_run_without_a_hit_is_said_to_have_none_not_to_be_shallow(tmp_path, text) -> None:
    """A JSONL or mapping run of empty hit lists scored 0 everywhere with the note that its metrics "reach past the
    run's depth (0 hits per query)", as if a deeper run would score more: no query got a hit."""
    run, qrels = tmp_path / "run.json", tmp_path / "qrels.txt"
    run.write_text(text, encoding="utf-8")
    qrels.write_text("q1 0 d1 1\nq2 0 d2 1\n", encoding="utf-8")
    report = evaluate_run_file(run, qrels, ("ndcg@10", "recall@5"))
    table = report.table()
    assert "past the run's depth" not in table and report.evaluation.mean == {"ndcg@10": 0.0, "recall@5": 0.0}
    assert "note: no query of the run has a hit (each one's hit list is empty), so every metric is 0" in table
    assert report.to_json()["run_depth"] == 0 and "metrics_deeper_than_run" not in report.to_json()
