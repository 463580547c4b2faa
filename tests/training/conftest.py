"""Fixtures of the training tests: a one-layer BERT and a BEIR folder with train and test splits."""
from __future__ import annotations

from pathlib import Path

import pytest

from fixtures_corpora import TINY_DOCS, write_jsonl
from fixtures_models import make_tiny_bert


@pytest.fixture(scope="module")
def small_bert(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("small-bert"), layers=1)


@pytest.fixture()
def train_beir(tmp_path) -> Path:
    """12 documents, one query per document whose words appear in it; train and test splits."""
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    write_jsonl(root / "queries.jsonl", [{"_id": f"q{i}", "text": f"{t.lower()} {x.split()[-1]}"}
                                         for i, (_, t, x) in enumerate(TINY_DOCS)])
    lines = [f"q{i}\t{doc_id}\t1\n" for i, (doc_id, _, _) in enumerate(TINY_DOCS)]
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines[:8]))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines[8:]))
    return root
