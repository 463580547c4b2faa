"""In-batch contrastive loss: each query must pick its own positive among every passage in the batch.

The passages of a batch are every query's positive and hard negatives, so each query sees
``batch_size * group_size - 1`` negatives for the price of encoding each passage once.  A passage
that is a judged positive of a query (e.g. two queries sharing a relevant document) is masked out
of that query's softmax instead of being pushed away.

Temperature: scores are ``q·p / τ``.  With L2-normalised embeddings the dot product is a cosine in
[-1, 1], too flat for a softmax, so τ = 0.05 (as in SimCSE, Contriever, E5); without normalisation
the raw dot product already has a scale and τ = 1 (DPR).
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

import torch
import torch.nn.functional as F

NORMALIZED_TEMPERATURE = 0.05
UNNORMALIZED_TEMPERATURE = 1.0


def default_temperature(normalize: bool) -> float:
    return NORMALIZED_TEMPERATURE if normalize else UNNORMALIZED_TEMPERATURE


def judged_positive_mask(judged: Sequence[Collection[str]], passage_ids: Sequence[str],
                         targets: torch.Tensor) -> torch.Tensor:
    """[queries, passages] bool: True where the passage is a judged positive of the query other than its target."""
    mask = torch.tensor([[doc_id in positives for doc_id in passage_ids] for positives in judged],
                        dtype=torch.bool).reshape(len(judged), len(passage_ids))
    mask[torch.arange(len(judged)), targets] = False
    return mask


def contrastive_scores(query_embeddings: torch.Tensor, passage_embeddings: torch.Tensor, temperature: float,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
    """Logits q·pᵀ/τ in fp32, masked entries at -inf."""
    scores = query_embeddings.float() @ passage_embeddings.float().T / temperature
    if mask is not None:
        scores = scores.masked_fill(mask.to(scores.device), float("-inf"))
    return scores


def contrastive_loss(query_embeddings: torch.Tensor, passage_embeddings: torch.Tensor, targets: torch.Tensor,
                     temperature: float = NORMALIZED_TEMPERATURE, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy of each query's target passage against all passages of the batch."""
    scores = contrastive_scores(query_embeddings, passage_embeddings, temperature, mask)
    return F.cross_entropy(scores, targets.to(scores.device))
