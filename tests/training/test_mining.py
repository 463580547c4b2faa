"""Hard-negative mining from an index: rank order, skipped top ranks, never a judged positive."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures_corpora import with_another_corpus
from retriever.corpus import read_queries
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import encode_and_index
from retriever.runs import ranked_hits
from retriever.searching import Searcher
from retriever.training.data import load_beir_examples
from retriever.training.mining import mine_negatives, select_negatives


@pytest.fixture()
def indexed_beir(tmp_path, tiny_flat_build, tiny_beir):
    (tiny_beir / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td6\t1\nq1\td3\t1\nq2\td4\t1\nq3\td10\t0\nq3\td1\t1\n", encoding="utf-8")
    return tiny_beir, shutil.copytree(tiny_flat_build, tmp_path / "index")


def test_select_negatives_skips_top_ranks_then_positives():
    ranked = ["a", "p1", "b", "c", "p2", "d", "e"]
    assert select_negatives(ranked, {"p1", "p2"}, skip_top=0, per_query=3) == ["a", "b", "c"]
    assert select_negatives(ranked, {"p1", "p2"}, skip_top=2, per_query=10) == ["b", "c", "d", "e"]


def test_mined_negatives_follow_the_ranking_and_skip_positives(indexed_beir, tmp_path):
    dataset, index = indexed_beir
    output = tmp_path / "negatives.jsonl"
    result = mine_negatives(index, dataset, output, split="train", depth=12, skip_top=1, per_query=5,
                            device="cpu", dtype="fp32", progress=False)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [line["query_id"] for line in lines] == ["q1", "q2", "q3"] and result.queries == 3
    searcher = Searcher(index, device="cpu", dtype="fp32")
    queries = {q.id: q.text for q in read_queries(dataset / "queries.jsonl")}
    positives = {"q1": {"d6", "d3"}, "q2": {"d4"}, "q3": {"d1"}}
    for line in lines:
        ranking = [d for d, _ in ranked_hits(searcher.run([line["query_id"]], [queries[line["query_id"]]], k=12)
                                             [line["query_id"]])]
        assert not set(line["negatives"]) & positives[line["query_id"]]
        assert line["negatives"] == [d for d in ranking[1:] if d not in positives[line["query_id"]]][:5]
    everything = mine_negatives(index, dataset, tmp_path / "all.jsonl", depth=12, per_query=12, device="cpu",
                                dtype="fp32", progress=False)
    q3 = json.loads((tmp_path / "all.jsonl").read_text().splitlines()[2])
    assert len(q3["negatives"]) == 11 and "d10" in q3["negatives"]  # grade 0 is judged non-relevant: a negative
    assert everything.negatives == 10 + 11 + 11
    examples = {e.query_id: e for e in load_beir_examples(dataset, "train", output)}
    assert [p.id for p in examples["q1"].negatives] == lines[0]["negatives"]


def test_skipping_every_retrieved_document_is_refused(indexed_beir, tmp_path):
    dataset, index = indexed_beir
    with pytest.raises(RetrieverError, match="skip-top"):
        mine_negatives(index, dataset, tmp_path / "n.jsonl", depth=5, skip_top=5, progress=False)


def test_skipping_every_document_of_the_index_is_refused(indexed_beir, tmp_path):
    """--skip-top under --depth but at least the index's size drops every hit: an empty negatives file, exit 0."""
    dataset, index = indexed_beir
    with pytest.raises(RetrieverError, match="--skip-top 12 drops all 12 documents of the index"):
        mine_negatives(index, dataset, tmp_path / "n.jsonl", depth=100, skip_top=12, progress=False)
    assert not (tmp_path / "n.jsonl").exists()


def test_mining_an_index_of_another_collection_is_refused(indexed_beir, tmp_path, monkeypatch):
    """An index holding none of the split's judged documents (another collection's) had its hits written as
    negatives, exit 0; `train` then dropped every one as not in the corpus, or took same-named other passages. The
    dataset is named by its folder's real name, `.` included (it was named "")."""
    dataset, index = indexed_beir
    monkeypatch.chdir(dataset)  # mined as `--dataset .`
    dataset = Path(".")
    qrels = dataset / "qrels" / "train.tsv"
    qrels.write_text(qrels.read_text().replace("\td", "\tother-d"), encoding="utf-8")
    output = tmp_path / "negatives.jsonl"
    with pytest.raises(RetrieverError, match=r"index: none of the 4 documents tiny-beir split train judges "
                                             r"relevant is in the index, so its hits are another collection's "
                                             r"passages; mine from an index built from the dataset's corpus$"):
        mine_negatives(index, dataset, output, device="cpu", dtype="fp32", progress=False)
    (dataset / "qrels" / "one.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tother-d1\t1\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match=r": the 1 document tiny-beir split one judges relevant is not in the "
                                             r"index, so"):  # it said "none of the 1 judged documents ... is in the index"
        mine_negatives(index, dataset, output, split="one", device="cpu", dtype="fp32", progress=False)
    assert not output.exists()


