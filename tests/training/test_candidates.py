"""A run whose every step scores each query against one passage (loss 0, nothing learnt) is refused."""
from __future__ import annotations

import dataclasses

import pytest

from fixtures_system import as_torchrun_process
from retriever.errors import RetrieverError
from retriever.training.candidates import check_candidates
from retriever.training.examples import Passage, TrainExample
from training.test_run_guards import config


def single_example(negatives: int) -> list[TrainExample]:
    return [TrainExample("q", "query", (Passage("p", "positive"),),
                         tuple(Passage(f"n{i}", "negative") for i in range(negatives)))]


def test_a_step_with_a_single_candidate_is_refused(tmp_path, train_beir, monkeypatch):
    """One query and one passage per step: the softmax over one candidate is 1, every loss 0, nothing learnt."""
    settings = config(tmp_path / "model", train_beir, tmp_path / "any-model", batch_size=1)
    with pytest.raises(RetrieverError, match="one query and one passage, its only candidate, so the loss is 0"):
        settings.check()
    dataclasses.replace(settings, train_group_size=2).check()  # hard negatives may give a second candidate
    check_candidates(dataclasses.replace(settings, train_group_size=2), single_example(negatives=1))
    for group_size, negatives in ((2, 0), (1, 3)):  # one example: no in-batch negative, and no hard one used
        with pytest.raises(RetrieverError, match="one query and one passage"):
            check_candidates(dataclasses.replace(settings, batch_size=4, train_group_size=group_size),
                             single_example(negatives))
    as_torchrun_process(monkeypatch, 2)
    dataclasses.replace(settings, batch_size=2).check()  # the global batch is shared across the processes
    with pytest.raises(RetrieverError, match="one passage per process"):
        dataclasses.replace(settings, batch_size=2, cross_device_negatives=False).check()
