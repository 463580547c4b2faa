"""Condenser / coCondenser pre-training: teach a BERT to put a passage's meaning into its CLS vector
before it is fine-tuned as a dense retriever."""
from __future__ import annotations

from retriever.pretraining.condenser import CondenserForPretraining, CondenserOutput, load_condenser
from retriever.pretraining.config import PretrainConfig, PretrainResult
from retriever.pretraining.trainer import pretrain

__all__ = ["CondenserForPretraining", "CondenserOutput", "PretrainConfig", "PretrainResult", "load_condenser",
           "pretrain"]
