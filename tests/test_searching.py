from __future__ import annotations

import shutil

import faiss
import numpy as np
import pytest

from fixtures_corpora import TINY_DOCS
from fixtures_models import make_tiny_bert
from fixtures_system import run_in_threads
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, encode_and_index
from retriever.searching import Searcher


@pytest.fixture()
def tiny_index(tiny_flat_build, tmp_path):
    return shutil.copytree(tiny_flat_build, tmp_path / "idx")


def test_hits_are_exact_inner_product_with_text(tiny_index, tiny_model_dir):
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    [hits] = searcher.search(["honey bee"], k=3)
    assert [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].score >= hits[1].score >= hits[2].score
    docs = {h.id: h for h in hits}
    assert all(h.text for h in hits)
    query = searcher.encoder.encode_queries(["honey bee"])[0]
    all_docs = searcher.index.reconstruct_n(0, searcher.index.ntotal)
    best = np.argsort(-(all_docs @ query))[:3]
    assert searcher.documents.ids_of(best.tolist()) == [h.id for h in hits]
    assert docs[hits[0].id].title


def test_k_larger_than_collection(tiny_index):
    [hits] = Searcher(tiny_index, device="cpu").search(["x"], k=50)
    assert len(hits) == 12


@pytest.mark.parametrize("override, message", [
    ({"pooling": "cls"}, "pooling 'cls'"),
    ({"normalize": False}, "normalize False"),
])
def test_mismatched_encoder_settings_are_refused(tiny_index, override, message):
    with pytest.raises(RetrieverError, match=f"different encoder.*{message}"):
        Searcher(tiny_index, device="cpu", **override)


def test_other_model_is_refused(tiny_index, tmp_path):
    other = make_tiny_bert(tmp_path / "other", seed=1)
    with pytest.raises(RetrieverError, match="another model"):
        Searcher(tiny_index, device="cpu", model=str(other))


