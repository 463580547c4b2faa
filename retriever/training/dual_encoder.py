"""The trainable dual encoder: one tower shared by queries and passages, or two untied towers.

It pools and normalises exactly as ``retriever.encoder.Encoder`` does, and saves a model folder
that ``Encoder(EncoderSettings.for_model(folder))`` loads as is: see ``retriever.model_folder`` for the layout
(also a sentence-transformers folder), with ``retriever.json`` recording the encoder settings and
how the model was trained.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
from torch import nn

from retriever.device import resolve_batch_size
from retriever.encoder import Encoder
from retriever.encoder_settings import EncoderSettings
from retriever.errors import RetrieverError
from retriever.folders import publish_model_folder
from retriever.max_lengths import check_max_lengths, check_room_for_text
from retriever.model_folder import untied_tower_paths
from retriever.model_folder_writing import write_model_folder
from retriever.model_loading import (check_vocabulary, load_model, load_tokenizer,
                                     read_retriever_config, weights_fingerprint)
from retriever.model_names import resolve_model_path
from retriever.pooling import check_pooler_weights, drop_untrained_pooler, get_pooling
from retriever.st_router import transformer_folder

CONDENSER_HEAD = "model.pt"


def _log(message: str) -> None:
    print(message, file=sys.stderr)


def _load_backbone(name: str, pooling: str, tokenizer) -> nn.Module:
    model, info = load_model(name)
    check_pooler_weights(pooling, model, info, name)
    drop_untrained_pooler(model, info)  # else its random draw is saved as trained, and `--pooling pooler` takes it
    check_vocabulary(tokenizer, model, name)
    return model


class DualEncoder(nn.Module):
    """Query and passage towers with the pooling and normalisation the saved folder will record."""

    def __init__(self, query_model: nn.Module, passage_model: nn.Module | None, tokenizer,
                 settings: EncoderSettings) -> None:
        super().__init__()
        if (settings.towers == "untied") != (passage_model is not None):
            raise ValueError("untied towers need a passage model; shared towers take none")
        self.query_model = query_model
        self.untied_passage_model = passage_model
        self.tokenizer = tokenizer
        self.settings = settings
        self.pooling = get_pooling(settings.pooling)

    @property
    def passage_model(self) -> nn.Module:
        return self.untied_passage_model if self.untied_passage_model is not None else self.query_model

    @classmethod
    def from_pretrained(cls, model: str = "minilm", **overrides: object) -> "DualEncoder":
        """Start from ``minilm``, any HF checkpoint, a Condenser checkpoint or a folder saved by ``save``.

        ``overrides`` are EncoderSettings fields; unset ones come from the folder's retriever.json,
        else the EncoderSettings defaults.  Shared weights are copied into both towers when untied
        towers are asked for.
        """
        settings = EncoderSettings.for_model(model, training=True, **overrides)
        root = Path(resolve_model_path(model))
        recorded_towers = "untied" if transformer_folder(root) != root else \
            read_retriever_config(model).get("towers", "shared")  # a Router sentence-transformers saved has two
        if (root / CONDENSER_HEAD).is_file():
            _log(f"{model}: Condenser checkpoint; loading its HF backbone only, its MLM head and the Condenser head "
                 f"in {CONDENSER_HEAD} are dropped")
            if settings.pooling != "cls":
                _log(f"note: Condenser pre-training shapes the CLS vector; --pooling cls usually suits it better "
                     f"than {settings.pooling}")
        tokenizer = load_tokenizer(model)
        check_room_for_text(settings, tokenizer)  # before the weights load
        if recorded_towers == "untied":
            if settings.towers != "untied":
                raise RetrieverError(f"{model} has untied query/passage towers and cannot be trained as shared; "
                                     "pass --towers untied or start from a shared model")
            query_path, passage_path = untied_tower_paths(root)
            query_model = _load_backbone(str(query_path), settings.pooling, tokenizer)
            passage_model = _load_backbone(str(passage_path), settings.pooling, tokenizer)
        else:
            query_model = _load_backbone(model, settings.pooling, tokenizer)
            passage_model = copy.deepcopy(query_model) if settings.towers == "untied" else None
        check_max_lengths(settings, query_model.config)  # else a long text fails mid-training, deep in the model
        return cls(query_model, passage_model, tokenizer, settings)

    def towers(self) -> list[nn.Module]:
        return [self.query_model] if self.untied_passage_model is None else [self.query_model, self.passage_model]

    def parameters_without_gradient(self) -> list[str]:
        """The parameters no training step reaches: a tower's pooler, where the pooling reads the token states."""
        if self.settings.pooling == "pooler":
            return []
        towers = {"query_model": self.query_model, "untied_passage_model": self.untied_passage_model}
        return [f"{name}.pooler.{parameter}" for name, tower in towers.items()
                if getattr(tower, "pooler", None) is not None for parameter, _ in tower.pooler.named_parameters()]

    def _embed(self, model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        outputs = model(**inputs)
        pooled = self.pooling(outputs, inputs["attention_mask"]).float()
        return nn.functional.normalize(pooled, dim=-1) if self.settings.normalize else pooled

    def forward(self, query: dict[str, torch.Tensor] | None = None,
                passage: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Both sides in one call, so DDP and the Trainer's autocast see a single forward."""
        return (self._embed(self.query_model, query) if query is not None else None,
                self._embed(self.passage_model, passage) if passage is not None else None)

    def as_encoder(self, device: torch.device, dtype: str, batch_size: int | None = None) -> Encoder:
        """An inference Encoder over these in-memory weights, so dev scores come from the same code as `encode`."""
        return _InMemoryEncoder(self, device, dtype, batch_size)

    def retriever_config(self, training: dict | None = None) -> dict:
        config = self.settings.recorded()
        if training is not None:
            config["training"] = training
        return config

    def save(self, folder: str | Path, training: dict | None = None) -> Path:
        """Write a loadable model folder atomically (see ``folders.publish_model_folder``)."""
        return publish_model_folder(Path(folder), lambda staging: write_model_folder(
            staging, self.query_model, self.untied_passage_model, self.tokenizer, self.retriever_config(training)))


class _InMemoryEncoder(Encoder):
    """Encoder whose towers are a DualEncoder's live modules rather than weights loaded from disk."""

    def __init__(self, model: DualEncoder, device: torch.device, dtype: str, batch_size: int | None) -> None:
        self.settings = model.settings
        self.device = device
        self.dtype = dtype  # applied by autocast only: the live fp32 weights keep training afterwards
        self.batch_size = resolve_batch_size(batch_size, device)
        self.pooling = model.pooling
        self.tokenizer = model.tokenizer
        self.query_model = model.query_model
        self.passage_model = model.passage_model
        self.dim = int(self.query_model.config.hidden_size)
        self.weights_sha256 = weights_fingerprint(*model.towers())
