from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from fixtures_corpora import with_another_corpus
from fixtures_system import nothing_created_in
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.fusion import FusionParams
from retriever.corpus import BeirDataset
from retriever.evaluation import evaluate_index
from retriever.fusion_tuning import check_tuning_split, fusion_grid, tune_and_record
from retriever.indexing import MANIFEST_FILE, encode_and_index
from retriever.searching import Searcher


HEADER = "query-id\tcorpus-id\tscore\n"


def split_off_train(beir) -> None:
    """Judge q1 and q2 in train and only q3 and q4 in test: a tuning split must not share test queries."""
    (beir / "qrels" / "train.tsv").write_text(HEADER + "q1\td6\t1\nq2\td4\t1\n", encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text(HEADER + "q3\td10\t1\nq4\td5\t1\n", encoding="utf-8")


@pytest.fixture()
def index_and_dataset(tiny_beir, tiny_flat_build, tmp_path):
    split_off_train(tiny_beir)
    return shutil.copytree(tiny_flat_build, tmp_path / "idx"), tiny_beir


def test_grid_starts_with_the_untuned_default():
    grid = fusion_grid(1000)
    assert grid[0] == FusionParams() and {p.method for p in grid} == {"rrf", "convex"}
    assert [p.alpha for p in grid if p.method == "convex"][::10] == [0.0, 0.5, 1.0]


def test_tuning_records_the_best_fusion_which_search_then_uses(index_and_dataset):
    index, dataset = index_and_dataset
    record = tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=False)
    tuned = record["tuned"]
    assert tuned["split"] == "train" and tuned["queries"] == 2 and tuned["metric"] == "ndcg@10"
    assert tuned["score"] == max(row["ndcg@10"] for row in tuned["grid"]) >= tuned["untuned_rrf"]
    assert json.loads((index / MANIFEST_FILE).read_text())["fusion"] == record
    searcher = Searcher(index, device="cpu", dtype="fp32")
    assert searcher.fusion == FusionParams.from_record(record)
    assert Searcher(index, device="cpu", fusion_overrides={"method": "rrf"}).fusion.method == "rrf"


def test_tuning_line_names_only_the_parameter_of_the_method_it_picked(index_and_dataset, capsys):
    """It said 'convex rrf_k=60 alpha=0.65', naming the parameter the picked method does not use."""
    index, dataset = index_and_dataset
    record = tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=True)
    line = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("fusion tuned on"))
    assert f": {FusionParams.from_record(record).setting()} ndcg@10 " in line
    assert ("alpha=" in line) != ("rrf_k=" in line)


def test_tuning_on_the_test_split_is_refused(index_and_dataset):
    index, dataset = index_and_dataset
    with pytest.raises(RetrieverError, match="--split test: tuning the fusion on the split you report"):
        tune_and_record(index, dataset, "test", device="cpu")
    assert "fusion" not in json.loads((index / MANIFEST_FILE).read_text())


