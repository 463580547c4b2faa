"""`serve` of several indexes built with one model: one loaded encoder, the results each index's own would give."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import retriever.encoder
from fixtures_indexes import SMALL_INDEX_DOCS, build_flat_index
from fixtures_system import run_in_threads
from retriever.cli.serving import load_searchers
from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.searching import Searcher
from retriever.shared_encoders import SharedEncoders
from retriever.serving.batcher import MicroBatcher

QUERIES = ["where does honey come from", "hot lava rock", "ice and snow", "the heart and blood"]


def test_indexes_of_one_model_share_one_encoder_and_other_settings_keep_their_own(tiny_index, small_index,
                                                                                 tiny_beir, tiny_model_dir,
                                                                                 tmp_path, capsys):
    """Each index loaded its own copy of the model, so memory grew with every index of one model."""
    cls_index = build_flat_index(tiny_beir, tmp_path / "cls", tiny_model_dir, pooling="cls")
    searchers = load_searchers({"a": tiny_index, "b": small_index, "c": cls_index}, device="cpu", dtype="fp32")
    assert searchers["a"].encoder.query_model is searchers["b"].encoder.query_model
    assert searchers["c"].encoder.query_model is not searchers["a"].encoder.query_model
    assert ("b shares the loaded model of a (same model folder, weights and query encoder settings)"
            in capsys.readouterr().err)


def _served_alone(searchers: dict[str, Searcher]) -> dict[str, list]:
    """Each query through its index's micro-batcher, one request at a time."""
    batchers = {name: MicroBatcher(searcher, max_batch=8, max_wait_ms=0, name=name)
                for name, searcher in searchers.items()}
    try:
        return {name: [batcher.submit([query], 5).result(10) for query in QUERIES]
                for name, batcher in batchers.items()}
    finally:
        for batcher in batchers.values():
            batcher.close()


def test_a_shared_encoder_gives_each_index_its_own_results_bit_for_bit(tiny_index, small_index):
    shared = load_searchers({"a": tiny_index, "b": small_index}, device="cpu", dtype="fp32")
    apart = {"a": Searcher(tiny_index, device="cpu", dtype="fp32"), "b": Searcher(small_index, device="cpu",
                                                                                 dtype="fp32")}
    assert shared["a"].encoder.query_model is shared["b"].encoder.query_model
    assert apart["a"].encoder.query_model is not apart["b"].encoder.query_model
    assert _served_alone(shared) == _served_alone(apart)  # Hit equality: ids, ranks and float scores exactly


def test_concurrent_requests_to_indexes_sharing_an_encoder_are_never_batched_together(tiny_index, small_index):
    searchers = load_searchers({"a": tiny_index, "b": small_index}, device="cpu", dtype="fp32")
    encoders, passes = [searcher.encoder for searcher in searchers.values()], []
    assert encoders[0].query_model is encoders[1].query_model

    def recording(encode):
        return lambda texts, *args, **kwargs: passes.append(list(texts)) or encode(texts, *args, **kwargs)

    for encoder in encoders:
        encoder.encode_queries = recording(encoder.encode_queries)
    batchers = {name: MicroBatcher(searcher, max_batch=64, max_wait_ms=20, name=name, workers=2)
                for name, searcher in searchers.items()}
    tagged = {name: [f"{query} {name}" for query in QUERIES * 4] for name in batchers}
    start, futures = threading.Barrier(len(batchers)), {}

    def client(name: str) -> None:
        start.wait()
        futures[name] = [batchers[name].submit([query], 12) for query in tagged[name]]

    try:
        run_in_threads(client, [(name,) for name in batchers], timeout=30)
        results = {name: [future.result(30)[0] for future in futures[name]] for name in batchers}
    finally:
        for batcher in batchers.values():
            batcher.close()
        for encoder in encoders:
            del encoder.encode_queries
    assert all(len({text.rsplit(" ", 1)[1] for text in batch}) == 1 for batch in passes)
    assert sorted(text for batch in passes for text in batch) == sorted(tagged["a"] + tagged["b"])
    assert all(len(hits) == 12 for hits in results["a"]) and all(len(hits) == SMALL_INDEX_DOCS for hits in results["b"])


def test_an_index_of_other_weights_in_the_same_model_folder_gets_its_own_encoder(tiny_beir, tmp_path):
    """The share was keyed by the model folder: an index built after its weights changed (a fine-tuned copy saved
    over the folder) was handed the encoder loaded for the first index and refused as built with another model."""
    import shutil

    from fixtures_models import make_tiny_bert

    model = make_tiny_bert(tmp_path / "model", seed=1)
    first = build_flat_index(tiny_beir, tmp_path / "first", model)
    shared = SharedEncoders()
    opened = Searcher(first, device="cpu", dtype="fp32", encoders=shared)
    shutil.rmtree(model)
    make_tiny_bert(model, seed=2)
    second = build_flat_index(tiny_beir, tmp_path / "second", model)
    reopened = Searcher(second, device="cpu", dtype="fp32", encoders=shared)
    assert reopened.encoder.query_model is not opened.encoder.query_model
    assert reopened.search(["honey bee"], k=3) == Searcher(second, device="cpu", dtype="fp32").search(["honey bee"],
                                                                                                     k=3)


