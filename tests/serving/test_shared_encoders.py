"""`serve` of several indexes built with one model: one loaded encoder, the results each index's own would give."""
from __future__ import annotations

import threading

from conftest import run_in_threads
from retriever.cli.serving import load_searchers
from retriever.searching import Searcher
from retriever.serving.batcher import MicroBatcher
from serving_fixtures import SMALL_DOCS, _build, small_index, tiny_index  # noqa: F401 - fixtures

QUERIES = ["where does honey come from", "hot lava rock", "ice and snow", "the heart and blood"]


def test_indexes_of_one_model_share_one_encoder_and_other_settings_keep_their_own(tiny_index, small_index,
                                                                                 tiny_beir, tiny_model_dir,
                                                                                 tmp_path, capsys):
    """Each index loaded its own copy of the model, so memory grew with every index of one model."""
    cls_index = _build(tiny_beir, tmp_path / "cls", tiny_model_dir, pooling="cls")
    searchers = load_searchers({"a": tiny_index, "b": small_index, "c": cls_index}, device="cpu", dtype="fp32")
    assert searchers["a"].encoder is searchers["b"].encoder
    assert searchers["a"].encoder.query_model is searchers["b"].encoder.query_model
    assert searchers["c"].encoder is not searchers["a"].encoder
    assert searchers["c"].encoder.query_model is not searchers["a"].encoder.query_model
    assert "b shares the loaded model of a (same model folder and encoder settings)" in capsys.readouterr().err


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
    assert shared["a"].encoder is shared["b"].encoder and apart["a"].encoder is not apart["b"].encoder
    assert _served_alone(shared) == _served_alone(apart)  # Hit equality: ids, ranks and float scores exactly


def test_concurrent_requests_to_indexes_sharing_an_encoder_are_never_batched_together(tiny_index, small_index):
    searchers = load_searchers({"a": tiny_index, "b": small_index}, device="cpu", dtype="fp32")
    encoder = searchers["a"].encoder
    encode, passes = encoder.encode_queries, []

    def recording(texts, *args, **kwargs):
        passes.append(list(texts))
        return encode(texts, *args, **kwargs)

    encoder.encode_queries = recording
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
        del encoder.encode_queries
    assert all(len({text.rsplit(" ", 1)[1] for text in batch}) == 1 for batch in passes)
    assert sorted(text for batch in passes for text in batch) == sorted(tagged["a"] + tagged["b"])
    assert all(len(hits) == 12 for hits in results["a"]) and all(len(hits) == SMALL_DOCS for hits in results["b"])


def test_an_index_of_other_weights_in_the_same_model_folder_gets_its_own_encoder(tiny_beir, tmp_path):
    """The share was keyed by the model folder: an index built after its weights changed (a fine-tuned copy saved
    over the folder) was handed the encoder loaded for the first index and refused as built with another model."""
    import shutil

    from conftest import make_tiny_bert
    from retriever.encoder import SharedEncoders

    model = make_tiny_bert(tmp_path / "model", seed=1)
    first = _build(tiny_beir, tmp_path / "first", model)
    shared = SharedEncoders()
    opened = Searcher(first, device="cpu", dtype="fp32", encoders=shared)
    shutil.rmtree(model)
    make_tiny_bert(model, seed=2)
    second = _build(tiny_beir, tmp_path / "second", model)
    reopened = Searcher(second, device="cpu", dtype="fp32", encoders=shared)
    assert reopened.encoder is not opened.encoder
    assert reopened.search(["honey bee"], k=3) == Searcher(second, device="cpu", dtype="fp32").search(["honey bee"],
                                                                                                     k=3)