def mined_with_judgments(dataset, index, tmp_path, judgments: str):
    """Mine the train split after appending ``judgments`` (qrels lines) to it."""
    qrels = dataset / "qrels" / "train.tsv"
    qrels.write_text(qrels.read_text() + judgments, encoding="utf-8")
    return mine_negatives(index, dataset, tmp_path / "n.jsonl", depth=12, device="cpu", dtype="fp32", progress=False)


def test_judged_queries_missing_from_the_queries_file_are_counted_not_dropped_silently(indexed_beir, tmp_path,
                                                                                         capsys):
    """A split judging queries that queries.jsonl lacks had them left out of the mined file without a word (evaluate
    counts such queries as missing from its run)."""
    result = mined_with_judgments(*indexed_beir, tmp_path, "q8\td2\t1\nq9\td7\t2\nq7\td8\t0\n")
    assert result.queries == 3 and result.queries_left_out == 2
    assert ("warning: queries.jsonl lacks 2 of the 5 queries split 'train' judges (e.g. 'q8', 'q9'); they get no "
            "negatives") in capsys.readouterr().err


class Searched(Exception):
    pass


@pytest.mark.parametrize("where", ["same", "other"])
def test_an_output_in_a_collections_qrels_folder_is_refused_before_mining(tiny_beir, tmp_path, monkeypatch, where):
    """`-o BEIR/qrels/negs.tsv` was written, and the collection then had a split "negs" that no command could read."""
    import shutil

    from retriever.training import mining

    def searched(*args, **kwargs):
        raise Searched
    monkeypatch.setattr(mining, "Searcher", searched)
    collection = tiny_beir if where == "same" else shutil.copytree(tiny_beir, tmp_path / "other-beir")
    output = collection / "qrels" / "negs.tsv"
    with pytest.raises(RetrieverError, match=rf"^{output}: .* qrels folder of the collection {collection},.* write "
                                             r"it elsewhere"):
        mine_negatives(tmp_path / "index", tiny_beir, output, split="test", progress=False)
    assert not output.exists()
    with pytest.raises(Searched):  # a qrels folder of no collection is only a folder
        mine_negatives(tmp_path / "index", tiny_beir, tmp_path / "qrels" / "negs.tsv", split="test",
                       progress=False)


def test_queries_judged_only_non_relevant_are_counted_in_the_summary(indexed_beir, tmp_path):
    """A query whose judgments are all grade 0 has no positive, so it is not mined; the summary said "for 3 queries"
    of a split judging 4, without a word of the fourth."""
    from click.testing import CliRunner

    from retriever.cli import main

    dataset, index = indexed_beir
    result = mined_with_judgments(dataset, index, tmp_path, "q4\td2\t0\n")
    assert result.queries == 3 and result.queries_without_positives == 1
    said = CliRunner().invoke(main, ["mine", str(index), "--dataset", str(dataset), "--split", "train", "-o",
                                     str(tmp_path / "m.jsonl"), "--device", "cpu", "--dtype", "fp32"])
    assert said.exit_code == 0, said.output
    assert "; 1 query judged only non-relevant left out, with no positive to train on)" in said.stderr


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_a_copy_of_a_judged_positive_is_not_mined_as_its_negative(tmp_path, tiny_model_dir, tiny_beir, mode, capsys):
    """A passage whose title and text are a judged positive's (d13, a copy of q1's d6) was written as a hard negative
    of q1, ranked as high as the positive: training then pushes one text both up and down."""
    from fixtures_corpora import TINY_DOCS, write_jsonl

    docs = [*TINY_DOCS, ("d13", "Bees", "the bee makes honey from a flower")]
    write_jsonl(tiny_beir / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in docs])
    (tiny_beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td6\t1\nq2\td4\t1\n",
                                                   encoding="utf-8")
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "index", encoder, progress=False)
    result = mine_negatives(tmp_path / "index", tiny_beir, tmp_path / "n.jsonl", depth=13, per_query=12,
                            device="cpu", dtype="fp32", progress=False, mode=mode)
    lines = {line["query_id"]: line["negatives"] for line in map(json.loads, (tmp_path / "n.jsonl").open())}
    assert "d13" not in lines["q1"] and "d6" not in lines["q1"], lines
    assert mode == "bm25" or {"d6", "d13"} <= set(lines["q2"]), lines  # a copy of another query's positive stays
    assert result.copies_of_positives == 1
    assert ("note: 1 passage left out of the negatives: a copy of a passage judged relevant to the query (the same "
            "title and text)") in capsys.readouterr().err


