"""Trained model folders, as written, open in sentence-transformers and transformers with retriever's own
embeddings."""
from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoModel

from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.training.dual_encoder import DualEncoder
from training.test_dual_encoder import perturbed

QUERIES = ["where does honey come from", "hot lava rock and fire by the old river city"]
DOCUMENTS = [Document("d1", "the bee makes honey from a flower", "Bees"), Document("d2", "lava is hot rock")]
CASES = [(towers, pooling, normalize) for towers in ("shared", "untied") for pooling in ("cls", "mean", "pooler")
         for normalize in (True, False)]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("towers, pooling, normalize", CASES)
def test_sentence_transformers_gives_our_embeddings(tmp_path, tiny_model_dir, one_torch_thread, towers, pooling,
                                                    normalize):
    sentence_transformers = pytest.importorskip("sentence_transformers")  # in the `test` extra
    model = perturbed(DualEncoder.from_pretrained(str(tiny_model_dir), towers=towers, pooling=pooling,
                                                  normalize=normalize, query_prefix="q: ", passage_prefix="p: ",
                                                  query_max_length=32, passage_max_length=32))
    folder = model.save(tmp_path / "model", training={"init_model": "tiny", "steps": 3})
    ours = Encoder(EncoderSettings.for_model(str(folder)), device="cpu", dtype="fp32")
    theirs = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    passages = [f"{d.title} {d.text}" for d in DOCUMENTS]
    for mine, other in ((ours.encode_queries(QUERIES), theirs.encode_query(QUERIES)),
                        (ours.encode_passages(DOCUMENTS), theirs.encode_document(passages))):
        assert cosines(mine, other).min() >= 0.9999
        np.testing.assert_allclose(np.linalg.norm(other, axis=1), np.linalg.norm(mine, axis=1), rtol=1e-4)


@pytest.mark.parametrize("towers", ["shared", "untied"])
def test_transformers_loads_every_tower_and_the_card_says_how(tmp_path, tiny_model_dir, towers):
    model = DualEncoder.from_pretrained(str(tiny_model_dir), towers=towers, pooling="cls")
    folder = model.save(tmp_path / "model", training={"model": "tiny", "dataset": "tiny-beir", "split": "train",
                                                      "dev_split": "dev", "dev": {"best_step": 2,
                                                                                  "scores": {"ndcg@10": 0.5}}})
    AutoModel.from_pretrained(folder)
    if towers == "untied":
        AutoModel.from_pretrained(folder / "query")
    card = (folder / "README.md").read_text()
    assert "tiny-beir" in card and "ndcg@10 0.5000" in card and "SentenceTransformer(" in card
    modules = json.loads((folder / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == (["Transformer", "Pooling", "Normalize"]
                                                              if towers == "shared" else ["Router", "Normalize"])