def test_a_split_that_is_or_includes_test_is_refused_before_the_index_is_opened(tiny_beir):
    qrels = tiny_beir / "qrels"
    with pytest.raises(RetrieverError, match="a split is the name of a file in qrels/"):
        check_tuning_split(tiny_beir, "./test")
    os.symlink(qrels / "test.tsv", qrels / "dev.tsv")  # the test split under another name
    with pytest.raises(RetrieverError, match="--split dev: tuning the fusion on the split you report"):
        check_tuning_split(tiny_beir, "dev")
    (qrels / "all.tsv").write_text((qrels / "test.tsv").read_text() + "q5\td1\t1\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match="--split all: 4 of the tuning split's queries are judged in "
                                             "qrels/test.tsv: tuning on them would overstate test results"):
        check_tuning_split(tiny_beir, "all")
    (qrels / "unjudged.tsv").write_text(HEADER + "q1\td6\t0\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match="no query of split 'unjudged' has a relevant judgment"):
        check_tuning_split(tiny_beir, "unjudged")
    split_off_train(tiny_beir)
    beir, queries, _ = check_tuning_split(tiny_beir, "train")
    assert beir.root == tiny_beir and [q.id for q in queries] == ["q1", "q2"]


def test_a_split_whose_every_query_is_blank_is_refused_before_the_index_is_opened(tiny_beir):
    """Every setting scored 0 on such a split, and the 'tuned' fusion was recorded (ndcg@10 0.0000, exit 0)."""
    split_off_train(tiny_beir)
    queries = [json.loads(line) for line in (tiny_beir / "queries.jsonl").read_text().splitlines()]
    for query in queries:
        query["text"] = {"q1": "", "q2": "\u200b "}.get(query["_id"], query["text"])
    (tiny_beir / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    with pytest.raises(RetrieverError, match="all 2 queries split 'train' judges have empty text"):
        check_tuning_split(tiny_beir, "train")
    (tiny_beir / "qrels" / "one.tsv").write_text(HEADER + "q1\td6\t1\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match="the 1 query split 'one' judges has empty text"):  # "all 1 queries"
        check_tuning_split(tiny_beir, "one")


def test_tuning_on_another_collection_is_refused_and_keeps_the_earlier_tuning(index_and_dataset, tmp_path, capsys):
    index, dataset = index_and_dataset
    record = tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=False)
    other = tmp_path / "other"
    shutil.copytree(dataset, other)
    (other / "qrels" / "train.tsv").write_text(HEADER + "q1\tx1\t1\nq2\tx2\t1\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match="none of the 2 documents other split train judges relevant is in the "
                                             "index, so every setting scores 0: is this the index's collection?"):
        tune_and_record(index, other, "train", device="cpu", dtype="fp32", progress=False)
    assert json.loads((index / MANIFEST_FILE).read_text())["fusion"] == record
    (other / "qrels" / "train.tsv").write_text(HEADER + "q1\td6\t1\nq2\tx2\t1\n", encoding="utf-8")
    tune_and_record(index, other, "train", device="cpu", dtype="fp32", progress=False)
    assert ("1 of the 2 documents other split train judges relevant is not in the index (e.g. 'x2'): it counts as a "
            "miss in every setting") in capsys.readouterr().err


def test_evaluating_the_tuning_split_in_hybrid_warns(index_and_dataset, capsys):
    index, dataset = index_and_dataset
    tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=False)
    beir = BeirDataset.open(dataset)
    for mode, split, overrides, warned in (("hybrid", "train", None, True), ("hybrid", "test", None, False),
                                           ("dense", "train", None, False),
                                           ("hybrid", "train", {"method": "rrf", "rrf_k": 7.0}, False),
                                           ("hybrid", "train", {"depth": 50}, True)):  # the tuned method still
        searcher = Searcher(index, device="cpu", dtype="fp32", mode=mode, fusion_overrides=overrides)
        evaluate_index(searcher, beir, split, k=10, progress=False)
        err = capsys.readouterr().err
        assert ("the index's fusion was tuned on tiny-beir split train" in err) == warned, (mode, split, err)


def test_tuning_on_the_working_folder_records_its_name_and_evaluating_it_warns(index_and_dataset, capsys,
                                                                               monkeypatch):
    """`--tune-fusion-on .` recorded the dataset as "" (info: `tuned on  train`), so evaluating that split from
    anywhere else never warned that the hybrid results overstate it."""
    index, dataset = index_and_dataset
    monkeypatch.chdir(dataset)
    record = tune_and_record(index.resolve(), ".", "train", device="cpu", dtype="fp32", progress=False)
    assert record["tuned"]["dataset"] == "tiny-beir"
    monkeypatch.chdir(dataset.parent)
    searcher = Searcher(index, device="cpu", dtype="fp32", mode="hybrid")
    capsys.readouterr()
    evaluate_index(searcher, BeirDataset.open("tiny-beir"), "train", k=10, progress=False)
    assert "the index's fusion was tuned on tiny-beir split train" in capsys.readouterr().err


def test_judged_queries_missing_from_the_queries_file_are_named_when_tuning(index_and_dataset, capsys):
    """Tuning left judged queries that queries.jsonl lacks out of its search without a word, though each scores 0 in
    every setting of the grid."""
    index, dataset = index_and_dataset
    (dataset / "qrels" / "train.tsv").write_text(HEADER + "q1\td6\t1\nq2\td4\t1\nq9\td2\t1\n", encoding="utf-8")
    record = tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=False)
    assert record["tuned"]["queries"] == 2
    assert ("warning: queries.jsonl lacks 1 of the 3 queries split 'train' judges (e.g. 'q9'); they are not searched "
            "and score 0 in every setting") in capsys.readouterr().err


