from __future__ import annotations

import shutil

import pytest

from retriever.corpus import BeirDataset
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.evaluation import evaluate_index, evaluate_run_file, judged_split
from retriever.indexing import encode_and_index
from retriever.runs import read_run
from retriever.searching import Searcher

HEADER = "query-id\tcorpus-id\tscore\n"


def test_a_split_judging_only_queries_the_queries_file_lacks_names_the_ids_not_the_grades(tiny_beir) -> None:
    """It said the split had no relevant judgment, sending the user to the grades when the ids differed."""
    (tiny_beir / "qrels" / "dev.tsv").write_text(HEADER + "PLAIN-1\td6\t1\nPLAIN-2\td4\t2\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match=r"none of the 2 queries split 'dev' judges \(e.g. 'PLAIN-1', 'PLAIN-2'\) "
                                             r"is in queries.jsonl \(ids e.g. 'q1', .*same query ids"):
        judged_split(BeirDataset.open(tiny_beir), "dev")
    (tiny_beir / "qrels" / "one.tsv").write_text(HEADER + "PLAIN-1\td6\t1\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match=r": the 1 query split 'one' judges \(e.g. 'PLAIN-1'\) is not in "
                                             r"queries.jsonl"):  # it said "none of the 1 queries"
        judged_split(BeirDataset.open(tiny_beir), "one")
    (tiny_beir / "qrels" / "zero.tsv").write_text(HEADER + "q1\td6\t0\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match="no query of split 'zero' has a relevant judgment .*grade column"):
        judged_split(BeirDataset.open(tiny_beir), "zero")


def tiny_searcher(beir, model_dir, tmp_path) -> Searcher:
    encoder = Encoder(EncoderSettings(model=str(model_dir)), device="cpu", dtype="fp32")
    encode_and_index(beir, tmp_path / "idx", encoder, progress=False, lexical=None)
    return Searcher(tmp_path / "idx", device="cpu", dtype="fp32")


def test_judged_queries_the_queries_file_lacks_are_named_not_only_counted_as_missing_from_the_run(
        tiny_beir, tiny_model_dir, tmp_path, capsys) -> None:
    """The table said only `1 missing from run, scored 0`, as if the search had dropped a query, when queries.jsonl
    never held it."""
    (tiny_beir / "qrels" / "test.tsv").write_text(HEADER + "q1\td6\t1\nq2\td4\t1\nq9\td2\t1\n", encoding="utf-8")
    searcher = tiny_searcher(tiny_beir, tiny_model_dir, tmp_path)
    report, _ = evaluate_index(searcher, BeirDataset.open(tiny_beir), "test", k=5, progress=False)
    assert report.evaluation.num_missing_from_run == 1 and report.evaluation.num_queries == 3
    assert ("warning: queries.jsonl lacks 1 of the 3 queries split 'test' judges (e.g. 'q9'); they are counted as "
            "missing from the run and score 0") in capsys.readouterr().err


def test_answers_that_hold_no_word_are_left_out_of_answer_recall_not_the_end_of_the_evaluation(
        tiny_beir, tiny_model_dir, tmp_path, capsys) -> None:
    """Answers of only punctuation (`"—"`) can match no passage: when no query had another, evaluate failed after
    the whole search (`no query has a non-empty answer`, no metrics), and beside others they were counted in
    `queries with answer strings` though left out of the mean."""
    queries = tiny_beir / "queries.jsonl"
    text = queries.read_text(encoding="utf-8")
    searcher = tiny_searcher(tiny_beir, tiny_model_dir, tmp_path)
    for answers, counted in (('["—", ""]', 3), ('["…"]', 3)):
        queries.write_text(text.replace('["flower"]', answers), encoding="utf-8")
        report, _ = evaluate_index(searcher, BeirDataset.open(tiny_beir), "test", k=5, progress=False)
        assert report.queries_with_answers == counted and set(report.answer_recall) == {
            "answer_recall@1", "answer_recall@5"}
        assert "warning: the answers of 1 query hold no word (e.g. 'q1'" in capsys.readouterr().err
    queries.write_text(text.replace('"metadata": {"answers": [', '"metadata": {"answers": ["?", '), encoding="utf-8")
    report, _ = evaluate_index(searcher, BeirDataset.open(tiny_beir), "test", k=5, progress=False)
    assert report.queries_with_answers == 4  # "?" beside a word: the query keeps its other answer
    only_wordless = text.replace('["flower"]', '["?"]').replace('["volcano"]', '["!"]')
    only_wordless = only_wordless.replace('["blood"]', '["-"]').replace('["glacier"]', '["."]')
    queries.write_text(only_wordless, encoding="utf-8")
    report, _ = evaluate_index(searcher, BeirDataset.open(tiny_beir), "test", k=5, progress=False)
    assert report.answer_recall == {} and report.evaluation.num_queries == 4
    assert "the answers of 4 queries hold no word" in capsys.readouterr().err


def test_an_index_holding_none_of_the_judged_documents_is_named_not_scored_zero(tiny_beir, tiny_model_dir,
                                                                                tmp_path) -> None:
    """Evaluating an index on another collection's split printed every metric as 0.0000 with exit 0, where fusion
    tuning and mining refuse it."""
    searcher = tiny_searcher(tiny_beir, tiny_model_dir, tmp_path)
    (tiny_beir / "qrels" / "other.tsv").write_text(HEADER + "q1\tX6\t1\nq2\tX4\t2\nq3\td1\t0\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match=r"none of the 2 documents tiny-beir split other judges relevant is in the "
                                             r"index, so every metric is 0: is this the index's collection\?"):
        evaluate_index(searcher, BeirDataset.open(tiny_beir), "other", k=12, progress=False)
    (tiny_beir / "qrels" / "lone.tsv").write_text(HEADER + "q1\tX6\t1\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match=r"^the 1 document tiny-beir split lone judges relevant is not in the "
                                             r"index, so"):  # it said "none of the 1 documents ... is in the index"
        evaluate_index(searcher, BeirDataset.open(tiny_beir), "lone", k=12, progress=False)


def test_an_index_lacking_some_judged_documents_is_scored_with_a_warning_naming_them(tiny_beir, tiny_model_dir,
                                                                                     tmp_path, capsys) -> None:
    """An index of part of a corpus scored lower recall without a word; the lookup reads ids only (``lacking``)."""
    searcher = tiny_searcher(tiny_beir, tiny_model_dir, tmp_path)
    (tiny_beir / "qrels" / "some.tsv").write_text(
        HEADER + "q1\tX6\t1\nq1\tX7\t2\nq2\td4\t1\nq3\tX8\t1\nq3\tX9\t1\nq4\tX6\t0\n", encoding="utf-8")
    capsys.readouterr()
    assert searcher.documents.lacking(["d4", "X6"]) == ["X6"]
    report, _ = evaluate_index(searcher, BeirDataset.open(tiny_beir), "some", k=12, progress=False)
    assert report.evaluation.per_query["q1"]["recall@10"] == 0.0 and report.evaluation.num_queries == 3
    warnings = [line for line in capsys.readouterr().err.splitlines() if "not in the index" in line]
    assert warnings == ["warning: 4 of the 5 documents tiny-beir split some judges relevant are not in the index "
                        "(e.g. 'X6', 'X7', 'X8'): they count as not retrieved, so the metrics are lower than on an "
                        "index of the whole corpus"]
    (tiny_beir / "qrels" / "whole.tsv").write_text(HEADER + "q1\td6\t1\nq2\tX4\t0\n", encoding="utf-8")
    evaluate_index(searcher, BeirDataset.open(tiny_beir), "whole", k=12, progress=False)
    assert "not in the index" not in capsys.readouterr().err  # a document judged 0 is not looked for


@pytest.mark.parametrize("fusion", [{"method": "convex", "alpha": "0.3", "depth": 1000, "rrf_k": 60},
                                    {"method": "rrf", "rrf_k": 60, "alpha": 0.5, "depth": 1000, "tuned": 5}])
def test_hybrid_evaluation_with_flags_standing_in_for_a_damaged_fusion_record(tiny_beir, tiny_model_dir, tmp_path,
                                                                              fusion) -> None:
    """Flags giving the method and its setting let hybrid run over a damaged record; evaluate then read the record
    for where it was tuned, and raised on it (a RetrieverError on "0.3", an AttributeError on 5)."""
    from retriever.index_folder import read_manifest, replace_manifest

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, progress=False)
    replace_manifest(tmp_path / "idx", {**read_manifest(tmp_path / "idx"), "fusion": fusion})
    searcher = Searcher(tmp_path / "idx", device="cpu", dtype="fp32", mode="hybrid",
                        fusion_overrides={"method": "rrf", "rrf_k": 60})
    report, _ = evaluate_index(searcher, BeirDataset.open(tiny_beir), "test", k=5, progress=False)
    assert report.evaluation.num_queries == 4