def test_changed_weights_are_refused(tiny_beir, tmp_path):
    model = make_tiny_bert(tmp_path / "model", seed=2)
    encoder = Encoder(EncoderSettings(model=str(model)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, progress=False)
    make_tiny_bert(model, seed=3)  # same folder, new weights
    with pytest.raises(RetrieverError, match="changed since"):
        Searcher(tmp_path / "idx", device="cpu")


def test_index_and_model_move_together_and_record_no_absolute_path(tiny_beir, tmp_path):
    model = make_tiny_bert(tmp_path / "project" / "model", seed=2)
    encoder = Encoder(EncoderSettings(model=str(model)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "project" / "idx", encoder, progress=False)
    for folder in (tmp_path / "project" / "idx", tmp_path / "project" / "idx.shards"):
        for file in (path for path in folder.rglob("*") if path.is_file()):  # bm25/ holds files too
            assert str(tmp_path).encode() not in file.read_bytes(), file
    moved = tmp_path / "elsewhere"
    (tmp_path / "project").rename(moved)
    assert Searcher(moved / "idx", device="cpu").search(["honey"], k=1)[0][0].id
    (moved / "model").rename(tmp_path / "model-alone")
    with pytest.raises(RetrieverError, match=r"idx: its model was recorded at \.\./model \(relative to it\), which is "
                                             "not there now: the folder moved away from its model"):
        Searcher(moved / "idx", device="cpu")
    assert Searcher(moved / "idx", device="cpu", model=str(tmp_path / "model-alone")).search(["honey"], k=1)[0]


def test_bm25_and_hybrid_modes(tiny_index):
    from retriever.fusion import FusionParams, fuse

    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    [bm25] = searcher.search(["hot volcanoes"], k=5, mode="bm25")
    assert [h.id for h in bm25] == ["d4", "d3"] and bm25[0].title == "Volcano"  # stemmed; no-match docs left out
    texts = ["hot volcanoes", "honey"]
    dense, lexical = searcher.rank(texts, 12, "dense"), searcher.rank(texts, 12, "bm25")
    expected = fuse(dense, lexical, FusionParams("rrf", rrf_k=60), 3)
    assert np.array_equal(searcher.rank(texts, 3, "hybrid")[1], expected[1])
    convex = Searcher(tiny_index, device="cpu", dtype="fp32", mode="hybrid", fusion_overrides={"alpha": 0.0})
    assert convex.fusion.method == "convex" and convex.search(["hot volcanoes"], k=1)[0][0].id == "d4"
    run = convex.run(["q"], ["hot volcanoes"], k=2)
    assert len(run["q"]) == 2 and max(run["q"], key=run["q"].get) == "d4"
    assert convex.search(["the"], k=3) == [[]]  # alpha 0: BM25's hits alone (were 3 dense ones scored 0 and -1e-45)


def test_bm25_modes_on_a_dense_only_index_say_how_to_add_bm25(tiny_beir, tiny_model_dir, tmp_path):
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "dense", encoder, progress=False, lexical=None)
    searcher = Searcher(tmp_path / "dense", device="cpu", dtype="fp32")
    assert searcher.modes() == ["dense"]
    with pytest.raises(RetrieverError, match=r"no BM25 index.*`retriever bm25 .*dense`.*no re-encoding"):
        searcher.search(["lava"], mode="hybrid")
    with pytest.raises(RetrieverError, match="retriever bm25"):
        Searcher(tmp_path / "dense", device="cpu", mode="bm25")


def test_tied_documents_rank_the_same_in_search_run_and_evaluation(tiny_model_dir, tmp_path):
    """Identical texts tie exactly; FAISS returns them by label descending, trec_eval (hence evaluate) by docid
    descending."""
    from fixtures_corpora import write_jsonl
    from retriever.metrics import trec_order
    from retriever.runs import ranked_hits

    tied = ["t4", "t3", "t2", "t1"]  # indexed in this order, so FAISS's tie order is the opposite of trec_eval's
    rows = [{"_id": d, "title": "", "text": "honey bee flower"} for d in tied]
    rows += [{"_id": f"o{i}", "title": "", "text": text} for i, text in enumerate(["volcano lava", "whale ocean"])]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", rows)
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(corpus, tmp_path / "idx", encoder, IndexParams("flat"), progress=False, lexical=None)
    searcher = Searcher(tmp_path / "idx", device="cpu", dtype="fp32")
    [hits] = searcher.search(["honey bee flower"], k=6)
    run = searcher.run(["q"], ["honey bee flower"], k=6)
    assert len({h.score for h in hits if h.id in tied}) == 1  # they do tie
    evaluated = trec_order(run["q"])
    assert [h.id for h in hits] == evaluated == list(run["q"]) == [d for d, _ in ranked_hits(run["q"])]
    assert [h.rank for h in hits] == list(range(1, 7))


def test_which_tied_documents_are_kept_does_not_depend_on_k(tiny_model_dir, tmp_path):
    """FAISS and bm25s keep the tied documents they list first; a cut inside a tie must keep the ones
    rank_order puts first (ids descending), so k=1's hit is k=4's first, in every mode."""
    from fixtures_corpora import write_jsonl
    from retriever.lexical import LexicalParams

    rows = [{"_id": d, "title": "", "text": "honey bee flower"} for d in ["t1", "t2", "t3", "t4"]]
    rows += [{"_id": f"o{i}", "title": "", "text": text} for i, text in enumerate(["volcano lava", "whale ocean"])]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", rows)
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(corpus, tmp_path / "idx", encoder, IndexParams("flat"), progress=False, lexical=LexicalParams())
    searcher = Searcher(tmp_path / "idx", device="cpu", dtype="fp32")
    for mode in ("dense", "bm25", "hybrid"):
        kept = [[h.id for h in searcher.search(["honey bee flower"], k=k, mode=mode)[0]] for k in range(1, 5)]
        assert all(kept[k - 1] == kept[-1][:k] for k in range(1, 5)), mode  # each k is a prefix of the larger
        assert kept[-1] == ["t4", "t3", "t2", "t1"], mode
    for depth in (1, 2, 3):  # a fusion depth inside the tie: each list keeps the tied hits rank_order puts first
        shallow = Searcher(tmp_path / "idx", device="cpu", dtype="fp32", fusion_overrides={"depth": depth})
        assert [h.id for h in shallow.search(["honey bee flower"], k=depth, mode="hybrid")[0]] == kept[-1][:depth]


def test_a_changed_tokenizer_is_refused_like_changed_weights(tiny_beir, tmp_path):
    from fixtures_models import build_vocab
    from transformers import BertTokenizerFast

    model = make_tiny_bert(tmp_path / "model", seed=2)
    encoder = Encoder(EncoderSettings(model=str(model)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, progress=False)
    vocab = build_vocab()
    vocab[10], vocab[11] = vocab[11], vocab[10]  # same size, two words swapped: the weights do not notice
    BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True).save_pretrained(model)
    with pytest.raises(RetrieverError, match="tokenizer with vocabulary .* its tokenizer files changed since"):
        Searcher(tmp_path / "idx", device="cpu")


def test_a_tokenizer_normalising_otherwise_with_the_same_vocabulary_is_refused(tiny_beir, tmp_path):
    """do_lower_case turned off under an index: the same vocabulary, so the vocabulary's fingerprint held, and
    queries were tokenized differently from the documents (other vectors, exit 0)."""
    from fixtures_models import build_vocab
    from transformers import BertTokenizerFast

    model = make_tiny_bert(tmp_path / "model", seed=2)
    encoder = Encoder(EncoderSettings(model=str(model)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, progress=False)
    BertTokenizerFast(vocab={token: i for i, token in enumerate(build_vocab())},
                      do_lower_case=False).save_pretrained(model)
    with pytest.raises(RetrieverError, match="tokenizer with normalisation .* its tokenizer files changed since"):
        Searcher(tmp_path / "idx", device="cpu")


def test_a_query_the_tokenizer_cannot_take_is_a_retriever_error_in_the_library(tiny_index):
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    with pytest.raises(RetrieverError, match="query 2 of 2: the query has a lone surrogate U[+]DCFF at character 4"):
        searcher.search(["cat", "abc\udcff"], k=2)


class ReturnsLabels:
    """An index answering every query with the given labels: what same-size damage to its lists can return."""

    def __init__(self, ntotal: int, labels: list[int], d: int = 32) -> None:
        self.ntotal, self.labels, self.d = ntotal, labels, d

    def search(self, vectors, k):
        rows = np.array([self.labels] * len(vectors), dtype=np.int64)
        return np.ones(rows.shape, dtype=np.float32), rows


@pytest.mark.parametrize("labels", [[3, 3, 1], [0, 99, 1], [0, -7, 1]])
def test_an_index_returning_impossible_rows_is_named_damaged(tiny_index, labels):
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    searcher.index = ReturnsLabels(searcher.index.ntotal, [2, -1, -1])  # -1 pads a short list: no damage
    assert [hit.rank for hit in searcher.search(["honey bee"], k=3)[0]] == [1]
    searcher.index = ReturnsLabels(searcher.index.ntotal, labels)
    with pytest.raises(RetrieverError, match=r"index\.faiss: it returned document rows that do not exist, or one row "
                                             "twice for a query .*; the index folder is damaged"):
        searcher.search(["honey bee"], k=3)


@pytest.mark.parametrize("call, message", [
    (lambda s: s.search("honey bee"), r"queries must be a list of strings, not str; wrap one query as \[query\]"),
    (lambda s: s.search(None), "queries must be a list of strings, not NoneType"),
    (lambda s: s.search([None]), "query 1 of 1 is NoneType, not a string"),
    (lambda s: s.search(["honey"], k="3"), "k must be a whole number of at least 1, not '3'"),
    (lambda s: s.search(["honey"], k=None), "k must be a whole number of at least 1, not None"),
    (lambda s: s.search(["honey"], k=0), "k must be a whole number of at least 1, not 0"),
    (lambda s: s.search(["\ud800"], mode="bm25"), "query 1 of 1: the query has a lone surrogate"),
    (lambda s: s.run("ab", "xy"), "query ids must be a list of strings, not str"),
    (lambda s: s.run(["a"], ["x", "y"]), "1 query ids for 2 query texts"),
])
def test_library_calls_with_the_wrong_shape_are_one_line(tiny_index, call, message):
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    with pytest.raises(RetrieverError, match=message):
        call(searcher)
    assert len(searcher.search(np.array(["honey", "bee"]), k=np.int64(2))) == 2  # arrays and numpy ints are fine


def test_unknown_fusion_settings_are_one_line(tiny_index):
    from retriever.fusion import FusionParams

    with pytest.raises(RetrieverError, match="unknown fusion setting 'alph'; use method, rrf_k, alpha, depth"):
        Searcher(tiny_index, device="cpu", dtype="fp32", fusion_overrides={"alph": 0.3})
    with pytest.raises(RetrieverError, match="--fusion-depth must be a whole number of at least 1, not 2.5"):
        FusionParams(depth=2.5)


def test_an_index_replaced_while_it_opens_is_opened_again_whole(tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    import json
    import os

    import retriever.searching as searching

    for name, model in (("idx", tiny_model_dir), ("idx-b", make_tiny_bert(tmp_path / "bert-b", seed=1))):
        encoder = Encoder(EncoderSettings(model=str(model)), device="cpu", dtype="fp32")
        encode_and_index(tiny_beir, tmp_path / name, encoder, IndexParams("flat"), progress=False, lexical=None)
    real_open, swaps = searching.open_index, []

    def replaced_meanwhile(index_dir, manifest):  # a build swapping its new version in after the manifest was read
        if not swaps:
            os.rename(index_dir, tmp_path / "old")
            os.rename(tmp_path / "idx-b", index_dir)
            swaps.append(index_dir)
        return real_open(index_dir, manifest)

    monkeypatch.setattr(searching, "open_index", replaced_meanwhile)
    searcher = Searcher(tmp_path / "idx", device="cpu", dtype="fp32")
    assert swaps and searcher.manifest == json.loads((tmp_path / "idx" / "manifest.json").read_text())
    _, title, text = TINY_DOCS[0]
    [top] = searcher.search([f"{title} {text}"], k=1)
    assert top[0].score > 0.99  # the encoder and the vectors are one build's


@pytest.mark.parametrize("spec, setting", [("IVF64,Flat", "nprobe"), ("HNSW16,Flat", "ef_search")])
def test_threads_passing_different_settings_to_one_searcher_each_get_their_own(tiny_index, spec, setting):
    """FAISS keeps nprobe/efSearch on the index, and setting them there per call made threads race: hits
    searched with another thread's value, or FAISS's "Invalid key" error."""
    searcher = Searcher(tiny_index, device="cpu")
    vectors = np.random.default_rng(0).standard_normal((10_000, 32)).astype(np.float32)
    searcher.index = faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT)  # large enough for settings to matter
    searcher.index.train(vectors)
    searcher.index.add(vectors)
    queries = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    expected = {value: searcher.search_vectors(queries, 10, **{setting: value})[1] for value in (1, 64)}
    assert not np.array_equal(expected[1], expected[64])
    failures: list = []

    def search_repeatedly(value: int) -> None:
        try:
            for _ in range(100):
                if not np.array_equal(searcher.search_vectors(queries, 10, **{setting: value})[1], expected[value]):
                    failures.append(value)
        except RuntimeError as error:
            failures.append(error)

    run_in_threads(search_repeatedly, [(value,) for value in (1, 64, 1, 64)])
    assert failures == []


def test_a_manifest_with_null_search_defaults_is_searched(tiny_index):
    """The manifest check allows ``search_defaults: null``; the Searcher then died of an AttributeError."""
    import json
    manifest = json.loads((tiny_index / "manifest.json").read_text())
    manifest["index"]["search_defaults"] = None
    (tiny_index / "manifest.json").write_text(json.dumps(manifest))
    assert len(Searcher(tiny_index, device="cpu").search(["honey bee"], k=2)[0]) == 2


def test_an_nprobe_for_a_flat_index_is_refused_before_any_query_is_encoded(tiny_index):
    searcher = Searcher(tiny_index, device="cpu")
    searcher.encoder = None  # encoding would fail: the refusal must come first
    with pytest.raises(RetrieverError, match="--nprobe applies to IVF indexes, and this index is flat"):
        searcher.search(["honey bee"], k=3, nprobe=8)


@pytest.mark.parametrize("mark", [
    lambda folder: (folder / "config_sentence_transformers.json").write_text('{"model_type": "CrossEncoder"}'),
    lambda folder: (folder / "config.json").write_text(
        (folder / "config.json").read_text().replace("{", '{"sbert_ce_default_activation_function": "x.Identity",', 1))])
def test_an_index_built_from_a_cross_encoder_is_refused_when_opened(tiny_beir, tmp_path, mark):
    """An index built before CrossEncoder folders were refused names a reranker as its encoder: it opened, and
    searched with queries encoded by the reranker's encoder."""
    import shutil

    model = shutil.copytree(make_tiny_bert(tmp_path / "bert"), tmp_path / "reranker")
    encoder = Encoder(EncoderSettings(model=str(model)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    mark(model)  # as a CrossEncoder's folder is: the weights and tokenizer the index records are unchanged
    with pytest.raises(RetrieverError, match=r"^[^\n]*reranker[^\n]*: the index's vectors came from a reranker "
                                             r"[^\n]*; rebuild the index with a bi-encoder[^\n]*$"):
        Searcher(tmp_path / "idx", device="cpu")


@pytest.mark.parametrize("similarity", ["manhattan", "euclidean"])
def test_an_index_built_from_a_distance_ranked_model_is_refused_when_opened(tiny_beir, tmp_path, similarity):
    """An index built before such folders were refused at encode searched by inner product, which ranks otherwise
    than the model's manhattan (or, between vectors not normalised, euclidean) distance, with exit 0."""
    import json

    model = make_tiny_bert(tmp_path / "st")
    (model / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text('{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": 1}')
    encoder = Encoder(EncoderSettings.for_model(str(model)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    (model / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": similarity}))
    with pytest.raises(RetrieverError, match=rf"^[^\n]*config_sentence_transformers.json: similarity_fn_name "
                                             rf"'{similarity}'[^\n]*inner-product search[^\n]*; rebuild the index "
                                             r"with a cosine or dot model[^\n]*$"):
        Searcher(tmp_path / "idx", device="cpu")


def test_impossible_rows_name_the_command_that_built_the_index(tiny_beir, tiny_model_dir, tmp_path):
    """The damage met at search named `retriever build` for a folder `retriever index` built (it was not given the
    manifest, which records the command), where every other damage message names `index`."""
    from retriever.corpus_encoding import encode_corpus
    from retriever.indexing import build_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_corpus(tiny_beir / "corpus.jsonl", tmp_path / "shards", encoder, progress=False)
    build_index(tmp_path / "shards", tiny_beir / "corpus.jsonl", tmp_path / "idx", IndexParams("flat"), progress=False)
    searcher = Searcher(tmp_path / "idx", device="cpu", dtype="fp32")
    searcher.index = ReturnsLabels(searcher.index.ntotal, [3, 3, 1])
    with pytest.raises(RetrieverError, match=r"index\.faiss: it returned document rows .*; the index folder is damaged; "
                                             r"rebuild it with `retriever index \.\.\. --overwrite`$"):
        searcher.search(["honey bee"], k=3)
