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

Encode = Callable[[dict[str, torch.Tensor]], torch.Tensor]
LossOf = Callable[[torch.Tensor, torch.Tensor, dict], torch.Tensor]


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


def _embed_without_graph(encode: Encode, chunks: list[dict[str, torch.Tensor]],
                         device: torch.device) -> tuple[torch.Tensor, list]:
    states, embeddings = [], []
    for chunk in chunks:
        states.append(_capture_rng(device))
        with torch.no_grad():
            embeddings.append(encode(chunk))
    return torch.cat(embeddings), states


def _backpropagate(encode: Encode, chunks: list[dict[str, torch.Tensor]], states: list, gradient: torch.Tensor,
                   device: torch.device) -> None:
    offset = 0
    for chunk, state in zip(chunks, states):
        rows = int(chunk["input_ids"].shape[0])
        with _replayed_rng(state, device):
            embeddings = encode(chunk)
        embeddings.backward(gradient=gradient[offset:offset + rows])
        offset += rows


def grad_cache_backward(model, batch: dict, loss_of: LossOf, chunk_size: int,
                        scale: Callable[[torch.Tensor], torch.Tensor] = lambda loss: loss) -> torch.Tensor:
    """Accumulate the full-batch gradient into the parameters chunk by chunk; return the loss.

    ``model(query=...)``/``model(passage=...)`` embed (the Trainer's forward, so its autocast
    applies); ``loss_of(queries, passages, batch)`` is the batch loss, free to gather other ranks'
    embeddings; ``scale`` is the fp16 loss scaler, if any.
    """
    device = batch["targets"].device
    query_chunks = split_inputs(batch["query"], chunk_size)
    passage_chunks = split_inputs(batch["passage"], chunk_size)
    encode_query, encode_passage = (lambda chunk: model(query=chunk)[0]), (lambda chunk: model(passage=chunk)[1])
    queries, query_states = _embed_without_graph(encode_query, query_chunks, device)
    passages, passage_states = _embed_without_graph(encode_passage, passage_chunks, device)
    queries.requires_grad_(True)
    passages.requires_grad_(True)
    loss = loss_of(queries, passages, batch)
    query_gradient, passage_gradient = torch.autograd.grad(scale(loss), [queries, passages])
    _backpropagate(encode_query, query_chunks, query_states, query_gradient, device)
    _backpropagate(encode_passage, passage_chunks, passage_states, passage_gradient, device)
    return loss.detach()
