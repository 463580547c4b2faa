"""The dev set a training run selects checkpoints on."""
from __future__ import annotations

import numpy as np
import pytest

from retriever.errors import RetrieverError
from retriever.training.dev import (DevSet, share_top_k, load_dev_set, merged_top_k, process_share,
                                   shared_queries_warning)


def test_judged_dev_queries_the_queries_file_lacks_are_named(tiny_beir, capsys):
    """They scored 0 in every dev evaluation without a word, as mining left them out (probe round 9)."""
    qrels = tiny_beir / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q9\td7\t1\n", encoding="utf-8")
    dev = load_dev_set(tiny_beir, "test")
    assert dev.query_ids == ["q1", "q2", "q3", "q4"]
    assert ("warning: queries.jsonl lacks 1 of the 5 queries split 'test' judges (e.g. 'q9'); they are not "
            "searched, and score 0 in every dev evaluation") in capsys.readouterr().err


def test_judged_dev_documents_the_corpus_lacks_are_named_and_a_corpus_holding_none_is_refused(tiny_beir, capsys):
    """A dev split judging documents its corpus lacks (another collection's qrels, a cut corpus) scored them as misses
    without a word, and with none of them there every dev score was 0 and the weights kept were picked by a tie."""
    qrels = tiny_beir / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text().replace("d6", "d99"), encoding="utf-8")
    assert load_dev_set(tiny_beir, "test").query_ids == ["q1", "q2", "q3", "q4"]
    assert ("warning: dev set tiny-beir/test: 1 of the 4 documents it judges relevant is not in its corpus.jsonl "
            "(e.g. 'd99'): it counts as a miss in every dev evaluation") in capsys.readouterr().err
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\tx1\t1\nq2\tx2\t1\nq3\td10\t0\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match=r"^dev set tiny-beir/test: none of the 2 documents it judges relevant is "
                                             r"in its corpus.jsonl, so every dev score would be 0"):
        load_dev_set(tiny_beir, "test", max_docs=5)



def test_judged_documents_the_corpus_lacks_take_no_slot_of_the_dev_sample(tiny_beir):
    """The sample's room was --dev-max-docs less the judged ids, counted before the corpus was read: with 2 of the 4
    judged documents missing, --dev-max-docs 5 kept 3 documents. Every other document can be drawn, by seed."""
    qrels = tiny_beir / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text().replace("d6", "d99").replace("d4", "d98"), encoding="utf-8")
    documents = [document.id for document in load_dev_set(tiny_beir, "test", max_docs=5).documents]
    assert len(documents) == 5 and documents[:2] == ["d5", "d10"], documents
    assert load_dev_set(tiny_beir, "test", max_docs=2).documents == load_dev_set(tiny_beir, "test", max_docs=2).documents
    drawn = {document.id for seed in range(100) for document in load_dev_set(tiny_beir, "test", 3, seed).documents[2:]}
    assert drawn == {f"d{number}" for number in range(1, 13)} - {"d5", "d10"}

def test_only_the_first_process_names_the_judged_dev_queries_the_file_lacks(tiny_beir, capsys, monkeypatch):
    """Every torchrun process reads the dev set, and each printed the warning: one copy per process."""
    qrels = tiny_beir / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q9\td7\t1\n", encoding="utf-8")
    monkeypatch.setenv("RANK", "1")
    assert load_dev_set(tiny_beir, "test").query_ids == ["q1", "q2", "q3", "q4"]
    assert capsys.readouterr().err == ""


def test_one_dev_query_shared_with_training_is_said_in_the_singular():
    """It said "1 of the 2 dev queries (e.g. 'q0') are training queries too"."""
    dev = DevSet("beir/dev", ["q0", "q1"], ["cats", "dogs"], [], {})
    assert shared_queries_warning(dev, ["cats "]).startswith(
        "warning: 1 of the 2 dev queries (e.g. 'q0') is a training query too: on it dev scores measure fit")
    assert shared_queries_warning(dev, ["cats", "dogs"]).startswith(
        "warning: 2 of the 2 dev queries (e.g. 'q0') are training queries too: on them dev scores measure fit")


def test_top_hits_merged_over_shares_equal_one_search_ties_at_the_cut_included():
    """Under torchrun each process searches its share of the dev documents and the first merges their top hits: the
    same hits as one search of them all, and the documents tied at the cut chosen by row, not by the split."""
    generator = np.random.default_rng(0)
    documents = generator.standard_normal((40, 8)).astype(np.float32)
    documents[[3, 17, 25, 38]] = documents[9]  # five copies: tied wherever they fall
    queries = np.concatenate([documents[[9]], generator.standard_normal((4, 8)).astype(np.float32)])
    alone = merged_top_k([share_top_k(queries, documents, 3, 0)], 3)
    for processes in 2, 3, 7:
        shares = [process_share(len(documents), rank, processes) for rank in range(processes)]
        merged = merged_top_k([share_top_k(queries, documents[share], 3, share.start) for share in shares], 3)
        assert merged[1].tolist() == alone[1].tolist() and np.allclose(merged[0], alone[0])
    assert alone[1][0].tolist() == [3, 9, 17]  # the copies with the lowest rows


def test_a_dev_set_given_as_the_working_folder_is_named_by_the_folder(tiny_beir, monkeypatch):
    """`train --dev-dataset .` (run from inside the dataset) named its dev set "/test" in every dev line, as
    mine and evaluation name a dataset by its folder's real name."""
    monkeypatch.chdir(tiny_beir)
    assert load_dev_set(".", "test").name == f"{tiny_beir.resolve().name}/test"
