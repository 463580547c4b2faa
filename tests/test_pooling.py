from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from retriever.errors import RetrieverError
from retriever.pooling import ClsPooling, MeanPooling, PoolerPooling, get_pooling


def outputs():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    return SimpleNamespace(last_hidden_state=hidden, pooler_output=torch.tensor([[0.5, -0.5]]))


MASK = torch.tensor([[1, 1, 0]])


def test_cls_takes_first_token():
    assert torch.equal(ClsPooling()(outputs(), MASK), torch.tensor([[1.0, 2.0]]))


def test_mean_ignores_padding():
    assert torch.equal(MeanPooling()(outputs(), MASK), torch.tensor([[2.0, 3.0]]))


def test_pooler_uses_pooler_output_and_refuses_without_one():
    assert torch.equal(PoolerPooling()(outputs(), MASK), torch.tensor([[0.5, -0.5]]))
    no_pooler = SimpleNamespace(last_hidden_state=outputs().last_hidden_state, pooler_output=None)
    with pytest.raises(RetrieverError, match="has none"):
        PoolerPooling()(no_pooler, MASK)


def test_get_pooling_by_name():
    assert get_pooling("mean").name == "mean"
    with pytest.raises(RetrieverError, match="unknown pooling 'max'"):
        get_pooling("max")
