"""Dual-encoder fine-tuning (`train`) and hard-negative mining (`mine_negatives`)."""
from __future__ import annotations

from retriever.training.dual_encoder import DualEncoder
from retriever.training.loss import contrastive_loss, judged_positive_mask
from retriever.training.mining import MiningResult, mine_negatives
from retriever.training.trainer import TrainConfig, TrainResult, train

__all__ = ["DualEncoder", "MiningResult", "TrainConfig", "TrainResult", "contrastive_loss", "judged_positive_mask",
           "mine_negatives", "train"]
