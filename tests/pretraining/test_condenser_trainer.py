"""The Condenser's trainer (``retriever.pretraining.condenser_trainer``): the backbone's learning-rate group and the
frozen-backbone callback."""
from __future__ import annotations

import pytest

from pretraining.configs import four_sequence_config
from retriever.pretraining import load_condenser
from retriever.pretraining.condenser_trainer import CondenserTrainer, FrozenBackbone

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_backbone_lr_scale_shows_in_the_optimizer_groups(tiny_beir, tiny_model_dir, tmp_path):
    settings = four_sequence_config(tiny_beir, tmp_path / "out", tiny_model_dir, max_steps=2, backbone_lr_scale=0.1,
                                    freeze_backbone_steps=1)
    model, _ = load_condenser(str(tiny_model_dir))
    arguments, precision = settings.arguments(4, 2, 1)
    trainer = CondenserTrainer(settings, arguments=arguments, precision=precision, model=model, train_dataset=[])
    optimizer = trainer.create_optimizer()
    rates = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    named = dict(model.named_parameters())
    assert len(rates) == len(named) == sum(len(group["params"]) for group in optimizer.param_groups)
    for name, parameter in named.items():
        assert rates[id(parameter)] == pytest.approx(2e-4 if name.startswith("lm.bert.") else 2e-3), name
    assert any(isinstance(callback, FrozenBackbone) for callback in trainer.callback_handler.callbacks)
