"""The in-batch contrastive loss against hand computations, and the masking of shared positives."""
from __future__ import annotations

import math

import pytest
import torch

from retriever.training.loss import contrastive_loss, default_temperature, judged_positive_mask, passage_key

QUERIES = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
PASSAGES = torch.tensor([[0.5, 0.2, 0.0], [0.1, 0.4, 0.3], [0.0, 0.6, 0.9]])


def hand_loss(scores: list[list[float]], targets: list[int], masked: set[tuple[int, int]] = frozenset()) -> float:
    """Mean over queries of -s[i][t] + log sum_j exp(s[i][j]), masked cells left out of the sum."""
    total = 0.0
    for i, row in enumerate(scores):
        log_sum = math.log(sum(math.exp(s) for j, s in enumerate(row) if (i, j) not in masked))
        total += log_sum - row[targets[i]]
    return total / len(scores)


def test_loss_equals_hand_computation_on_3x3():
    temperature = 0.5
    # q_i picks coordinate i, so q_i · p_j = PASSAGES[j][i]
    scores = [[PASSAGES[j][i].item() / temperature for j in range(3)] for i in range(3)]
    loss = contrastive_loss(QUERIES, PASSAGES, torch.tensor([0, 1, 2]), temperature)
    assert loss.item() == pytest.approx(hand_loss(scores, [0, 1, 2]), rel=1e-6)


def test_targets_need_not_be_the_diagonal():
    """With hard negatives a query's positive sits at its group's offset, e.g. columns 0 and 2 for 2 queries."""
    scores = [[PASSAGES[j][i].item() for j in range(3)] for i in range(2)]
    loss = contrastive_loss(QUERIES[:2], PASSAGES, torch.tensor([0, 2]), temperature=1.0)
    assert loss.item() == pytest.approx(hand_loss(scores, [0, 2]), rel=1e-6)


def mask_of(judged: list[set[str]], passage_ids: list[str], targets: torch.Tensor) -> torch.Tensor:
    """The mask from ids, through the int keys the collator sends between ranks (padded with -1)."""
    widest = max(len(ids) for ids in judged)
    keys = [[passage_key(i) for i in sorted(ids)] + [-1] * (widest - len(ids)) for ids in judged]
    return judged_positive_mask(torch.tensor(keys), torch.tensor([passage_key(i) for i in passage_ids]), targets)


def test_shared_positive_is_masked_for_the_other_query():
    # queries 0 and 1 are both judged relevant to document "d1", which each brings as its positive
    passage_ids = ["d1", "d1", "d7"]
    targets = torch.tensor([0, 1, 2])
    mask = mask_of([{"d1"}, {"d1"}, {"d7"}], passage_ids, targets)
    assert mask.tolist() == [[False, True, False], [True, False, False], [False, False, False]]
    scores = [[PASSAGES[j][i].item() for j in range(3)] for i in range(3)]
    loss = contrastive_loss(QUERIES, PASSAGES, targets, temperature=1.0, mask=mask)
    assert loss.item() == pytest.approx(hand_loss(scores, [0, 1, 2], {(0, 1), (1, 0)}), rel=1e-6)
    # the masked column no longer pushes query 0 away from its own relevant document
    moved = PASSAGES.clone()
    moved[1, 0] = 5.0
    assert contrastive_loss(QUERIES, moved, targets, 1.0, mask).item() == pytest.approx(loss.item(), rel=1e-6)
    assert contrastive_loss(QUERIES, moved, targets, 1.0).item() > loss.item() + 1


def test_only_the_querys_own_judged_positives_are_masked():
    """Another query's hard negative is masked for q0 only if q0 judged it relevant."""
    passage_ids = ["d1", "d5", "d2", "d9"]  # q0: d1 (+) d5 (neg); q1: d2 (+) d9 (neg)
    mask = mask_of([{"d1", "d9"}, {"d2"}], passage_ids, torch.tensor([0, 2]))
    assert mask.tolist() == [[False, False, False, True], [False, False, False, False]]


def test_default_temperature_depends_on_normalisation():
    assert default_temperature(True) == 0.05
    assert default_temperature(False) == 1.0
