"""GradCache (Gao et al., 2021): a large contrastive batch in the memory of a small one.

The loss couples every query with every passage, so the batch cannot be split into micro-batches.
Instead each chunk of texts is embedded under torch's activation checkpointing: its activations
are dropped after the forward pass and recomputed, a chunk at a time, when the loss's gradient
reaches its embeddings, with the RNG state replayed so dropout masks match. Peak activation
memory is one chunk; the gradients are those of the whole batch in one graph.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint


def split_inputs(inputs: dict[str, torch.Tensor], chunk_size: int) -> list[dict[str, torch.Tensor]]:
    """Row chunks, each trimmed to its own longest sequence so short chunks cost less."""
    rows = int(inputs["input_ids"].shape[0])
    chunks = []
    for start in range(0, rows, chunk_size):
        mask = inputs["attention_mask"][start:start + chunk_size]
        length = max(int(mask.sum(dim=1).max()), 1)
        chunks.append({key: value[start:start + chunk_size, :length] for key, value in inputs.items()})
    return chunks


def cached_embeddings(encode: Callable[[dict[str, torch.Tensor]], torch.Tensor], inputs: dict[str, torch.Tensor],
                      chunk_size: int) -> torch.Tensor:
    """Embeddings of every row whose backward recomputes one chunk at a time."""
    return torch.cat([checkpoint(encode, chunk, use_reentrant=False) for chunk in split_inputs(inputs, chunk_size)])
