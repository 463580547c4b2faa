"""Rows batched by token count, longest first."""
from __future__ import annotations

from retriever.token_batches import length_batches


def test_batches_hold_one_token_count_longest_first_unless_lengths_are_mixed():
    lengths = [3, 7, 3, 7, 7, 5, 3]
    assert length_batches(lengths, 2) == [[1, 3], [4], [5], [0, 2], [6]]
    assert length_batches(lengths, 2, mix_lengths=True) == [[1, 3], [4, 5], [0, 2], [6]]
    assert length_batches([], 4) == []
