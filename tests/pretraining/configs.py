"""Settings of a small pre-training run on the CPU, shared by the tests of its checks (test_config, test_guards),
its loop (test_trainer), the Condenser's trainer (test_condenser_trainer), the recipes (test_recipes), its output
folder (test_outputs) and its run guards (test_run_guards)."""
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


def short_config(corpus, output, model, **overrides) -> PretrainConfig:
    """``config`` of 2 steps of 4 sequences of 16 tokens: a run to refuse or to look at (test_guards, test_outputs),
    where what it learns does not matter."""
    return config(corpus, output, model, **{"max_length": 16, "batch_size": 4, "max_steps": 2, **overrides})


def checkpointed_config(corpus, output, model, **overrides) -> PretrainConfig:
    """``config`` of 3 steps of 4 sequences, without warm-up, checkpointed at every step: the runs test_run_guards
    kills, resumes and changes under."""
    return config(corpus, output, model, **{"batch_size": 4, "save_steps": 1, "warmup_ratio": 0.0, "max_steps": 3,
                                            **overrides})
