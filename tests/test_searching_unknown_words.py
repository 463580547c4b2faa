"""A query the model reads as nothing but [UNK]: its vector is that of any unknown word, so dense hits for it are
arbitrary, as a blank query's were before blank queries were refused."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from fixtures_corpora import TINY_DOCS
from retriever.cli import main
from retriever.corpus import BeirDataset
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, encode_and_index
from retriever.searching import Searcher

GREEK_HONEY = "μέλι"  # letters the tiny BERT's vocabulary lacks ([UNK]) and BM25 indexes as a word
DEVICE = ["--device", "cpu", "--dtype", "fp32"]


@pytest.fixture(scope="module")
def index(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("unknown-words")
    docs = [(i, t, f"{x} ({GREEK_HONEY})" if i == "d6" else x) for i, t, x in TINY_DOCS]
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs))
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(corpus, folder / "idx", encoder, IndexParams("flat"), progress=False)
    return folder / "idx"


def test_a_query_of_unknown_words_is_refused_in_dense_mode_in_one_line(index):
    searcher = Searcher(index, device="cpu", dtype="fp32")
    assert searcher.unknown_words(["🐝", "🐝 🐝", GREEK_HONEY, "bee 🐝", " "]).tolist() == [True, True, True, False,
                                                                                              True]
    with pytest.raises(RetrieverError, match=r"^the query holds no word the model knows \(it reads as \[UNK\] or punctuation "
                                             r"only\), "
                                             r"so its dense hits would be arbitrary; rephrase it, or search it in "
                                             r"hybrid or bm25 mode \(BM25 may match its text\)$"):
        searcher.search(["🐝"], k=3)
    with pytest.raises(RetrieverError, match=r"^query 2 of 2 holds no word the model knows"):
        searcher.rank(["bee", "🐝 🐝"], 3)  # what the server searches with


def test_hybrid_ranks_a_query_of_unknown_words_by_bm25_alone_and_bm25_is_unchanged(index):
    searcher = Searcher(index, device="cpu", dtype="fp32", mode="hybrid")
    [bm25] = searcher.search([GREEK_HONEY], k=5, mode="bm25")
    [hybrid] = searcher.search([GREEK_HONEY], k=5)
    assert [h.id for h in bm25] == [h.id for h in hybrid] == ["d6"]  # no arbitrary dense hits fused in
    assert searcher.search(["🐝"], k=5) == [[]]  # nothing either engine can go on
    known = searcher.rank([f"honey {GREEK_HONEY}"], 5)
    assert (known[1] >= 0).sum() == 5  # a query with a known word keeps its dense half


def test_a_batch_run_keeps_queries_of_unknown_words_and_warns_of_them(index, tmp_path):
    searcher = Searcher(index, device="cpu", dtype="fp32")
    run = searcher.run(["q1", "q2"], ["honey bee", "🐝"], k=3)
    assert [len(run[qid]) for qid in ("q1", "q2")] == [3, 3]  # every query id stays in the run, as blank ones do
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": qid, "text": text}) + "\n"
                               for qid, text in [("q1", "honey bee"), ("qb", "🐝"), ("qe", " ")]))
    for mode, fate in (("dense", "their hits match nothing in particular"), ("hybrid", "hybrid ranks them by BM25 "
                                                                                      "alone")):
        result = CliRunner().invoke(main, ["search", str(index), "--queries", str(queries), "-k", "2", "--mode", mode,
                                           *DEVICE])
        assert result.exit_code == 0, result.output
        assert (f"warning: 1 of 3 queries holds no word the model knows (e.g. 'qb': it reads them as unknown tokens or punctuation only); "
                f"{fate}") in result.stderr
        assert "warning: 1 of 3 queries has empty text (e.g. 'qe')" in result.stderr


def test_the_cli_refuses_one_query_of_unknown_words_in_dense_mode_only(index):
    result = CliRunner().invoke(main, ["search", str(index), "🐝", *DEVICE])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1 and "the query holds no word the model knows" in errors[0]
    result = CliRunner().invoke(main, ["search", str(index), GREEK_HONEY, "--mode", "hybrid", "--json", *DEVICE])
    assert result.exit_code == 0 and [h["id"] for h in json.loads(result.stdout)["hits"]] == ["d6"], result.output


@pytest.fixture()
def unknown_beir(tmp_path):
    """A BEIR folder whose split (train) has one query of unknown words, qg, that BM25 finds."""
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n"
                                               for i, t, x in TINY_DOCS))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "qg", "text": GREEK_HONEY}) + "\n"
                                        + json.dumps({"_id": "ql", "text": "hot lava rock"}) + "\n")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nqg\td6\t1\nql\td4\t1\n")
    return root


@pytest.fixture()
def tokenized(monkeypatch) -> list[str]:
    """Every text the encoder tokenizes from now on."""
    import retriever.encoder

    texts, original = [], retriever.encoder.tokenize_bounded
    monkeypatch.setattr(retriever.encoder, "tokenize_bounded",
                        lambda tokenizer, batch, *args: texts.extend(batch) or original(tokenizer, batch, *args))
    return texts


def test_fusion_tuning_keeps_a_query_of_unknown_words_and_fuses_it_as_hybrid_search_does(index, unknown_beir,
                                                                                          capsys):
    from retriever.fusion_tuning import tune_fusion

    tune_fusion(Searcher(index, device="cpu", dtype="fp32"), unknown_beir, "train", progress=False)
    assert "1 of 2 queries holds no word the model knows (e.g. 'qg'" in capsys.readouterr().err


def test_batch_runs_warn_of_unknown_words_from_the_tokenization_their_vectors_use(index, unknown_beir, tmp_path,
                                                                                   tokenized, capsys):
    """search --queries, evaluate, mine and fusion tuning tokenized every query twice: once, up front, for the
    warning, and again to encode it."""
    from retriever.evaluation import evaluate_index
    from retriever.fusion_tuning import tune_fusion

    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": qid, "text": text}) + "\n"
                               for qid, text in [("q1", "honey bee"), ("qb", "🐝"), ("qe", " ")]))
    for mode, output in (("dense", ["-o", str(tmp_path / "run.trec")]), ("hybrid", [])):
        tokenized.clear()
        result = CliRunner().invoke(main, ["search", str(index), "--queries", str(queries), "-k", "2", "--mode", mode,
                                           *output, *DEVICE])
        assert result.exit_code == 0, result.output
        assert "warning: 1 of 3 queries holds no word the model knows (e.g. 'qb'" in result.stderr
        assert sorted(tokenized) == sorted(["honey bee", "🐝", " "]), mode
    searcher = Searcher(index, device="cpu", dtype="fp32")
    for run in (lambda: evaluate_index(searcher, BeirDataset.open(unknown_beir), "train", k=3, progress=False),
                lambda: tune_fusion(searcher, unknown_beir, "train", progress=False)):
        tokenized.clear()
        capsys.readouterr()
        run()
        assert "1 of 2 queries holds no word the model knows (e.g. 'qg'" in capsys.readouterr().err
        assert sorted(tokenized) == sorted([GREEK_HONEY, "hot lava rock"])


def test_a_resumed_batch_run_still_warns_of_the_queries_searched_before(index, tmp_path):
    queries, output = tmp_path / "queries.jsonl", tmp_path / "run.trec"
    queries.write_text("".join(json.dumps({"_id": qid, "text": text}) + "\n"
                               for qid, text in [("q1", "honey bee"), ("qb", "🐝")]))
    for _ in range(2):  # the second finds every query done
        result = CliRunner().invoke(main, ["search", str(index), "--queries", str(queries), "-o", str(output),
                                           *DEVICE])
        assert result.exit_code == 0, result.output
        assert "warning: 1 of 2 queries holds no word the model knows (e.g. 'qb'" in result.stderr


def test_rank_tells_unknown_words_from_the_tokenization_its_vectors_use_not_a_second_one(index, monkeypatch):
    """Dense and hybrid tokenized each query twice: once to find [UNK]-only queries, once to encode them."""
    import retriever.encoder
    import retriever.texts

    searcher, tokenized = Searcher(index, device="cpu", dtype="fp32"), []
    for module in (retriever.encoder, retriever.texts):
        monkeypatch.setattr(module, "tokenize_bounded", lambda tokenizer, texts, *args, original=module.tokenize_bounded:
                            tokenized.extend(texts) or original(tokenizer, texts, *args))
    for mode in ("dense", "hybrid"):
        tokenized.clear()
        searcher.rank(["honey bee", "lava"], 3, mode)
        assert tokenized == ["honey bee", "lava"], mode
    tokenized.clear()
    with pytest.raises(RetrieverError, match=r"^query 2 of 2 holds no word the model knows"):
        searcher.rank(["bee", "🐝 🐝"], 3)
    assert tokenized == ["bee", "🐝 🐝"]


@pytest.fixture(scope="module")
def short_index(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("short-queries")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in TINY_DOCS))
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir), query_max_length=8), device="cpu", dtype="fp32")
    encode_and_index(corpus, folder / "idx", encoder, IndexParams("flat"), progress=False)
    return folder / "idx"


def test_a_query_whose_words_lie_past_the_cut_is_told_so(short_index):
    """The refusal said the query held no word the model knows, though "wing" was just past the query max length."""
    searcher = Searcher(short_index, device="cpu", dtype="fp32")
    with pytest.raises(RetrieverError, match=r"^the query holds no word the model knows in its first 8 tokens, and "
                                             r"the rest of it was cut .*--query-max-length.*; put its words first"):
        searcher.search(["🐝 " * 20 + "wing"], k=3)
    with pytest.raises(RetrieverError, match=r"^the query holds no word the model knows \(it reads as \[UNK\] or "
                                             r"punctuation only\)"):
        searcher.search(["🐝 !!!"], k=3)
    assert searcher.search(["[SEP] [CLS]"], k=3)[0]  # read as text, not as two control tokens


def test_the_refusal_suggests_bm25_only_where_the_bm25_part_opened(index, tmp_path):
    import shutil

    damaged = tmp_path / "idx"
    shutil.copytree(index, damaged)
    manifest = json.loads((damaged / "manifest.json").read_text())
    (damaged / manifest["lexical"]["directory"] / next(iter(manifest["lexical"]["files"]))).write_bytes(b"x")
    searcher = Searcher(damaged, device="cpu", dtype="fp32")
    with pytest.raises(RetrieverError) as refused:
        searcher.search(["🐝"], k=3)
    assert "bm25" not in str(refused.value) and str(refused.value).endswith("rephrase it")


NO_LINE = "; the run holds no line for them, so `evaluate --run` counts them as missing from it (scored 0)"


@pytest.mark.parametrize("mode, fate", [
    ("dense", "their hits match nothing in particular"),
    ("bm25", "they get no hits: BM25 finds no term in them" + NO_LINE),
    ("hybrid", "they get no hits: BM25 finds no term in them, and hybrid drops their dense hits as arbitrary"
     + NO_LINE)])
def test_the_blank_query_warning_says_what_becomes_of_them_in_each_mode(index, tmp_path, mode, fate):
    """It said their hits match nothing in particular in every mode, when bm25 and hybrid give them none."""
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": qid, "text": text}) + "\n"
                               for qid, text in [("q1", "honey bee"), ("qe", " \u200b")]))
    result = CliRunner().invoke(main, ["search", str(index), "--queries", str(queries), "-k", "2", "--mode", mode,
                                       *DEVICE])
    assert result.exit_code == 0, result.output
    blank_hits = [line for line in result.stdout.splitlines() if line.startswith("qe ")]
    assert len(blank_hits) == (2 if mode == "dense" else 0), result.stdout
    assert f"warning: 1 of 2 queries has empty text (e.g. 'qe'); {fate}\n" in result.stderr


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
@pytest.mark.parametrize("run_format", ["trec", "jsonl"])
def test_the_blank_query_warning_says_a_trec_run_holds_no_line_for_them(index, tmp_path, mode, run_format):
    """A TREC run has no line for a query without hits, so `evaluate --run` later counted blank queries as missing
    from the run, and the warning had said only that they get no hits; a JSONL run keeps them, with no hits, and
    `evaluate` counts them as missing all the same (it said nothing of them for a JSONL run)."""
    queries, run = tmp_path / "queries.jsonl", tmp_path / f"run.{run_format}"
    queries.write_text("".join(json.dumps({"_id": qid, "text": text}) + "\n"
                               for qid, text in [("q1", "honey bee"), ("qe", " ")]))
    result = CliRunner().invoke(main, ["search", str(index), "--queries", str(queries), "-k", "2", "--mode", mode,
                                       "--output", str(run), "--run-format", run_format, *DEVICE])
    assert result.exit_code == 0, result.output
    held = [line for line in run.read_text().splitlines() if line.startswith(("qe ", '{"qid": "qe"'))]
    assert held == ([] if run_format == "trec" else ['{"qid": "qe", "hits": []}'])
    warning = next(line for line in result.stderr.splitlines() if "has empty text" in line)
    assert (NO_LINE in warning) == (run_format == "trec"), warning
    assert warning.endswith("counts them as missing from it (scored 0)" if run_format == "trec" else
                            "counts them as missing from the run (scored 0), as any query without hits"), warning