def test_evaluate_index_takes_the_dataset_as_a_path_too(tiny_beir, tiny_model_dir, tmp_path) -> None:
    """A folder's path (as tune_fusion takes it) failed with AttributeError: 'str' object has no attribute
    'qrels_path'; an index path where the Searcher goes, with 'no attribute manifest'."""
    searcher = tiny_searcher(tiny_beir, tiny_model_dir, tmp_path)
    wanted = evaluate_index(searcher, BeirDataset.open(tiny_beir), "test", k=5, progress=False)[0].to_json()
    assert evaluate_index(searcher, str(tiny_beir), "test", k=5, progress=False)[0].to_json() == wanted
    assert evaluate_index(searcher, tiny_beir, "test", k=5, progress=False)[0].to_json() == wanted
    with pytest.raises(RetrieverError, match="^searcher must be a Searcher, e.g. Searcher.'indexes/NAME'., not str"):
        evaluate_index(str(searcher.index_dir), tiny_beir, "test", k=5, progress=False)
    with pytest.raises(RetrieverError, match="^dataset must be a BEIR folder's path or a BeirDataset, not int 3$"):
        evaluate_index(searcher, 3, "test", k=5, progress=False)


def test_evaluate_index_scores_at_the_relevance_level_given(tiny_beir, tiny_model_dir, tmp_path) -> None:
    """trec_eval's -l: grade-1 documents are not relevant at level 2, so the queries judging none higher score recall
    0, nDCG as before; a level no grade reaches is refused (every binary measure would be 0)."""
    searcher = tiny_searcher(tiny_beir, tiny_model_dir, tmp_path)
    (tiny_beir / "qrels" / "graded.tsv").write_text(HEADER + "q1\td6\t2\nq2\td4\t1\nq3\td10\t1\nq4\td5\t1\n",
                                                    encoding="utf-8")
    one = evaluate_index(searcher, tiny_beir, "graded", k=12, progress=False)[0].evaluation
    two = evaluate_index(searcher, tiny_beir, "graded", k=12, progress=False, relevance_level=2)[0].evaluation
    assert one.per_query["q2"]["recall@10"] > 0 and two.per_query["q2"]["recall@10"] == 0
    assert two.per_query["q1"] == one.per_query["q1"] and two.mean["ndcg@10"] == one.mean["ndcg@10"] > 0
    with pytest.raises(RetrieverError, match="relevance level is 0"):
        evaluate_index(searcher, tiny_beir, "test", k=12, progress=False, relevance_level=0)
    with pytest.raises(RetrieverError, match="no judgment reaches relevance level 2"):
        evaluate_index(searcher, tiny_beir, "test", k=12, progress=False, relevance_level=2)