def test_mining_with_a_dataset_whose_corpus_is_not_the_indexs_warns(indexed_beir, tmp_path, capsys):
    """Judgments of another collection whose ids the index holds were mined from without a word."""
    dataset, index = indexed_beir
    other = with_another_corpus(dataset, tmp_path / "other")
    mine_negatives(index, other, tmp_path / "n.jsonl", depth=12, device="cpu", dtype="fp32", progress=False)
    assert f"not from {other / 'corpus.jsonl'}" in capsys.readouterr().err


@pytest.mark.parametrize("arguments, said", [
    ({"depth": "5"}, "--depth must be a whole number of at least 1, not '5'"),
    ({"per_query": "5"}, "--per-query must be a whole number of at least 1, not '5'"),
    # above what --depth leaves after --skip-top: fewer negatives were written, without a word (probe round 18)
    ({"depth": 20, "skip_top": 5, "per_query": 16}, "^--per-query 16 is more than the 15 ranks --depth 20 leaves after "
                                                    "--skip-top 5, so no query could get 16 negatives; "),
    ({"skip_top": 1.5}, "--skip-top must be a whole number of at least 0, not 1.5"),
    ({"depth": True}, "--depth must be a whole number"),
    ({"output": 5}, "output must be the path of the negatives file to write"),
    ({"output": ""}, "output is empty"),
    ({"output": "."}, "cannot write .: it is a folder"),
    ({"index": 5}, "index must be a folder's path"),
    ({"dataset": ""}, "dataset is empty .an unset variable..: give a folder's path"),  # the working folder was read
    ({"index": " "}, "index is empty"),
    ({"progress": "no"}, "progress must be True or False, not str 'no'"),  # a truthy string: bars were drawn
])
def test_arguments_of_the_wrong_kind_are_refused_in_one_line_before_anything_is_read(tmp_path, arguments, said):
    """Checked up front, before the dataset or index is opened: they raised TypeError tracebacks (a float
    --skip-top only after the whole search, an int output from pathlib naming no argument)."""
    call = {"index": tmp_path / "no-index", "dataset": tmp_path / "no-dataset", "output": tmp_path / "n.jsonl"}
    with pytest.raises(RetrieverError, match=said.replace("(", r"\(")):
        mine_negatives(**{**call, "progress": False, **arguments})


@pytest.mark.parametrize("target", ["queries.jsonl", "index/manifest.json"])
def test_an_output_that_is_a_file_of_the_dataset_or_index_is_refused_before_mining(indexed_beir, target):
    """The CLI refused it, the library overwrote the collection's queries (or the index's manifest) with negatives."""
    dataset, index = indexed_beir
    output = (index.parent if target.startswith("index/") else dataset) / target
    before = output.read_bytes()
    with pytest.raises(RetrieverError, match=f"^the negatives file {output} is a file of the (index|dataset) input, "
                                             "which it would overwrite; give another path$"):
        mine_negatives(index, dataset, output, depth=5, progress=False)
    assert output.read_bytes() == before


@pytest.mark.parametrize("mode, judged, skip_top, depth, advice", [
    ("dense", "every", 0, 100, "--depth 100 reached all 12 passages of the index, so none is left to mine: mine a "
                               "split whose queries leave passages unjudged"),
    ("dense", "every", 0, 5, "raise --depth"),
    ("bm25", "one", 3, 100, "lower --skip-top or mine with --mode dense or hybrid")])
def test_mining_that_finds_no_negative_for_any_query_writes_nothing(indexed_beir, tmp_path, monkeypatch, mode, judged,
                                                                    skip_top, depth, advice):
    """A split judging every passage relevant, or BM25 (which returns only passages sharing a word with the query)
    under --skip-top, left no negative for any query: a file of empty lists was written, exit 0, and `train
    --negatives` then trained on in-batch negatives alone. The advice fits the search: "raise --depth" was given
    for a --depth that had already reached every passage of the index."""
    dataset, index = indexed_beir
    monkeypatch.chdir(dataset)  # mined as `--dataset .`: named by its folder's real name (it was named "")
    dataset = Path(".")
    rows = [f"q1\td{i}\t1" for i in range(1, 13)] if judged == "every" else ["q2\td4\t1"]
    (dataset / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n",
                                                 encoding="utf-8")
    output = tmp_path / "n.jsonl"
    with pytest.raises(RetrieverError, match=r"no negative for any of the 1 query of tiny-beir split train: .*"
                                             rf"--depth {depth}.*; nothing written") as refused:
        mine_negatives(index, dataset, output, depth=depth, skip_top=skip_top, mode=mode, device="cpu", dtype="fp32",
                       progress=False)
    assert str(refused.value).endswith(f"a copy of a passage judged so; {advice}; nothing written")
    assert not output.exists()