LONG_QUERIES = [*QUERIES, "ice and snow " * 10]


@pytest.fixture()
def model_loads(monkeypatch) -> list[str]:
    """The model folders loaded from now on."""
    loads, load = [], retriever.encoder.load_model
    monkeypatch.setattr(retriever.encoder, "load_model", lambda name, **kw: loads.append(name) or load(name, **kw))
    return loads


def test_indexes_differing_only_in_passage_settings_share_one_loaded_model(tiny_beir, tiny_model_dir, tmp_path,
                                                                          model_loads):
    """The share was keyed by every setting, so two indexes of one model whose passages were encoded with other max
    lengths or prefixes each loaded the model, though `serve` encodes only queries and their vectors are the same."""
    folders = [build_flat_index(tiny_beir, tmp_path / "a", tiny_model_dir, passage_max_length=16, query_max_length=8),
               build_flat_index(tiny_beir, tmp_path / "b", tiny_model_dir, passage_max_length=64, query_max_length=8,
                                passage_prefix="passage: ")]
    alone = [Searcher(folder, device="cpu", dtype="fp32") for folder in folders]
    model_loads.clear()
    shared = SharedEncoders()
    together = [Searcher(folder, device="cpu", dtype="fp32", encoders=shared) for folder in folders]
    assert len(model_loads) == 1 and len(shared.loaded) == 1
    assert together[0].encoder.query_model is together[1].encoder.query_model
    for one, other in zip(alone, together):
        vectors = one.encoder.encode_queries(LONG_QUERIES)
        np.testing.assert_array_equal(other.encoder.encode_queries(LONG_QUERIES), vectors)
        for got, expected in zip(other.rank(LONG_QUERIES, 5), one.rank(LONG_QUERIES, 5)):
            np.testing.assert_array_equal(got, expected)
        assert other.search(LONG_QUERIES, k=5) == one.search(LONG_QUERIES, k=5)
        assert other.encoder.settings == one.encoder.settings  # its own passage settings, not the first index's
        assert other.encoder.metadata() == one.encoder.metadata()


def test_a_shared_query_encoder_encodes_no_passages(tiny_beir, tiny_model_dir, tmp_path):
    """Its passage settings are its index's, but the tokenizer is shared with indexes of other passage lengths."""
    folder = build_flat_index(tiny_beir, tmp_path / "idx", tiny_model_dir, passage_max_length=16)
    searcher = Searcher(folder, device="cpu", dtype="fp32", encoders=SharedEncoders())
    with pytest.raises(RetrieverError, match=r"^this encoder is shared by served indexes for their queries only; "):
        searcher.encoder.encode_passages([Document("d1", "the cat sat")])
    assert Searcher(folder, device="cpu", dtype="fp32").encoder.encode_passages([Document("d1", "the cat")]).shape


@pytest.mark.parametrize("query_setting", [{"query_max_length": 8}, {"query_prefix": "query: "}])
def test_indexes_of_other_query_settings_load_their_own(tiny_beir, tiny_model_dir, tmp_path, model_loads,
                                                        query_setting):
    folders = [build_flat_index(tiny_beir, tmp_path / "a", tiny_model_dir),
               build_flat_index(tiny_beir, tmp_path / "b", tiny_model_dir, **query_setting)]
    model_loads.clear()
    shared = SharedEncoders()
    together = [Searcher(folder, device="cpu", dtype="fp32", encoders=shared) for folder in folders]
    assert len(model_loads) == 2 and together[0].encoder.query_model is not together[1].encoder.query_model
    alone = Searcher(folders[1], device="cpu", dtype="fp32")
    vectors = alone.encoder.encode_queries(LONG_QUERIES)
    np.testing.assert_array_equal(together[1].encoder.encode_queries(LONG_QUERIES), vectors)


def test_shared_encoders_load_a_model_once_per_query_settings(tiny_model_dir, tmp_path):
    """Indexes served together share the encoder when every setting that shapes query vectors is equal (the model
    folder by its real path), and get their own when one differs."""
    shared = SharedEncoders()
    settings = EncoderSettings(model=str(tiny_model_dir))
    first = shared.get(settings, device="cpu", dtype="fp32").query_model
    (tmp_path / "link").symlink_to(tiny_model_dir)
    assert shared.get(EncoderSettings(model=str(tmp_path / "link")), device="cpu", dtype="fp32").query_model is first
    assert shared.get(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32").query_model is first
    others = [shared.get(EncoderSettings(model=str(tiny_model_dir), pooling="cls"), device="cpu", dtype="fp32"),
              shared.get(EncoderSettings(model=str(tiny_model_dir), query_max_length=8), device="cpu", dtype="fp32"),
              shared.get(EncoderSettings(model=str(tiny_model_dir), normalize=False), device="cpu", dtype="fp32"),
              shared.get(settings, device="cpu", dtype="bf16")]
    assert len({id(encoder.query_model) for encoder in others} | {id(first)}) == 5 and len(shared.loaded) == 5


def test_a_loaded_encoder_is_not_handed_to_other_query_settings(tiny_model_dir):
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    with pytest.raises(RetrieverError, match="shared only by indexes of equal query settings"):
        encoder.for_queries(EncoderSettings(model=str(tiny_model_dir), query_prefix="q: "))