def test_tuning_searches_a_batch_of_queries_at_a_time_and_shows_its_progress(index_and_dataset, monkeypatch, capsys):
    """Tuning searched every query of the split at once, holding each one's dense and BM25 lists at the fusion depth,
    and printed nothing while it ran (SQuAD's 5,696 train queries: 3 min 20 s without a word). It now searches as
    evaluate does, a batch at a time under a progress bar, and records the same fusion."""
    import retriever.search_runs

    index, dataset = index_and_dataset
    whole = tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=False)
    capsys.readouterr()
    searched = []
    rank = Searcher.rank
    monkeypatch.setattr(Searcher, "rank", lambda self, texts, *args, **kwargs: searched.append(len(texts))
                        or rank(self, texts, *args, **kwargs))
    monkeypatch.setattr(retriever.search_runs, "BATCH_HITS", 12)  # one query's lists over the 12 documents
    assert tune_and_record(index, dataset, "train", device="cpu", dtype="fp32") == whole
    assert searched == [1, 1, 1, 1]  # each of the 2 queries, dense then BM25
    err = capsys.readouterr().err
    assert "tune fusion on train: 100%" in err and " 2/2 " in err


def test_tuning_on_the_split_the_encoder_was_trained_on_warns_but_tunes(tiny_beir, tiny_model_dir, tmp_path, capsys):
    """A fine-tuned encoder ranks its own training queries better than unseen ones, so tuning on them picked a weight
    favouring dense (SQuAD: alpha 0.75 tuned on train scored below a less trained model on test) without a word."""
    split_off_train(tiny_beir)
    (tiny_beir / "qrels" / "dev.tsv").write_text(HEADER + "q1\td6\t1\n", encoding="utf-8")
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    (model / "retriever.json").write_text(json.dumps({"training": {"dataset": "tiny-beir", "split": "train"}}))
    encoder = Encoder(EncoderSettings(model=str(model)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, progress=False)
    capsys.readouterr()
    for split, warned in (("train", True), ("dev", False)):
        record = tune_and_record(tmp_path / "idx", tiny_beir, split, device="cpu", dtype="fp32", progress=False)
        err = capsys.readouterr().err
        assert record["tuned"]["split"] == split
        assert ("the index's encoder was trained on tiny-beir split train, the split tuned on here" in err) == warned
        assert ("tune on a split held out of its training" in err) == warned, err


def test_tuning_is_refused_while_a_build_of_the_index_holds_its_lock(index_and_dataset):
    """Tuning took no lock: a `bm25 --overwrite` (or `--drop-fusion`) beside it could swap the BM25 part it ranks
    with, or one of the two manifest writes would be lost."""
    from retriever.folders import exclusive_build, named_output

    index, dataset = index_and_dataset
    before = (index / MANIFEST_FILE).read_bytes()
    with exclusive_build(named_output(index), elsewhere=""):
        with pytest.raises(RetrieverError, match=r"another build or tuning of it is running \(pid \d+\); wait"):
            tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=False)
    assert (index / MANIFEST_FILE).read_bytes() == before
    assert tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=False)["method"]


