"""Settings of a small pre-training run on the CPU, shared by the tests of its checks (test_config), its loop
(test_trainer), the Condenser's trainer (test_condenser_trainer) and the recipes (test_recipes)."""
from __future__ import annotations

from retriever.pretraining import PretrainConfig


def config(corpus, output, model, **overrides) -> PretrainConfig:
    """A run over ``corpus`` from ``model`` into ``output``: 32 tokens, 8 sequences a step, fp32 on the CPU, no
    checkpoints, seed 3; ``overrides`` change any setting."""
    settings = dict(corpus=str(corpus), output=str(output), model=str(model), max_length=32, batch_size=8,
                    device="cpu", dtype="fp32", progress=False, save_steps=None, learning_rate=2e-3,
                    warmup_ratio=0.1, seed=3)
    settings.update(overrides)
    return PretrainConfig(**settings)


def four_sequence_config(corpus, output, model, **overrides) -> PretrainConfig:
    """``config`` with 4 sequences a step: the runs of the Condenser trainer's tests and of the recipes'."""
    return config(corpus, output, model, **{"batch_size": 4, **overrides})
