"""A split's search scored batch by batch (metrics and answer recall) as the whole run scores."""
from __future__ import annotations

from retriever import metrics, split_scoring
from retriever.answer_recall import answer_recall
from retriever.corpus import Query
from retriever.metrics import evaluate_run, trec_order
from retriever.split_scoring import SplitScoring

PASSAGES = {"d1": "the bee makes honey", "d2": "lava rock", "d3": "honey cake", "d4": "ice"}
QUERIES = [Query("q1", "who makes honey", ("honey",)), Query("q2", "hot rock", ("lava",)),
           Query("q3", "cold", ("ice",))]
QRELS = {"q1": {"d3": 1}, "q2": {"d2": 1}}  # q3 is not judged, and has answers
BATCHES = [{"q1": {"d2": 0.9, "d1": 0.5, "d3": 0.5}, "q2": {"d4": 0.7, "d2": 0.2}}, {"q3": {"d4": 0.1}}]


def test_each_querys_hits_are_put_in_trec_order_once_for_metrics_and_answer_recall(monkeypatch):
    """Each batch's hits were sorted for the metrics and again for answer recall; the numbers stay the whole run's."""
    run = {qid: hits for batch in BATCHES for qid, hits in batch.items()}
    expected_recall = answer_recall({qid: trec_order(hits) for qid, hits in run.items()},
                                    {q.id: q.answers for q in QUERIES}, PASSAGES, (1, 5))
    expected_metrics = evaluate_run(run, QRELS, ["ndcg@10", "mrr@10"])
    sorted_queries = []

    def counted(hits, qid=None):
        sorted_queries.append(qid)
        return trec_order(hits, qid)

    monkeypatch.setattr(metrics, "trec_order", counted)
    monkeypatch.setattr(split_scoring, "trec_order", counted)
    scoring = SplitScoring(QRELS, ["ndcg@10", "mrr@10"], 1, QUERIES, PASSAGES.__getitem__, 5)
    assert list(scoring.scored(BATCHES)) == BATCHES
    report = scoring.report(run_depth=5)
    assert len(sorted_queries) == 3  # q1 and q2 for both, q3 for answer recall alone
    assert report.answer_recall == expected_recall == {"answer_recall@1": 1 / 3, "answer_recall@5": 1.0}
    assert report.evaluation == expected_metrics