def test_tune_fusion_given_an_index_path_says_to_open_a_searcher(tmp_path):
    """An index path where the Searcher goes failed with AttributeError: 'str' object has no attribute 'documents'."""
    from retriever.fusion_tuning import tune_fusion

    with pytest.raises(RetrieverError, match=r"^searcher must be a Searcher, e.g. Searcher\('indexes/NAME', "
                                             r"mode='hybrid'\) \(tune_and_record takes the index's path and records "
                                             r"the fusion in it\), not str"):
        tune_fusion(str(tmp_path / "idx"), tmp_path / "beir", "train", progress=False)


def test_tuning_on_a_dataset_whose_corpus_is_not_the_indexs_warns(index_and_dataset, tmp_path, capsys):
    """Judgments of another collection whose ids the index holds tuned the fusion without a word."""
    index, dataset = index_and_dataset
    other = with_another_corpus(dataset, tmp_path / "other")
    tune_and_record(index, other, "train", device="cpu", dtype="fp32", progress=False)
    assert f"not from {other / 'corpus.jsonl'}" in capsys.readouterr().err


@pytest.mark.parametrize("judged, held, said", [
    (["d1", "x1"], ["d1"], "warning: 1 of the 2 documents tiny-beir split train judges relevant is not in the index "
                           "(e.g. 'x1'): it counts as a miss in every setting"),
    (["d1", "x1", "x2"], ["d1"], "warning: 2 of the 3 documents tiny-beir split train judges relevant are not in the "
                                 "index (e.g. 'x1', 'x2'): they count as a miss in every setting"),
    (["x1"], [], "the 1 document tiny-beir split train judges relevant is not in the index, so every setting scores "
                 "0: is this the index's collection?"),
    (["x1", "x2"], [], "none of the 2 documents tiny-beir split train judges relevant is in the index, so every "
                       "setting scores 0: is this the index's collection?")])
def test_judged_documents_missing_from_the_index_are_counted_in_agreement(tiny_beir, judged, held, said, capsys):
    """It said "1 of the 2 judged documents ... are not in the index", and "none of the 1 judged documents". Tuning
    asks evaluation's check (``check_collection``), in its words: it had a copy of its own."""
    from types import SimpleNamespace

    from retriever.evaluation import check_collection

    searcher = SimpleNamespace(documents=SimpleNamespace(lacking=lambda docs: [doc for doc in docs if doc not in held]))
    qrels = {"q1": dict.fromkeys(judged, 1)}
    tuning_words = ("every setting scores 0", "a miss in every setting")  # as tune_fusion gives them
    if held:
        check_collection(searcher, BeirDataset(tiny_beir), "train", qrels, *tuning_words)
        assert capsys.readouterr().err == said + "\n"
    else:
        with pytest.raises(RetrieverError, match="^" + re.escape(said) + "$"):
            check_collection(searcher, BeirDataset(tiny_beir), "train", qrels, *tuning_words)


def test_tuning_fuses_to_a_fixed_depth_and_takes_no_k(index_and_dataset, monkeypatch):
    """``tune_fusion(k=0)`` recorded a fusion 'tuned' at nDCG@10 0.0 (every fused list empty), k=-1 and k="5" failed
    with NumPy's errors and k=10**9 asked for 30 GiB; nDCG@10 reads the top 10 of a list fused a fixed depth."""
    from retriever import fusion_tuning

    index, dataset = index_and_dataset
    depths, fuse = [], fusion_tuning.fuse
    monkeypatch.setattr(fusion_tuning, "fuse", lambda *args: depths.append(args[-1]) or fuse(*args))
    searcher = Searcher(index, device="cpu", dtype="fp32", mode="bm25")
    record = fusion_tuning.tune_fusion(searcher, dataset, "train", progress=False)
    assert set(depths) == {fusion_tuning.FUSED_DEPTH} and record["tuned"]["score"] > 0
    with pytest.raises(TypeError, match="'k'"):
        fusion_tuning.tune_fusion(searcher, dataset, "train", k=0, progress=False)


