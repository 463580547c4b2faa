"""Untied towers as sentence-transformers saves them: a Router whose query and document towers sit in subfolders
and no config.json at the root. They were refused (retriever read only the layout `retriever train` writes); now the
query tower encodes queries and the document tower passages, as ``encode_query`` and ``encode_document`` do."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fixtures_models import make_tiny_bert, sentence_transformers_modules
from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError

sentence_transformers = pytest.importorskip("sentence_transformers")  # in the `test` extra
pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = ["where does honey come from", "a cat", "hot lava rock and fire by the old river city " * 12]
PROMPTS = {"query": "query: ", "document": "passage: "}


def saved_router(tmp_path, pooling: str = "mean", normalize: bool = True, lengths=(16, 24), tokenizer_of=None):
    """Two towers of other weights (seeds), each with its own Pooling, routed by sentence-transformers itself."""
    models = sentence_transformers_modules()
    Router = models.Router

    towers = []
    for seed, length in zip((1, 2), lengths):
        folder = make_tiny_bert(tmp_path / f"tower{seed}", seed=seed)
        towers.append([models.Transformer(str(folder), max_seq_length=length), models.Pooling(32, pooling_mode=pooling)])
    router = Router.for_query_document(query_modules=towers[0], document_modules=towers[1])
    model = sentence_transformers.SentenceTransformer(modules=[router] + ([models.Normalize()] if normalize else []),
                                                      prompts=PROMPTS, device="cpu")
    model.save(str(tmp_path / "st"))
    return tmp_path / "st"


def assert_router_vectors(folder) -> Encoder:
    ours = Encoder(EncoderSettings.for_model(str(folder)), device="cpu", dtype="fp32")
    theirs = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    np.testing.assert_allclose(ours.encode_queries(TEXTS), theirs.encode_query(TEXTS), atol=1e-5)
    np.testing.assert_allclose(ours.encode_passages([Document(str(i), t) for i, t in enumerate(TEXTS)]),
                               theirs.encode_document(TEXTS), atol=1e-5)
    return ours


@pytest.mark.parametrize("pooling, normalize", [("mean", True), ("cls", False)])
def test_a_router_sentence_transformers_saved_gives_its_vectors(tmp_path, pooling, normalize):
    folder = saved_router(tmp_path, pooling, normalize)
    assert not (folder / "config.json").exists()
    ours = assert_router_vectors(folder)
    assert (ours.settings.towers, ours.settings.query_max_length, ours.settings.passage_max_length) == \
        ("untied", 16, 24)


def test_our_untied_folder_re_saved_by_sentence_transformers_gives_its_vectors(tmp_path, tiny_model_dir):
    from retriever.training.dual_encoder import DualEncoder
    from training.test_dual_encoder import perturbed

    model = perturbed(DualEncoder.from_pretrained(str(tiny_model_dir), towers="untied", pooling="cls",
                                                  query_prefix="q: ", passage_prefix="p: ", query_max_length=20,
                                                  passage_max_length=28))
    folder = model.save(tmp_path / "model", training={"init_model": "tiny"})
    sentence_transformers.SentenceTransformer(str(folder), device="cpu").save(str(tmp_path / "resaved"))
    assert_router_vectors(tmp_path / "resaved")


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["parameters"].update(route_mappings={"x": "query"}), "route_mappings"),
    (lambda c: c["structure"].pop("query"), "no 'query' route"),
    (lambda c: c["types"].pop(c["structure"]["query"][0]), "its types name no module type for 'query_0_Transformer'"),
])
def test_a_router_retriever_cannot_follow_is_refused_in_one_line(tmp_path, edit, message):
    folder = saved_router(tmp_path)
    config = json.loads((folder / "router_config.json").read_text())
    edit(config)
    (folder / "router_config.json").write_text(json.dumps(config))
    with pytest.raises(RetrieverError, match=message) as raised:
        EncoderSettings.for_model(str(folder))
    assert "\n" not in str(raised.value)


def test_towers_pooled_otherwise_are_refused(tmp_path):
    folder = saved_router(tmp_path)
    config = json.loads((folder / "router_config.json").read_text())
    pooling = config["structure"]["query"][1]
    (folder / pooling / "config.json").write_text(json.dumps({"embedding_dimension": 32, "pooling_mode": "cls"}))
    with pytest.raises(RetrieverError, match=r"router_config.json: its towers pool otherwise \(query cls; document "
                                             r"mean\), and retriever applies one pooling to both"):
        EncoderSettings.for_model(str(folder))


def test_towers_that_tokenize_otherwise_are_refused(tmp_path):
    """retriever has one tokenizer: a query tower saved with another one would get the document tower's token ids."""
    folder = saved_router(tmp_path)
    query = json.loads((folder / "router_config.json").read_text())["structure"]["query"][0]
    tokenizer_config = json.loads((folder / query / "tokenizer_config.json").read_text())
    (folder / query / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "do_lower_case": False}))
    tokenizer = json.loads((folder / query / "tokenizer.json").read_text())
    tokenizer["normalizer"]["lowercase"] = False
    (folder / query / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(RetrieverError, match="the query tower's tokenizer differs from the document tower's"):
        Encoder(EncoderSettings.for_model(str(folder)), device="cpu")


def test_training_starts_from_a_routers_two_towers(tmp_path):
    """It failed loading the folder's root as the model (no config.json there), calling the folder damaged."""
    from retriever.training.dual_encoder import DualEncoder

    folder = saved_router(tmp_path)
    model = DualEncoder.from_pretrained(str(folder))
    ours = Encoder(EncoderSettings.for_model(str(folder)), device="cpu", dtype="fp32")
    assert model.settings.towers == "untied"
    assert model.as_encoder(torch.device("cpu"), "fp32").weights_sha256 == ours.weights_sha256
    with pytest.raises(RetrieverError, match="has untied query/passage towers and cannot be trained as shared"):
        DualEncoder.from_pretrained(str(folder), towers="shared")


def test_untied_towers_on_the_hub_say_to_download_them(tmp_path, hub_snapshot):
    """A Router's towers are subfolders, which retriever loads only from a local folder: a hub id of one (cached
    whole) failed saying fetching it from the hub failed, and a `retriever train` untied folder on the hub failed
    naming ORG/NAME/query as no model folder."""
    hub_snapshot(saved_router(tmp_path), "some-org/router")
    with pytest.raises(RetrieverError, match=r"^some-org/router: untied towers \(a sentence-transformers Router\) "
                                             r"on the Hugging Face hub, which retriever reads only from a local "
                                             r"folder: download it \(hf download some-org/router --local-dir DIR\) "
                                             r"and pass --model DIR$"):
        Encoder(EncoderSettings.for_model("some-org/router"), device="cpu")


def test_a_router_encoded_as_shared_towers_is_refused_as_a_router(tmp_path):
    """Its root holds no transformer (the towers are in subfolders): loading it as one failed calling the folder
    damaged or incomplete, though it was neither."""
    folder = saved_router(tmp_path)
    with pytest.raises(RetrieverError, match=r"st: a sentence-transformers Router of untied query and document towers "
                                             r"\(query_0_Transformer/ and document_0_Transformer/\), and "
                                             r"towers='shared' encodes with one transformer"):
        Encoder(EncoderSettings.for_model(str(folder), towers="shared"), device="cpu")
    assert EncoderSettings.for_model(str(folder), towers="untied").towers == "untied"
