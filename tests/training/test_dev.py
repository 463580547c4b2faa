"""The dev set a training run selects checkpoints on."""
from __future__ import annotations

from retriever.training.dev import DevSet, load_dev_set, shared_queries_warning


def test_judged_dev_queries_the_queries_file_lacks_are_named(tiny_beir, capsys):
    """They scored 0 in every dev evaluation without a word, as mining left them out (probe round 9)."""
    qrels = tiny_beir / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q9\td7\t1\n", encoding="utf-8")
    dev = load_dev_set(tiny_beir, "test")
    assert dev.query_ids == ["q1", "q2", "q3", "q4"]
    assert ("warning: queries.jsonl lacks 1 of the 5 queries split 'test' judges (e.g. 'q9'); they are not "
            "searched, and score 0 in every dev evaluation") in capsys.readouterr().err


def test_one_dev_query_shared_with_training_is_said_in_the_singular():
    """It said "1 of the 2 dev queries (e.g. 'q0') are training queries too"."""
    dev = DevSet("beir/dev", ["q0", "q1"], ["cats", "dogs"], [], {})
    assert shared_queries_warning(dev, ["cats "]).startswith(
        "warning: 1 of the 2 dev queries (e.g. 'q0') is a training query too: on it dev scores measure fit")
    assert shared_queries_warning(dev, ["cats", "dogs"]).startswith(
        "warning: 2 of the 2 dev queries (e.g. 'q0') are training queries too: on them dev scores measure fit")