def test_tuning_an_index_folder_that_cannot_be_written_is_refused_before_searching(index_and_dataset, monkeypatch):
    """A read-only folder (simulated: root ignores permission bits) searched every judged query, then failed to
    write the manifest ("give another path", where no flag names one)."""
    import retriever.fusion_tuning as tuning

    index, dataset = index_and_dataset
    nothing_created_in(index, monkeypatch)
    monkeypatch.setattr(tuning, "tune_fusion", lambda *args, **kwargs: pytest.fail("searched first"))
    with pytest.raises(RetrieverError, match=r"the tuned fusion cannot be recorded in its manifest \(nothing can "
                                             r"be created in .*Permission denied.*make the folder writable"):
        tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=False)


def test_tuning_that_measures_nothing_records_nothing_and_says_so(tiny_model_dir, tmp_path, capsys):
    """Eleven passages of one text tie in every list; the judged one is ordered after ten of them, so every setting
    scored nDCG@10 0.0 (ties are ordered by id, descending, as trec_eval orders them), and RRF k=60, first in the grid, was recorded as 'tuned'."""
    beir = _eleven_ties(tiny_model_dir, tmp_path, "q1\td00\t1\n")  # ties go by id descending: d00 comes 11th
    record = tune_and_record(tmp_path / "idx", beir, "train", device="cpu", dtype="fp32", progress=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if "measured nothing" in line]
    assert record is None and lines == ["warning: fusion tuning measured nothing: every setting scored ndcg@10 0.0 on "
                                        "the 1 train query (no judged document reached a top 10), so no tuned fusion "
                                        "is recorded and hybrid keeps RRF k=60, untuned"]
    assert "fusion" not in json.loads((tmp_path / "idx" / MANIFEST_FILE).read_text())


def test_tuning_that_measures_a_tiny_score_records_it(tiny_model_dir, tmp_path, capsys):
    """d01 comes 10th in every list, judged 1 beside a judged passage the corpus lacks at 100000: the best nDCG@10 is
    about 3e-6, which rounded to 4 places was called 'every setting scored 0.0', and nothing was recorded."""
    beir = _eleven_ties(tiny_model_dir, tmp_path, "q1\td01\t1\nq1\tgone\t100000\n")
    record = tune_and_record(tmp_path / "idx", beir, "train", device="cpu", dtype="fp32", progress=True)
    err = capsys.readouterr().err
    assert record is not None and "measured nothing" not in err, err
    assert 0 < record["tuned"]["score"] < 1e-4 and re.search(r"ndcg@10 [0-9.]+e-0\d \(untuned RRF", err), err
    assert json.loads((tmp_path / "idx" / MANIFEST_FILE).read_text())["fusion"] == record


def _eleven_ties(model_dir, tmp_path, qrels: str):
    """Eleven passages of one text, which tie in every list, and one other; ``qrels`` is train's, for query q1."""
    from fixtures_corpora import write_jsonl

    beir = tmp_path / "dupes"
    (beir / "qrels").mkdir(parents=True)
    write_jsonl(beir / "corpus.jsonl", [{"_id": f"d{i:02d}", "title": "", "text": "hot lava rock"} for i in range(11)]
                + [{"_id": "other", "title": "", "text": "ice and snow"}])
    write_jsonl(beir / "queries.jsonl", [{"_id": "q1", "text": "hot lava"}])
    encoder = Encoder(EncoderSettings(model=str(model_dir)), device="cpu", dtype="fp32")
    encode_and_index(beir, tmp_path / "idx", encoder, progress=False)
    (beir / "qrels" / "train.tsv").write_text(HEADER + qrels, encoding="utf-8")
    return beir
