"""DualEncoder: shared and untied towers, save/load as a model folder the inference Encoder reads as is."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from fixtures_models import make_tiny_bert
from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.training.dual_encoder import DualEncoder

QUERIES = ["where does honey come from", "hot lava rock and fire"]
DOCUMENTS = [Document("d1", "the bee makes honey from a flower", "Bees"), Document("d2", "lava is hot rock")]


def perturbed(model: DualEncoder, seed: int = 1) -> DualEncoder:
    """Nudge every weight, differently per tower, as training would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tower in model.towers():
            for parameter in tower.parameters():
                parameter.add_(0.02 * torch.randn(parameter.shape, generator=generator))
    return model


def direct_embeddings(model: DualEncoder, texts: list[str], queries: bool) -> np.ndarray:
    """Embeddings straight from the training path (one padded batch), not through Encoder."""
    settings = model.settings
    max_length = settings.query_max_length if queries else settings.passage_max_length
    inputs = dict(model.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"))
    model.eval()
    with torch.no_grad():
        vectors = model(query=inputs)[0] if queries else model(passage=inputs)[1]
    return vectors.numpy()


@pytest.mark.parametrize("towers, pooling, normalize", [("shared", "mean", True), ("untied", "cls", False)])
def test_saved_folder_loads_in_encoder_with_the_same_embeddings(tmp_path, tiny_model_dir, towers, pooling, normalize):
    model = perturbed(DualEncoder.from_pretrained(str(tiny_model_dir), towers=towers, pooling=pooling,
                                                  normalize=normalize, query_prefix="q: ", passage_max_length=48))
    folder = model.save(tmp_path / "model", training={"steps": 3})
    recorded = json.loads((folder / "retriever.json").read_text())
    assert recorded["towers"] == towers and recorded["pooling"] == pooling and recorded["normalize"] is normalize
    assert recorded["passage_max_length"] == 48 and recorded["training"] == {"steps": 3}
    if towers == "untied":
        assert (folder / "query" / "config.json").is_file() and (folder / "model.safetensors").is_file()
    encoder = Encoder(EncoderSettings.for_model(str(folder)), device="cpu", dtype="fp32")
    assert encoder.settings.query_prefix == "q: " and encoder.settings.towers == towers
    np.testing.assert_allclose(encoder.encode_queries(QUERIES),
                               direct_embeddings(model, ["q: " + q for q in QUERIES], queries=True), atol=1e-5)
    passages = [f"{d.title} {d.text}".strip() for d in DOCUMENTS]
    np.testing.assert_allclose(encoder.encode_passages(DOCUMENTS), direct_embeddings(model, passages, queries=False),
                               atol=1e-5)


def test_untied_towers_start_equal_and_stay_separate(tmp_path, tiny_model_dir):
    model = DualEncoder.from_pretrained(str(tiny_model_dir), towers="untied")
    assert model.query_model is not model.passage_model
    assert torch.equal(model.query_model.embeddings.word_embeddings.weight,
                       model.passage_model.embeddings.word_embeddings.weight)
    perturbed(model)
    reloaded = DualEncoder.from_pretrained(str(model.save(tmp_path / "untied")))
    assert reloaded.settings.towers == "untied"
    for before, after in [(model.query_model, reloaded.query_model), (model.passage_model, reloaded.passage_model)]:
        for (name, a), (_, b) in zip(before.state_dict().items(), after.state_dict().items()):
            assert torch.equal(a, b), name
    with pytest.raises(RetrieverError, match="untied"):
        DualEncoder.from_pretrained(str(tmp_path / "untied"), towers="shared")


def test_shared_towers_are_one_module(tiny_model_dir):
    model = DualEncoder.from_pretrained(str(tiny_model_dir))
    assert model.passage_model is model.query_model and len(model.towers()) == 1
    assert model.settings.pooling == "mean" and model.settings.normalize is True


def test_condenser_checkpoint_loads_its_backbone_and_says_the_head_is_dropped(tmp_path, capsys):
    """A Condenser folder is a BertForMaskedLM plus model.pt (the head): the encoder is its BERT backbone."""
    folder = make_tiny_bert(tmp_path / "condenser", layers=2)
    masked_lm = BertForMaskedLM(BertConfig.from_pretrained(folder))
    masked_lm.save_pretrained(folder)
    torch.save({"c_head.0.attention.self.query.weight": torch.zeros(32, 32)}, folder / "model.pt")
    model = DualEncoder.from_pretrained(str(folder), pooling="cls")
    assert "Condenser" in capsys.readouterr().err
    expected = masked_lm.bert.encoder.layer[1].output.dense.weight
    assert torch.equal(model.query_model.encoder.layer[1].output.dense.weight, expected)
    with pytest.raises(RetrieverError, match="pooler"):  # an MLM checkpoint has no trained pooler
        DualEncoder.from_pretrained(str(folder), pooling="pooler")


def test_pooler_pooling_needs_pooler_weights(tmp_path):
    folder = make_tiny_bert(tmp_path / "no-pooler", layers=1, with_pooler=False)
    with pytest.raises(RetrieverError, match="pooler"):
        DualEncoder.from_pretrained(str(folder), pooling="pooler")


@pytest.mark.parametrize("towers", ["shared", "untied"])
def test_a_model_trained_from_a_checkpoint_without_a_pooler_does_not_save_a_random_one(tmp_path, towers):
    """transformers drew the missing pooler at random and the trained folder saved it: `--pooling pooler` was then
    accepted on that folder, as if the pooler were trained (the start checkpoint was refused)."""
    folder = make_tiny_bert(tmp_path / "no-pooler", layers=1, with_pooler=False)
    model = DualEncoder.from_pretrained(str(folder), pooling="mean", towers=towers)
    assert not [name for name, _ in model.named_parameters() if ".pooler." in name]
    model.save(tmp_path / "out")
    with pytest.raises(RetrieverError, match="pooler"):
        DualEncoder.from_pretrained(str(tmp_path / "out"), pooling="pooler")
    with pytest.raises(RetrieverError, match="pooler"):
        Encoder(EncoderSettings.for_model(str(tmp_path / "out"), pooling="pooler"))


def test_saving_into_a_folder_with_checkpoints_keeps_them(tmp_path, tiny_model_dir):
    output = tmp_path / "out"
    (output / "checkpoints").mkdir(parents=True)
    (output / "checkpoints" / "finished.json").write_text("{}")
    DualEncoder.from_pretrained(str(tiny_model_dir)).save(output)
    assert (output / "config.json").is_file() and (output / "checkpoints" / "finished.json").is_file()
    assert not [p for p in output.iterdir() if "staging" in p.name]


def test_training_refuses_a_tokenizer_of_another_model(tmp_path):
    """Token ids past the embedding table: an IndexError traceback at the first batch holding one."""
    from transformers import BertTokenizerFast

    from fixtures_models import build_vocab
    folder = make_tiny_bert(tmp_path / "model")
    for path in folder.glob("tokenizer*"):
        path.unlink()
    vocab = build_vocab() + [f"word{i}" for i in range(50)]
    BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}).save_pretrained(folder)
    with pytest.raises(RetrieverError, match="its tokenizer has token ids up to .* the tokenizer files belong to "
                                             "another model"):
        DualEncoder.from_pretrained(str(folder))