def test_a_dataset_whose_corpus_is_not_the_indexs_is_warned_of_once_hashed_only_at_equal_sizes(
        tiny_beir, tiny_model_dir, tmp_path, capsys, monkeypatch) -> None:
    """Another collection's qrels whose ids the index happens to hold (numeric ids, e.g. Medline's on a Cranfield
    index) were scored without a word; an identical copy of the corpus is not warned of, one of the same size but
    other bytes is, and one of another size is without hashing it."""
    import shutil

    import retriever.evaluation as evaluation

    searcher = tiny_searcher(tiny_beir, tiny_model_dir, tmp_path)
    other = tmp_path / "other-beir"
    shutil.copytree(tiny_beir, other)
    evaluate_index(searcher, other, "test", k=5, progress=False)
    assert "another collection" not in capsys.readouterr().err
    corpus = other / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace("the cat sat", "the bat sat"), encoding="utf-8")  # same size
    evaluate_index(searcher, other, "test", k=5, progress=False)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "warning: the index was built from tiny-beir/corpus.jsonl" in err
    assert f"not from {corpus}" in err and "another collection's judgments" in err
    corpus.write_text(corpus.read_text() + '{"_id": "d13", "title": "", "text": "more"}\n', encoding="utf-8")
    monkeypatch.setattr(evaluation, "remembered_sha256",
                        lambda *a, **k: pytest.fail("hashed a corpus of another size"))
    evaluate_index(searcher, other, "test", k=5, progress=False)
    assert "another collection's judgments" in capsys.readouterr().err


def test_a_corpus_record_without_its_size_is_compared_by_its_sha256(tiny_beir, tiny_model_dir, tmp_path,
                                                                    capsys) -> None:
    """A manifest's corpus record without ``bytes`` (older manifests) was never compared, so an index of another
    collection was scored in silence, while the demo compared the same record by its SHA-256 and refused."""
    searcher = tiny_searcher(tiny_beir, tiny_model_dir, tmp_path)
    del searcher.manifest["corpus"]["bytes"]
    evaluate_index(searcher, tiny_beir, "test", k=5, progress=False)
    assert "another collection" not in capsys.readouterr().err
    corpus = tiny_beir / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + '{"_id": "d13", "title": "", "text": "more"}\n', encoding="utf-8")
    evaluate_index(searcher, tiny_beir, "test", k=5, progress=False)
    assert f"not from {corpus} (other content): the metrics compare" in capsys.readouterr().err


