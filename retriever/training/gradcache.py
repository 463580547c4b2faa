"""GradCache (Gao et al., 2021): a large contrastive batch in the memory of a small one.

The loss couples every query with every passage, so the batch cannot simply be split into
micro-batches.  Instead: (1) embed all texts chunk by chunk without building graphs, (2) compute
the loss on the detached embeddings and its gradient w.r.t. each embedding, (3) re-run each chunk
with a graph and backpropagate that cached gradient.  Peak activation memory is one chunk.
Dropout masks must be the same in (1) and (3), so the RNG state before each chunk is recorded
and replayed; the parameter gradients then equal the plain full-batch ones.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch

from retriever.device import autocast
from retriever.training.data import TrainBatch
from retriever.training.loss import contrastive_loss

Encode = Callable[[dict[str, torch.Tensor]], torch.Tensor]


def split_inputs(inputs: dict[str, torch.Tensor], chunk_size: int) -> list[dict[str, torch.Tensor]]:
    """Row chunks, each trimmed to its own longest sequence so short chunks cost less."""
    rows = int(inputs["input_ids"].shape[0])
    chunks = []
    for start in range(0, rows, chunk_size):
        mask = inputs["attention_mask"][start:start + chunk_size]
        length = max(int(mask.sum(dim=1).max()), 1)
        chunks.append({key: value[start:start + chunk_size, :length] for key, value in inputs.items()})
    return chunks


def _capture_rng(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda_state = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda_state


@contextmanager
def _replayed_rng(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device):
    """Run with the RNG as it was before a chunk's first pass, then put the current state back."""
    cpu_state, cuda_state = state
    with torch.random.fork_rng(devices=[device] if cuda_state is not None else []):
        torch.set_rng_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state(cuda_state, device)
        yield


def _embed_without_graph(encode: Encode, chunks: list[dict[str, torch.Tensor]], device: torch.device,
                         dtype: str) -> tuple[torch.Tensor, list]:
    states, embeddings = [], []
    for chunk in chunks:
        states.append(_capture_rng(device))
        with torch.no_grad(), autocast(device, dtype):
            embeddings.append(encode(chunk))
    return torch.cat(embeddings), states


def _backpropagate(encode: Encode, chunks: list[dict[str, torch.Tensor]], states: list, gradient: torch.Tensor,
                   device: torch.device, dtype: str) -> None:
    offset = 0
    for chunk, state in zip(chunks, states):
        rows = int(chunk["input_ids"].shape[0])
        with _replayed_rng(state, device), autocast(device, dtype):
            embeddings = encode(chunk)
        embeddings.backward(gradient=gradient[offset:offset + rows])
        offset += rows


def grad_cache_backward(model, batch: TrainBatch, temperature: float, chunk_size: int, device: torch.device,
                        dtype: str, scaler: torch.amp.GradScaler | None = None) -> float:
    """Accumulate the full-batch gradient into the parameters chunk by chunk; return the loss."""
    query_chunks = split_inputs(batch.query_inputs, chunk_size)
    passage_chunks = split_inputs(batch.passage_inputs, chunk_size)
    queries, query_states = _embed_without_graph(model.encode_queries, query_chunks, device, dtype)
    passages, passage_states = _embed_without_graph(model.encode_passages, passage_chunks, device, dtype)
    queries.requires_grad_(True)
    passages.requires_grad_(True)
    loss = contrastive_loss(queries, passages, batch.targets, temperature, batch.mask)
    scaled = scaler.scale(loss) if scaler is not None else loss
    query_gradient, passage_gradient = torch.autograd.grad(scaled, [queries, passages])
    _backpropagate(model.encode_queries, query_chunks, query_states, query_gradient, device, dtype)
    _backpropagate(model.encode_passages, passage_chunks, passage_states, passage_gradient, device, dtype)
    return float(loss.detach())


def plain_backward(model, batch: TrainBatch, temperature: float, device: torch.device, dtype: str,
                   scaler: torch.amp.GradScaler | None = None) -> float:
    """The whole batch in one graph: simplest, and the reference GradCache must match."""
    with autocast(device, dtype):
        queries = model.encode_queries(batch.query_inputs)
        passages = model.encode_passages(batch.passage_inputs)
    loss = contrastive_loss(queries, passages, batch.targets, temperature, batch.mask)
    (scaler.scale(loss) if scaler is not None else loss).backward()
    return float(loss.detach())
