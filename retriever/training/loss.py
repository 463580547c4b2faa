"""In-batch contrastive loss: each query must pick its own positive among every passage in the batch.

The passages of a batch are every query's positive and hard negatives, so each query sees
``batch_size * group_size - 1`` negatives for the price of encoding each passage once (under
torchrun, `global_batch` gathers every rank's embeddings, gradients flowing back).  A passage
that is a judged positive of a query (e.g. two queries sharing a relevant document) is masked out
of that query's softmax instead of being pushed away.

Temperature: scores are ``q·p / τ``.  With L2-normalised embeddings the dot product is a cosine in
[-1, 1], too flat for a softmax, so τ = 0.05 (as in SimCSE, Contriever, E5); without normalisation
the raw dot product already has a scale and τ = 1 (DPR).

τ has a floor, `retriever.choices.MIN_TEMPERATURE` (1e-4), for this loss and the Condenser span loss alike. Recipes use 0.01 to 1
(CLIP clamps its learned scale 1/τ at 100, i.e. τ ≥ 0.01; E5 0.01) and sweeps reach 0.001; the floor is 100x
below CLIP's. Below it the fp32 softmax is a hard max: a passage scored 17τ under the top gets less than 1e-7 of
the probability and one 104τ under gets exactly 0, so no gradient; at 1e-4 that is a cosine gap of 0.01, and a
smaller τ trains only on near-ties. Under ~1e-38 (fp32's smallest normal; bf16 has the same range) 1/τ is inf and
the first step is NaN. Dot products without --normalize are larger than cosines, so they saturate sooner and the
floor refuses nothing that trains there either.
"""
from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist
import torch.nn.functional as F

NORMALIZED_TEMPERATURE = 0.05
UNNORMALIZED_TEMPERATURE = 1.0


def default_temperature(normalize: bool) -> float:
    return NORMALIZED_TEMPERATURE if normalize else UNNORMALIZED_TEMPERATURE


def passage_key(passage_id: str) -> int:
    """A passage id as a non-negative int64, so judgments can travel between ranks as tensors."""
    return int.from_bytes(hashlib.blake2b(passage_id.encode("utf-8"), digest_size=8).digest(), "big") >> 1


def judged_positive_mask(judged_keys: torch.Tensor, passage_keys: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[queries, passages] bool: True where the passage is a judged positive of the query other than its target.

    ``judged_keys`` is [queries, J] of `passage_key`s padded with -1; ``passage_keys`` is [passages].
    """
    mask = (judged_keys[:, :, None] == passage_keys[None, None, :]).any(dim=1)
    mask[torch.arange(len(targets), device=mask.device), targets] = False
    return mask


def gather_rows(tensor: torch.Tensor, pad_value: float = 0) -> torch.Tensor:
    """Every rank's rows, concatenated in rank order; this rank's rows keep their gradient.

    Tevatron's ``_dist_gather_tensor``, for ragged sizes: ranks may hold different row counts (a
    query with fewer hard negatives brings fewer passages), so each pads to the widest shape and the
    padding is cut off again; trailing dimensions stay padded with ``pad_value``.
    """
    shape = torch.tensor(tensor.shape, device=tensor.device)
    shapes = [torch.empty_like(shape) for _ in range(dist.get_world_size())]
    dist.all_gather(shapes, shape)
    widest = torch.stack(shapes).max(dim=0).values.tolist()
    padding = [amount for have, want in reversed(list(zip(tensor.shape, widest))) for amount in (0, want - have)]
    padded = F.pad(tensor, padding, value=pad_value) if any(padding) else tensor
    gathered = [torch.empty_like(padded) for _ in shapes]
    dist.all_gather(gathered, padded.detach().contiguous())
    gathered[dist.get_rank()] = padded
    return torch.cat([rows[:int(size[0])] for rows, size in zip(gathered, shapes)])


def global_batch(queries: torch.Tensor, passages: torch.Tensor, targets: torch.Tensor, judged_keys: torch.Tensor,
                 passage_keys: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The whole global batch on every rank: each query sees every rank's passages (negatives across devices)."""
    counts = gather_rows(torch.tensor([len(passages)], device=targets.device))
    offset = int(counts[:dist.get_rank()].sum())
    return (gather_rows(queries), gather_rows(passages), gather_rows(targets + offset),
            gather_rows(judged_keys, pad_value=-1), gather_rows(passage_keys))


def contrastive_loss(query_embeddings: torch.Tensor, passage_embeddings: torch.Tensor, targets: torch.Tensor,
                     temperature: float = NORMALIZED_TEMPERATURE, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy of each query's target passage against all passages of the batch (fp32 logits q·pᵀ/τ,
    masked entries at -inf)."""
    scores = query_embeddings.float() @ passage_embeddings.float().T / temperature
    if mask is not None:
        scores = scores.masked_fill(mask.to(scores.device), float("-inf"))
    return F.cross_entropy(scores, targets.to(scores.device))
