"""Pre-training recipes for a warm start: frozen-backbone head warm-up, the MLM-only ablation, and the warning before
pre-training an already contrastive encoder (a lower backbone learning rate: test_condenser_trainer.py)."""
from __future__ import annotations

import json
import shutil

import pytest
import safetensors.torch
import torch
from transformers import set_seed

from pretraining.configs import four_sequence_config
from retriever.errors import RetrieverError
from retriever.pretraining import load_condenser, pretrain
from retriever.pretraining.guards import contrastive_start_warning

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def backbone_weights(folder) -> dict[str, torch.Tensor]:
    weights = safetensors.torch.load_file(str(folder / "model.safetensors"))
    return {key.removeprefix("bert."): value for key, value in weights.items()
            if not key.startswith(("cls.", "pooler.", "bert.pooler."))}


def test_frozen_steps_leave_the_backbone_exactly_and_train_the_heads(tiny_beir, tiny_model_dir, tmp_path):
    settings = four_sequence_config(tiny_beir, tmp_path / "frozen", tiny_model_dir, max_steps=3,
                                    freeze_backbone_steps=3)
    set_seed(settings.seed)
    fresh_head = {key: value.clone() for key, value in load_condenser(str(tiny_model_dir))[0].head_state_dict().items()}
    result = pretrain(settings, log=lambda message: None)
    start, frozen = backbone_weights(tiny_model_dir), backbone_weights(result.output)
    assert start.keys() == frozen.keys() and all(torch.equal(start[key], frozen[key]) for key in start)
    trained_head = torch.load(result.output / "model.pt", weights_only=True)
    assert trained_head.keys() == fresh_head.keys()
    assert any(not torch.equal(trained_head[key], fresh_head[key]) for key in fresh_head)
    later = pretrain(four_sequence_config(tiny_beir, tmp_path / "thawed", tiny_model_dir, max_steps=3,
                                          freeze_backbone_steps=2),
                     log=lambda message: None)  # the third step trains the backbone too
    moved = backbone_weights(later.output)
    assert any(not torch.equal(start[key], moved[key]) for key in start)
    recorded = json.loads((later.output / "checkpoints" / "finished.json").read_text())["settings"]
    assert recorded["freeze_backbone_steps"] == 2 and recorded["backbone_lr_scale"] == 1.0


def test_mlm_only_has_no_condenser_head(tiny_beir, tiny_model_dir, tmp_path):
    """Its start line said "0 head layers fed from layer 2 of 4", a head and a skip_from the run does not have."""
    messages: list[str] = []
    result = pretrain(four_sequence_config(tiny_beir, tmp_path / "mlm", tiny_model_dir, max_steps=2, objective="mlm"),
                      log=messages.append)
    start = next(message for message in messages if message.startswith("pre-training MLM from"))
    assert ": no Condenser head, 4 layers, " in start and "head layer" not in start, start
    assert all("head_mlm" not in record and record["loss"] == pytest.approx(record["backbone_mlm"])
               for record in result.history)
    assert torch.load(result.output / "model.pt", weights_only=True) == {}
    assert json.loads((result.output / "condenser.json").read_text())["n_head_layers"] == 0
    model, notes = load_condenser(str(result.output), n_head_layers=0)  # continuing it with --objective mlm
    assert len(model.c_head) == 0 and "MLM only" in notes[-1]
    assert not any(name.startswith("c_head") for name, _ in model.named_parameters())
    with pytest.raises(RetrieverError, match="mlm has no head"):
        pretrain(four_sequence_config(tiny_beir, tmp_path / "bad", tiny_model_dir, objective="mlm", n_head_layers=2))


def test_a_condenser_run_from_an_mlm_only_output_gets_a_new_head(tiny_beir, tiny_model_dir, tmp_path):
    """The output's condenser.json records 0 head layers; the default objective took that as the head to continue
    and trained plain MLM, logged as "pre-training Condenser ... 0 head layers", its card "Condenser: 0 head
    layers", where --help promises the warm start's head, else 2."""
    mlm = pretrain(four_sequence_config(tiny_beir, tmp_path / "mlm", tiny_model_dir, max_steps=1, objective="mlm"),
                   log=lambda message: None)
    messages: list[str] = []
    result = pretrain(four_sequence_config(tiny_beir, tmp_path / "condenser", mlm.output, max_steps=2),
                      log=messages.append)
    assert "the 2-layer Condenser head is newly initialised (skip_from 2)" in messages
    assert all(record["head_mlm"] > 0 for record in result.history)
    assert json.loads((result.output / "condenser.json").read_text())["n_head_layers"] == 2
    assert "Condenser: 2 head layers" in (result.output / "README.md").read_text()


def test_pretraining_a_sentence_encoder_warns_first(tiny_beir, tiny_model_dir, tmp_path):
    assert contrastive_start_warning(str(tiny_model_dir)) is None
    encoder = shutil.copytree(tiny_model_dir, tmp_path / "sentence-encoder")
    (encoder / "modules.json").write_text("[]")
    messages: list[str] = []
    pretrain(four_sequence_config(tiny_beir, tmp_path / "out", encoder, max_steps=1), log=messages.append)
    assert messages[0].startswith("warning:") and "modules.json" in messages[0] and "README" in messages[0]
    assert "contrastive" in contrastive_start_warning("minilm")


def test_a_sentence_encoder_named_by_hub_id_warns_too(tiny_model_dir, tmp_path, hub_snapshot):
    """Only a local folder's modules.json was looked for: `--model sentence-transformers/all-MiniLM-L6-v2` (minilm
    itself, by its hub id) was pre-trained without the warning `--model minilm` gets."""
    encoder = shutil.copytree(tiny_model_dir, tmp_path / "sentence-encoder")
    (encoder / "modules.json").write_text("[]")
    hub_snapshot(encoder, "org/sentence-encoder")
    hub_snapshot(tiny_model_dir, "org/plain-bert")
    assert "(modules.json)" in contrastive_start_warning("org/sentence-encoder")
    assert contrastive_start_warning("org/plain-bert") is None and contrastive_start_warning("org/nowhere") is None