@pytest.mark.parametrize("lengths", [{"passage_max_length": 1000}, {"query_max_length": 600}])
def test_max_lengths_past_the_models_positions_are_refused_before_training(tmp_path, tiny_model_dir, lengths):
    """`train --passage-max-length 1000` on a 512-position model trained on, until a long passage raised a
    RuntimeError traceback mid-run (or wrote a folder that `build --model` then refused)."""
    from retriever.training import TrainConfig, train

    with pytest.raises(RetrieverError, match=r"-max-length \d+ is more than the 512 positions .*; pass at most 512"):
        DualEncoder.from_pretrained(str(tiny_model_dir), **lengths)
    data = tmp_path / "train.jsonl"
    data.write_text('{"query": "cat", "positives": ["the cat sat"]}\n{"query": "dog", "positives": ["a dog ran"]}\n')
    with pytest.raises(RetrieverError, match="positions"):
        train(TrainConfig(output=str(tmp_path / "out"), train_jsonl=str(data), model=str(tiny_model_dir),
                          batch_size=2, device="cpu", dtype="fp32", progress=False, encoder=lengths))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("pooling, with_pooler", [("cls", True), ("mean", True), ("pooler", True), ("cls", False),
                                                  ("mean", False)])  # pooler without one: refused at loading
@pytest.mark.parametrize("towers", ["shared", "untied"])
def test_the_parameters_said_to_get_no_gradient_are_those_a_step_leaves_without_one(tmp_path, pooling, towers,
                                                                                   with_pooler):
    """What decides DDP's `find_unused_parameters`: said too few, DDP fails at the second step; too many, every
    process warned of an extra autograd traversal a step."""
    folder = make_tiny_bert(tmp_path / "bert", layers=1, with_pooler=with_pooler)
    model = DualEncoder.from_pretrained(str(folder), pooling=pooling, towers=towers)
    query, passage = (dict(model.tokenizer(texts, padding=True, return_tensors="pt"))
                      for texts in (QUERIES, [d.text for d in DOCUMENTS]))
    queries, passages = model(query=query, passage=passage)
    (queries @ passages.T).logsumexp(dim=1).sum().backward()
    without_gradient = [name for name, parameter in model.named_parameters() if parameter.grad is None]
    assert sorted(model.parameters_without_gradient()) == sorted(without_gradient)
    assert bool(without_gradient) == (with_pooler and pooling != "pooler")
