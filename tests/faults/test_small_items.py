"""The positive sides of issue #10 items 8, 11 and 12 that the bad-input table cannot show."""
from __future__ import annotations

import json

from click.testing import CliRunner

from fixtures_corpora import write_jsonl
from retriever.cli import main
from retriever.runs import read_qrels
from retriever.training.data import load_beir_examples, load_jsonl_examples

BOM = b"\xef\xbb\xbf"


def test_training_readers_skip_a_bom_as_the_corpus_reader_does(tiny_beir, tmp_path):
    (tiny_beir / "qrels" / "train.tsv").write_text("q1\td6\t1\nq2\td4\t1\n")
    train = tmp_path / "train.jsonl"
    train.write_bytes(BOM + json.dumps({"query": "honey", "positives": ["a text"]}).encode() + b"\n")
    assert load_jsonl_examples(train)[0].query == "honey"
    negatives = tmp_path / "neg.jsonl"
    negatives.write_bytes(BOM + json.dumps({"query_id": "q1", "negatives": ["d9"]}).encode() + b"\n")
    examples = {e.query_id: e for e in load_beir_examples(tiny_beir, "train", negatives)}
    assert [p.id for p in examples["q1"].negatives] == ["d9"]


def test_a_named_qrels_header_is_still_skipped(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert read_qrels(path) == {"q1": {"d1": 1}}


def test_batch_search_sizes_thread_pools_as_serve_does(tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    index = tmp_path / "idx"
    common = ["--device", "cpu", "--dtype", "fp32"]
    assert CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                     *common]).exit_code == 0
    calls = []
    monkeypatch.setattr("retriever.serving.threads.configure_threads", lambda **kw: calls.append(kw))
    queries = write_jsonl(tmp_path / "q.jsonl", [{"_id": "q1", "text": "honey"}])
    result = CliRunner().invoke(main, ["search", str(index), "--queries", str(queries), "-o", str(tmp_path / "r"),
                                       *common])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["evaluate", "--index", str(index), "--dataset", str(tiny_beir), *common])
    assert result.exit_code == 0, result.output
    assert calls == [{"workers": 1}, {"workers": 1}]
