"""A diverging run stops at its first non-finite loss, and non-finite weights are never checkpointed nor
published."""
from __future__ import annotations

import math

import pytest
from safetensors.torch import load_file, save_file

from retriever.errors import RetrieverError
from retriever.training import train
from training.test_run_guards import as_if_killed_before_finishing, config


def test_a_diverging_run_stops_at_the_first_non_finite_loss(tmp_path, small_bert, train_beir):
    """An absurd but finite learning rate makes the weights infinite after step 1 and step 2's loss NaN; that loss
    is logged as it is (not as 0.0), stops the run with one line, and no model folder is written."""
    output = tmp_path / "model"
    with pytest.raises(RetrieverError, match=r"^training diverged at step 2: its loss is nan; .* another --output$"):
        train(config(output, train_beir, small_bert, learning_rate=1e300, max_steps=3, save_steps=None))
    assert not (output / "config.json").exists()


def test_non_finite_weights_are_never_checkpointed_nor_published(tmp_path, small_bert, train_beir):
    output = tmp_path / "model"
    with pytest.raises(RetrieverError, match="diverged at step 1: its weights are not finite"):
        train(config(output, train_beir, small_bert, learning_rate=1e300, max_steps=3, save_steps=1))
    assert not list((output / "checkpoints").glob("checkpoint-*/run.json"))
    with pytest.raises(RetrieverError, match="diverged at step 1: its weights are not finite"):
        train(config(tmp_path / "one-step", train_beir, small_bert, learning_rate=1e300, max_steps=1,
                     save_steps=None))
    assert not (tmp_path / "one-step" / "config.json").exists()


def test_a_checkpoint_with_non_finite_weights_is_never_published(tmp_path, small_bert, train_beir, monkeypatch):
    """As an older version could mark one: the last step's checkpoint holds a NaN; finishing from it is refused."""
    output = tmp_path / "model"
    settings = config(output, train_beir, small_bert, max_steps=2, save_steps=1)
    with monkeypatch.context() as patch:
        as_if_killed_before_finishing(patch)
        train(settings)
    weights_file = output / "checkpoints" / "checkpoint-2" / "model.safetensors"
    weights = load_file(weights_file)
    next(iter(weights.values()))[0] = math.nan
    save_file(weights, weights_file)
    with pytest.raises(RetrieverError, match="diverged at step 2: its weights are not finite"):
        train(settings)
    assert not (output / "config.json").exists()
