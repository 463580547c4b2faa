"""Dual-encoder fine-tuning (`train`) and hard-negative mining (`mine_negatives`).

The names below are imported on first use (PEP 562), not with the package: ``retriever.training.processes``, which
every training and pre-training process imports, and `retriever mine` have no use for the Trainer, whose import
(transformers' Trainer, Accelerate, torch._dynamo) cost each of them seconds."""
from __future__ import annotations

import importlib

_MODULE_OF = {"DualEncoder": "dual_encoder", "contrastive_loss": "loss", "judged_positive_mask": "loss",
              "MiningResult": "mining", "mine_negatives": "mining", "TrainConfig": "train_config",
              "TrainResult": "train_config",
              "train": "trainer"}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
