"""How examples fill steps under torchrun: a short last step is left out, too few examples are refused, and a
resume laid out in other steps is refused (the process count is faked through torchrun's WORLD_SIZE)."""
from __future__ import annotations

import json

import pytest

from retriever.errors import RetrieverError
from retriever.training.layout import check_resume_layout, check_step_layout, steps_per_epoch


@pytest.fixture()
def two_processes(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")


def test_one_process_keeps_the_short_last_step(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    said = []
    assert not check_step_layout(7, 4, "training query", said.append) and not said
    assert not check_step_layout(3, 8, "training query", said.append)
    assert steps_per_epoch(7, 4) == 2 and steps_per_epoch(3, 8) == 1


def test_under_torchrun_a_short_last_step_is_left_out_and_said(two_processes):
    said = []
    assert check_step_layout(7, 4, "training query", said.append)
    assert len(said) == 1 and "hold 3 of its 4 training queries" in said[0] and "left out" in said[0]
    assert steps_per_epoch(7, 4) == 1 and steps_per_epoch(8, 4) == 2
    assert not check_step_layout(8, 4, "block", said.append) and len(said) == 1


def test_under_torchrun_fewer_examples_than_a_step_are_refused(two_processes):
    with pytest.raises(RetrieverError, match=r"^3 training queries do not fill one step of 8 over 2 processes .*"
                                             r"lower --queries-per-step"):
        check_step_layout(3, 8, "training query", print)


def test_one_example_short_of_a_step_is_counted_in_the_singular(two_processes):
    """It said "1 training queries do not fill one step"; a plural not the noun's + s is passed along."""
    with pytest.raises(RetrieverError, match=r"^1 training query does not fill one step of 8 over 2 processes \(each "
                                             r"process would train on repeats of it\)"):
        check_step_layout(1, 8, "training query", print)
    with pytest.raises(RetrieverError, match=r"^3 documents with two spans do not fill one step of 8"):
        check_step_layout(3, 8, "document with two spans", print, "documents with two spans")


def test_a_resume_laid_out_in_other_steps_is_refused(tmp_path, two_processes):
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"max_steps": 4, "global_step": 2}))
    check_resume_layout(None, 2)
    check_resume_layout(checkpoint, 4)
    with pytest.raises(RetrieverError, match=r"checkpoint-2: the run was laid out in 4 steps and this one, over 2 "
                                             r"processes, in 2; resume with the number of processes"):
        check_resume_layout(checkpoint, 2)


def test_a_resume_planned_otherwise_under_the_same_process_count_does_not_blame_the_count(tmp_path, monkeypatch):
    """A pretrain run recorded with --epochs 1 --max-steps 100 stopped at the epoch's end (6 steps) before
    `planned_steps` took HF's rule; resumed, it plans 100 under the same single process, and the refusal told
    the user to resume with the number of processes it was started with, which they already had."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"max_steps": 6, "global_step": 2}))
    (checkpoint / "rng_state.pth").write_bytes(b"")
    with pytest.raises(RetrieverError) as refused:
        check_resume_layout(checkpoint, 100)
    assert "number of processes" not in str(refused.value)
    assert "in 6 steps" in str(refused.value) and "whichever came first" in str(refused.value)


def test_a_resume_of_as_many_steps_laid_out_in_other_epochs_is_refused(tmp_path, monkeypatch):
    """A --max-steps run plans as many steps under any process count, but under two processes 8 queries in steps of
    6 make 1 step an epoch (the short one left out) and under one process 2: the checkpoint at step 1, an epoch's
    end, resumed in one process, was taken for the middle of epoch 0 and trained a mix of both orders."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"max_steps": 20, "global_step": 1, "epoch": 1.0}))
    for rank in (0, 1):
        (checkpoint / f"rng_state_{rank}.pth").write_bytes(b"")
    check_resume_layout(checkpoint, 20, 1)
    with pytest.raises(RetrieverError, match=r"checkpoint-1: the run was laid out in 1 steps an epoch and this one, "
                                             r"over 1 process, in 2; resume with the number of processes"):
        check_resume_layout(checkpoint, 20, 2)
    checkpoint = checkpoint.rename(tmp_path / "checkpoint-4")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"max_steps": 20, "global_step": 4, "epoch": 4 / 3}))
    check_resume_layout(checkpoint, 20, 3)  # mid-epoch: 4 steps are 1 1/3 epochs of 3
