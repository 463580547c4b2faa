"""A run that diverges stops at its first non-finite loss, and non-finite weights are never checkpointed or
published: each later step would train on, and save, NaN weights."""
from __future__ import annotations

import math

import torch
from transformers import TrainerCallback

from retriever.errors import RetrieverError


def diverged(step: int, what: str) -> RetrieverError:
    return RetrieverError(f"training diverged at step {step}: {what}; nothing was saved from it. Rerun with a lower "
                          "--learning-rate (or --max-grad-norm) into another --output")


def check_finite_weights(model: torch.nn.Module, step: int) -> None:
    """Refuse to checkpoint or publish weights that are not finite: what a diverged run has."""
    if not all(bool(torch.isfinite(parameter).all()) for parameter in model.parameters()):
        raise diverged(step, "its weights are not finite")


class StopAtNonFiniteLoss(TrainerCallback):
    """Stops the run at the first step whose loss is NaN or infinite (the logged mean over the ranks, so every rank
    stops): each later step would train on, and checkpoint, NaN weights."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            raise diverged(state.global_step, f"its loss is {loss}")