def test_no_negative_from_an_approximate_search_that_stopped_short_names_it(indexed_beir, tmp_path, monkeypatch):
    """An IVF or HNSW index may return fewer than --depth hits: with every hit judged relevant, mining said "--depth
    100 reached all 12 passages of the index, so none is left to mine", untrue of the 4 passages left unsearched, and
    gave no remedy. Simulated on the flat index by returning 8 hits a query, as an approximate search may."""
    dataset, index = indexed_beir
    (dataset / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q1\td{i}\t1\n" for i in range(1, 13)), encoding="utf-8")
    searched = Searcher.run_batches

    def stopping_short(self, *args, **kwargs):
        for part in searched(self, *args, **kwargs):
            yield {query_id: ranked_hits(hits)[:8] for query_id, hits in part.items()}
    monkeypatch.setattr(Searcher, "run_batches", stopping_short)
    with pytest.raises(RetrieverError) as refused:
        mine_negatives(index, dataset, tmp_path / "n.jsonl", depth=100, device="cpu", dtype="fp32", progress=False)
    assert str(refused.value).endswith("judged so; the index's approximate search returned at most 8 of its 12 "
                                       "passages: mine from a flat index, or one whose search defaults (nprobe, "
                                       "ef_search) reach further; nothing written"), refused.value


def test_mining_holds_one_batch_of_hits_at_a_time(indexed_beir, tmp_path, batches_searched):
    """Every query's hits were held until the file was written (queries x --depth: about 3 GB for MS MARCO's train
    split at the default depth, 30 GB at --depth 1000); each batch is now written as it is searched."""
    earlier = batches_searched
    dataset, index = indexed_beir
    result = mine_negatives(index, dataset, tmp_path / "n.jsonl", depth=12, device="cpu", dtype="fp32",
                            progress=False)
    assert len(earlier) == result.queries == 3 and result.negatives == 10 + 11 + 11


@pytest.mark.parametrize("mode", ["dense", "bm25"])
def test_a_fusion_setting_outside_hybrid_mode_is_refused_not_ignored(tmp_path, mode):
    """`mine_negatives(mode="dense", fusion_overrides={"alpha": 0.3})` mined with no fusion at all, exit 0, as the CLI's
    `--alpha` with `--mode dense` is refused; unset settings (None, as the CLI passes them) stand."""
    call = {"index": tmp_path / "no-index", "dataset": tmp_path / "no-dataset", "output": tmp_path / "n.jsonl"}
    with pytest.raises(RetrieverError, match=rf"fusion setting 'alpha' applies only to mode 'hybrid', not '{mode}'"):
        mine_negatives(**call, mode=mode, fusion_overrides={"rrf_k": None, "alpha": 0.3}, progress=False)
    with pytest.raises(RetrieverError, match="no-dataset"):  # past the check: the dataset is opened
        mine_negatives(**call, mode=mode, fusion_overrides={"alpha": None}, progress=False)


def test_an_os_error_of_the_search_is_not_named_a_failed_write_of_the_output(indexed_beir, tmp_path, monkeypatch):
    """The search runs as the negatives file is written: an OSError without a file name in it (a disk read of the
    index) was said to be `cannot write OUTPUT: input/output error; check the disk`, naming the wrong file."""
    import errno

    def run_batches(self, *args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")
        yield
    monkeypatch.setattr(Searcher, "run_batches", run_batches)
    dataset, index = indexed_beir
    with pytest.raises(OSError, match="Input/output error") as raised:
        mine_negatives(index, dataset, tmp_path / "n.jsonl", depth=12, device="cpu", dtype="fp32", progress=False)
    assert type(raised.value) is OSError and not (tmp_path / "n.jsonl").exists()


def test_the_default_per_query_is_capped_by_what_depth_leaves(indexed_beir, tmp_path):
    """Only a --per-query given above --depth minus --skip-top is refused: the default 30 keeps all a shallow search
    leaves, as the default of None says."""
    dataset, index = indexed_beir
    result = mine_negatives(index, dataset, tmp_path / "n.jsonl", depth=4, skip_top=1, per_query=None, device="cpu",
                            dtype="fp32", progress=False)
    assert result.negatives and all(len(json.loads(line)["negatives"]) <= 3
                                    for line in (tmp_path / "n.jsonl").read_text().splitlines())


def test_a_query_of_no_corpus_term_is_named_and_one_of_empty_text_is_skipped(indexed_beir, tmp_path, capsys):
    """BM25 gives a query sharing no term with the corpus no hit, so no negative, counted only as "1 query got none"
    with no reason; and a query of empty text was warned of but still mined, dense giving it negatives that match
    nothing in particular (which train then left out with its blank query). It is skipped now, in every mode."""
    from click.testing import CliRunner

    from fixtures_corpora import write_jsonl
    from retriever.cli import main

    dataset, index = indexed_beir
    queries = [json.loads(line) for line in (dataset / "queries.jsonl").read_text().splitlines()]
    write_jsonl(dataset / "queries.jsonl", [*queries, {"_id": "q5", "text": "zebra xylophone"},
                                            {"_id": "q6", "text": " \u200b "}])
    qrels = dataset / "qrels" / "train.tsv"
    qrels.write_text(qrels.read_text() + "q5\td2\t1\nq6\td7\t1\n", encoding="utf-8")
    output = tmp_path / "m.jsonl"
    said = CliRunner().invoke(main, ["mine", str(index), "--dataset", str(dataset), "--split", "train", "-o",
                                     str(output), "--mode", "bm25", "--device", "cpu", "--dtype", "fp32"])
    assert said.exit_code == 0, said.output
    assert "(1 query got none: no term in the corpus; 1 query of empty text skipped)" in said.stderr, said.stderr
    assert ("warning: 1 of the 5 queries split 'train' judges has empty text (e.g. 'q6'); it is skipped: with "
            "nothing to search for, no passage is a hard negative of it") in said.stderr
    lines = {line["query_id"]: line["negatives"] for line in map(json.loads, output.open())}
    assert sorted(lines) == ["q1", "q2", "q3", "q5"] and lines["q5"] == []
    result = mine_negatives(index, dataset, tmp_path / "n.jsonl", depth=12, device="cpu", dtype="fp32",
                            progress=False)
    assert (result.queries, result.blank_queries, result.queries_without_negatives) == (4, 1, 0)
    assert "q6" not in (tmp_path / "n.jsonl").read_text()
    qrels.write_text("q6\td7\t1\n", encoding="utf-8")  # nothing left to mine: refused, not an empty file
    with pytest.raises(RetrieverError, match=r"every query split 'train' judges has empty text \(1 query, e\.g\. 'q6'\)"):
        mine_negatives(index, dataset, tmp_path / "none.jsonl", device="cpu", dtype="fp32", progress=False)
    assert not (tmp_path / "none.jsonl").exists()


def test_the_summary_gives_each_reason_a_query_got_no_negative_its_count():
    from retriever.training.mining import MiningResult

    result = MiningResult(Path("n.jsonl"), queries=5, negatives=9, queries_without_negatives=3, seconds=1.0,
                          queries_without_hits=2, mode="hybrid")
    assert ("(3 queries got none: 2 with no term in the corpus and no dense hit, 1 with every hit judged relevant, a "
            "copy of one, or within --skip-top)") in result.summary()


def test_a_positive_of_a_query_of_the_same_text_is_no_negative(indexed_beir, tmp_path, capsys):
    """Two query ids of one text judged with other positives (SciFact's train claims 89 and 90): mine wrote each one's
    positive as the other's hard negative, which training, counting the twin's judgments as the query's, left out."""
    from fixtures_corpora import write_jsonl

    dataset, index = indexed_beir
    queries = [json.loads(line) for line in (dataset / "queries.jsonl").read_text().splitlines()]
    twin = next(query for query in queries if query["_id"] == "q2")
    write_jsonl(dataset / "queries.jsonl", [*queries, {"_id": "q5", "text": twin["text"]}])
    qrels = dataset / "qrels" / "train.tsv"
    qrels.write_text(qrels.read_text() + "q5\td7\t1\n", encoding="utf-8")
    output = tmp_path / "n.jsonl"
    mine_negatives(index, dataset, output, depth=12, per_query=12, device="cpu", dtype="fp32", progress=False)
    lines = {line["query_id"]: line["negatives"] for line in map(json.loads, output.open())}
    assert sorted(lines["q2"]) == sorted(lines["q5"]) == sorted({f"d{n}" for n in range(1, 13)} - {"d4", "d7"})
    assert "2 judged queries hold the text of another judged otherwise (e.g. 'q2')" in capsys.readouterr().err
