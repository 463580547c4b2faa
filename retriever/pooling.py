"""Pooling: how a sequence of token states becomes one vector.

Each mode is one small named object so it can be tested, compared and recorded by name in
index manifests and model configs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from retriever.errors import RetrieverError

if TYPE_CHECKING:  # only annotations: the CLI's --pooling choices come from here, and imports no torch
    import torch


def _pooler_refusal(name: str) -> RetrieverError:
    return RetrieverError(f"pooling 'pooler' needs trained pooler weights, and {name} has none; "
                          "use --pooling cls or mean")


def has_trained_pooler(model: torch.nn.Module, loading_info: dict) -> bool:
    """Whether a loaded checkpoint brought pooler weights (a fresh pooler is random: its vectors are noise)."""
    missing = any(key.startswith("pooler.") or ".pooler." in key for key in loading_info.get("missing_keys", ()))
    return getattr(model, "pooler", None) is not None and not missing


def check_pooler_weights(pooling: str, model: torch.nn.Module, loading_info: dict, name: str) -> None:
    """Refuse pooler pooling on a checkpoint whose pooler was never trained."""
    if pooling == "pooler" and not has_trained_pooler(model, loading_info):
        raise _pooler_refusal(name)


def drop_untrained_pooler(model: torch.nn.Module, loading_info: dict) -> None:
    """Remove a pooler the checkpoint lacks (once ``check_pooler_weights`` passed, cls or mean pooling ignores it):
    drawn at random on every load, it changed the weights' fingerprint, so an index built from a checkpoint
    without pooler weights (a coCondenser MLM folder) was refused by its own search as made by another model."""
    if getattr(model, "pooler", None) is not None and not has_trained_pooler(model, loading_info):
        model.pooler = None


class Pooling:
    """A named way of turning a model's token states (and the attention mask) into one vector per text."""

    name: str = ""

    def __call__(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class ClsPooling(Pooling):
    """The first token's final state: what Condenser pre-training shapes."""

    name = "cls"

    def __call__(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        return outputs.last_hidden_state[:, 0]


class PoolerPooling(Pooling):
    """BERT's pooler_output: tanh(W · CLS), trained by next-sentence prediction."""

    name = "pooler"

    def __call__(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        pooled = getattr(outputs, "pooler_output", None)
        if pooled is None:
            raise _pooler_refusal("this model")
        return pooled


class MeanPooling(Pooling):
    """Average of the token states, padding excluded."""

    name = "mean"

    def __call__(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        states = outputs.last_hidden_state.float()  # summing hundreds of bf16/fp16 states loses precision
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        return (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


POOLINGS: dict[str, type[Pooling]] = {cls.name: cls for cls in (ClsPooling, PoolerPooling, MeanPooling)}


def get_pooling(name: str) -> Pooling:
    """The pooling recorded under ``name`` (in a manifest, retriever.json or a flag), or a one-line error."""
    try:
        return POOLINGS[name]()
    except KeyError:
        raise RetrieverError(f"unknown pooling {name!r}; choose one of {', '.join(POOLINGS)}") from None