def test_evaluate_index_refuses_bad_metrics_and_another_collection_before_any_search(tiny_beir, tiny_model_dir,
                                                                                      tmp_path, monkeypatch) -> None:
    """A misspelt metric from the library, or a split none of whose relevant documents the index holds, was refused
    only after every judged query had been searched (minutes on a large split)."""
    searcher = tiny_searcher(tiny_beir, tiny_model_dir, tmp_path)
    searched = []
    monkeypatch.setattr(Searcher, "run", lambda self, *args, **kwargs: searched.append(args) or {})
    with pytest.raises(RetrieverError, match="unknown metric 'bogus@3'"):
        evaluate_index(searcher, tiny_beir, "test", k=5, progress=False, metrics=("ndcg@10", "bogus@3"))
    (tiny_beir / "qrels" / "other.tsv").write_text(HEADER + "q1\tX6\t1\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match="is not in the index, so every metric is 0"):
        evaluate_index(searcher, tiny_beir, "other", k=5, progress=False)
    with pytest.raises(RetrieverError, match="no judgment reaches relevance level 2"):
        evaluate_index(searcher, tiny_beir, "test", k=5, progress=False, relevance_level=2)
    assert searched == []


@pytest.mark.parametrize("split", [5, None, b"test"])
def test_a_split_that_is_no_name_is_refused_in_one_line(tiny_beir, split) -> None:
    """A split given as a number or None was a TypeError traceback ("argument of type 'int' is not iterable") from
    the qrels path lookup, for evaluate_index, mining and fusion tuning alike."""
    with pytest.raises(RetrieverError, match=r"^split must be a split's name such as 'test' \(qrels/NAME.tsv\), not "):
        judged_split(BeirDataset.open(tiny_beir), split)


@pytest.mark.parametrize("dataset", ["path", "str", "int", "empty"])
def test_judged_split_takes_a_dataset_as_evaluate_index_does(tiny_beir, monkeypatch, dataset) -> None:
    """`judged_split("datasets/scifact", "test")` raised AttributeError ('str' object has no attribute
    'qrels_path'), where evaluate_index takes a BEIR folder's path or a BeirDataset; "" (an unset variable) read the
    working folder as the dataset, in both."""
    given = {"path": tiny_beir, "str": str(tiny_beir), "int": 5, "empty": ""}[dataset]
    if dataset in ("int", "empty"):
        monkeypatch.chdir(tiny_beir)
        said = "must be a BEIR folder's path or a BeirDataset, not int" if dataset == "int" else "is empty"
        with pytest.raises(RetrieverError, match=rf"^dataset {said}"):
            judged_split(given, "test")
        return
    queries, qrels = judged_split(given, "test")
    assert [q.id for q in queries] == ["q1", "q2", "q3", "q4"] and qrels["q2"] == {"d4": 1}


def test_evaluate_index_holds_one_batch_of_hits_at_a_time(tiny_beir, tiny_flat_build, tmp_path, monkeypatch,
                                                           batches_searched) -> None:
    """The whole run (queries x k hits: gigabytes for a few hundred thousand queries at k 1000) was held until it was
    scored, and --save-run written from it; each batch is now scored, and written, as it is searched, the run kept
    whole only when asked."""
    earlier = batches_searched
    searcher = Searcher(shutil.copytree(tiny_flat_build, tmp_path / "index"), device="cpu", dtype="fp32")
    saved = tmp_path / "run.trec"
    report, run = evaluate_index(searcher, tiny_beir, "test", k=12, progress=False, save_run=saved)
    assert len(earlier) == 4 and run is None and report.answer_recall["answer_recall@1"] > 0
    assert evaluate_run_file(saved, tiny_beir / "qrels" / "test.tsv").evaluation == report.evaluation
    monkeypatch.setattr(Searcher, "run_batches", Searcher.run_batches.__wrapped__)  # batches of one still: the scores' low bits are alike
    kept_report, kept = evaluate_index(searcher, tiny_beir, "test", k=12, progress=False, keep_run=True)
    assert kept == read_run(saved) and kept_report.to_json() == report.to_json()


@pytest.mark.parametrize("arguments, message", [({"metrics": ["ndcg@0"]}, "unknown metric 'ndcg@0'"),
                                                ({"relevance_level": 0}, "the relevance level is 0")])
def test_evaluate_run_file_checks_its_settings_before_reading_the_files(tmp_path, arguments, message):
    """A bad metric or relevance level was found only once the whole run and qrels were read (for a run of millions
    of lines, seconds); here the files do not exist, and the setting is what is named."""
    with pytest.raises(RetrieverError, match=message):
        evaluate_run_file(tmp_path / "no-run.trec", tmp_path / "no-qrels.tsv", **arguments)
