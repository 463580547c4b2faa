"""A pooler-pooling folder re-saved by sentence-transformers: its Dense is BERT's pooler, so it encodes as pooler."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.training.dual_encoder import DualEncoder
from training.test_dual_encoder import perturbed

sentence_transformers = pytest.importorskip("sentence_transformers")  # in the `test` extra
pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = ["where does honey come from", "hot lava rock and fire by the old river city"]


@pytest.fixture()
def resaved(tmp_path, tiny_model_dir):
    """`retriever train --pooling pooler`'s folder, then SentenceTransformer(folder).save(other): no retriever.json."""
    model = perturbed(DualEncoder.from_pretrained(str(tiny_model_dir), pooling="pooler", normalize=True,
                                                  query_prefix="q: ", query_max_length=32, passage_max_length=32))
    folder = model.save(tmp_path / "model", training={"init_model": "tiny"})
    sentence_transformers.SentenceTransformer(str(folder), device="cpu").save(str(tmp_path / "resaved"))
    return tmp_path / "resaved"


def test_its_dense_is_read_as_the_pooler_and_gives_sentence_transformers_vectors(resaved):
    """It was refused as having a Dense module, although that Dense is exactly BERT's pooler (dense + tanh)."""
    assert not (resaved / "retriever.json").exists()
    ours = Encoder(EncoderSettings.for_model(str(resaved)), device="cpu", dtype="fp32")
    assert (ours.settings.pooling, ours.settings.normalize, ours.settings.query_prefix) == ("pooler", True, "q: ")
    theirs = sentence_transformers.SentenceTransformer(str(resaved), device="cpu")
    np.testing.assert_allclose(ours.encode_queries(TEXTS), theirs.encode_query(TEXTS), atol=1e-5)
    np.testing.assert_allclose(ours.encode_passages([Document(str(i), t) for i, t in enumerate(TEXTS)]),
                               theirs.encode_document(TEXTS), atol=1e-5)


def _edit_dense(folder, weights=None, config=None) -> None:
    if weights:
        tensors = load_file(folder / "2_Dense" / "model.safetensors")
        weights(tensors)
        save_file(tensors, folder / "2_Dense" / "model.safetensors")
    if config:
        path = folder / "2_Dense" / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))


@pytest.mark.parametrize("weights, config, problem", [
    (lambda t: t["linear.bias"].add_(1e-3), None, "its weights are not the transformer's pooler's"),
    (lambda t: t.update({"linear.weight": torch.eye(32)}), None, "its weights are not the transformer's pooler's"),
    (None, {"activation_function": "torch.nn.modules.linear.Identity"}, "its activation is not tanh"),
    (None, {"out_features": 16}, "it is not a 32 → 32 layer with a bias"),
    (None, {"use_residual": True}, "it adds its input back"),  # tanh(W·CLS + b) + CLS: it was read as the pooler
])
def test_a_dense_that_is_not_the_pooler_is_still_refused(resaved, weights, config, problem):
    _edit_dense(resaved, weights, config)
    with pytest.raises(RetrieverError, match=f"modules are Transformer → Pooling → Dense → Normalize.*{problem}"):
        EncoderSettings.for_model(str(resaved))


def test_a_dense_after_mean_pooling_is_still_refused(resaved):
    path = resaved / "1_Pooling" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "pooling_mode_cls_token": False,
                                "pooling_mode_mean_tokens": True, "pooling_mode": "mean"}))
    with pytest.raises(RetrieverError, match="Dense → Normalize.*the pooler reads the CLS token, not mean pooling"):
        EncoderSettings.for_model(str(resaved))


def test_a_pooler_model_on_the_hub_is_read_from_weights_fetched_for_the_check(resaved, hub_snapshot, monkeypatch):
    """A hub id's snapshot holds only its JSON files until the model loads: its pooler weights were taken as missing,
    and a `train --pooling pooler` model on the hub was refused ("the transformer has no pooler weights")."""
    import huggingface_hub
    from huggingface_hub import constants

    model = resaved.parent / "model"  # as `retriever train` wrote it, retriever.json included
    hub_snapshot(model, "org/pooler")
    snapshot = next((resaved.parent / "cache" / "models--org--pooler" / "snapshots").iterdir())
    for weights in snapshot.rglob("*.safetensors"):
        weights.unlink()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(RetrieverError, match="model 'org/pooler': cannot fetch model.safetensors from the Hugging Face "
                                             "hub .*, which reading its settings needs"):
        EncoderSettings.for_model("org/pooler")
    fetched = []

    def download(repo_id, filename, revision, cache_dir):
        assert (repo_id, revision) == ("org/pooler", "0" * 40) and str(snapshot).startswith(cache_dir)
        fetched.append(filename)
        (snapshot / filename).write_bytes((model / filename).read_bytes())
        return str(snapshot / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    settings = EncoderSettings.for_model("org/pooler")
    assert (settings.pooling, settings.normalize) == ("pooler", True)
    assert sorted(fetched) == ["2_Dense/model.safetensors", "model.safetensors"]


def test_a_stale_shard_index_beside_the_weights_is_read_past_as_transformers_does(resaved):
    """transformers re-saving a sharded model unsharded deletes the shards but leaves model.safetensors.index.json;
    it loads model.safetensors first, and the pooler check read the stale index first: refused, "the transformer has
    no pooler weights"."""
    (resaved / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "pooler.dense.weight": "model-00001-of-00002.safetensors", "pooler.dense.bias": "model-00001-of-00002.safetensors"}}))
    assert EncoderSettings.for_model(str(resaved)).pooling == "pooler"
