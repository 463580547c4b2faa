"""Passages of one text under several ids count as one passage to the loss."""
from __future__ import annotations

import json

from fixtures_corpora import write_jsonl
from fixtures_models import make_tiny_bert
from retriever.encoder_settings import EncoderSettings
from retriever.training.data import Collator, Group, load_beir_examples, load_jsonl_examples
from retriever.training.loss import judged_positive_mask
from transformers import AutoTokenizer


def masked(examples, tokenizer_folder) -> list[list[bool]]:
    """The loss's mask over one batch of every example (its positive, then its hard negatives)."""
    settings = EncoderSettings(pooling="mean", normalize=True, query_max_length=16, passage_max_length=32)
    batch = Collator(AutoTokenizer.from_pretrained(tokenizer_folder), settings)(
        [Group(e, (e.positives[0], *e.negatives)) for e in examples])
    return judged_positive_mask(batch["judged_keys"], batch["passage_keys"], batch["targets"]).tolist()


def test_a_copy_of_a_positive_under_another_id_is_no_negative_of_its_query(tmp_path, capsys):
    """Two queries whose positives are one text under two ids (d1, d1-copy) sat in a batch each as the other's
    negative, masked by id only: training pushed one text both up and down. So did a hard negative copying it."""
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "title": "Cats", "text": "the cat sat"},
                                        {"_id": "d1-copy", "title": "Cats", "text": "the cat sat"},
                                        {"_id": "d2", "title": "Dogs", "text": "a dog ran"}])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "cat"}, {"_id": "q2", "text": "sat cat"},
                                         {"_id": "q3", "text": "dog"}])
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td1-copy\t1\nq3\td2\t1\n")
    (root / "negatives.jsonl").write_text(json.dumps({"query_id": "q3", "negatives": ["d1"]}) + "\n"
                                          + json.dumps({"query_id": "q1", "negatives": ["d1-copy", "d2"]}) + "\n")
    bert = make_tiny_bert(tmp_path / "bert", layers=1)
    examples = load_beir_examples(root, "train", root / "negatives.jsonl")
    assert "1 passage holds the text of another under another id" in capsys.readouterr().err
    by_query = {e.query_id: e for e in examples}
    assert [p.id for p in by_query["q1"].negatives] == ["d2"]  # its positive's copy left out
    mask = masked([by_query["q1"], by_query["q2"], by_query["q3"]], bert)  # passages: d1, d2 | d1 | d2, d1
    assert mask[0] == [False, False, True, False, True] and mask[1] == [True, False, False, False, True]
    assert mask[2] == [False, True, False, False, False]  # d2, its own positive, as q1's negative: masked before too


def test_an_inline_text_repeated_as_a_corpus_document_is_the_same_passage(tmp_path):
    """In a JSONL file the same positive text given inline on one line and as a corpus id on another."""
    write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "d1", "title": "", "text": "the cat sat"}])
    write_jsonl(tmp_path / "train.jsonl", [{"query": "cat", "positives": [{"text": "the cat sat"}]},
                                           {"query": "sat", "positives": [{"id": "d1"}]}])
    bert = make_tiny_bert(tmp_path / "bert", layers=1)
    examples = load_jsonl_examples(tmp_path / "train.jsonl", tmp_path / "corpus.jsonl")
    assert masked(examples, bert) == [[False, True], [True, False]]
