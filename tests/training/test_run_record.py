"""What a rerun of `train` or `pretrain` accepts as the same run (`retriever/training/run_record.py`)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from retriever.errors import RetrieverError
from retriever.training.run_record import (CHECKPOINTS, FINISHED_FILE, INPUTS_KEY, MODEL_FILES_KEY, RUN_FILE,
                                          finished_result, prior_run)

FINGERPRINTS = {INPUTS_KEY: "inputs", MODEL_FILES_KEY: "model files"}


def recorded(output: Path, settings: dict, finished: bool) -> None:
    """A run folder as a run with ``settings`` leaves it: finished, or killed after its first checkpoint."""
    folder = output / CHECKPOINTS
    if finished:
        folder.mkdir(parents=True)
        (folder / FINISHED_FILE).write_text(json.dumps({"settings": settings, "result": {"steps": 2}}))
    else:
        (folder / "checkpoint-1").mkdir(parents=True)
        (folder / "checkpoint-1" / RUN_FILE).write_text(json.dumps(settings))


@pytest.mark.parametrize("finished", [True, False])
def test_a_run_recorded_with_epochs_and_max_steps_is_taken_up_by_max_steps_alone(tmp_path, finished):
    """Before --epochs and --max-steps were refused together, a run could record both (--max-steps overriding);
    the CLI now passes --epochs at its default beside --max-steps, and that rerun was refused as "other settings"
    (epochs 3 -> 1) while the old command line is a usage error: no command could resume or rerun the run."""
    old = {"epochs": 3, "max_steps": 2, "learning_rate": 1e-3}
    recorded(tmp_path / "run", old, finished)
    prior = prior_run(tmp_path / "run", {**old, "epochs": 1}, FINGERPRINTS)
    assert (prior.finished is not None) == finished and (prior.resume is not None) != finished


def test_epochs_still_tell_runs_apart_without_max_steps(tmp_path):
    recorded(tmp_path / "run", {"epochs": 3, "max_steps": None, "learning_rate": 1e-3}, finished=False)
    with pytest.raises(RetrieverError, match="epochs 3 -> 1"):
        prior_run(tmp_path / "run", {"epochs": 1, "max_steps": None, "learning_rate": 1e-3}, FINGERPRINTS)


@pytest.mark.parametrize("lost", ["model.safetensors", "trainer_state.json"])
def test_a_checkpoint_missing_its_weights_or_state_says_to_resume_from_the_one_before(tmp_path, lost):
    """A killed run's newest checkpoint lacking its weights said to delete every checkpoint (or, its trainer state,
    to delete it "to start over"): the run resumes from the complete checkpoint before it, as other lost files say."""
    import torch

    from retriever.training.checkpoint_state import final_state, load_weights
    from retriever.training.layout import check_resume_layout
    folder = tmp_path / CHECKPOINTS
    for step in (2, 4):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
        (folder / f"checkpoint-{step}" / RUN_FILE).write_text("{}")
    newest = folder / "checkpoint-4"
    calls = {"model.safetensors": [lambda: load_weights(torch.nn.Linear(1, 1), newest)],
             "trainer_state.json": [lambda: final_state(newest), lambda: check_resume_layout(newest, 8)]}
    for call in calls[lost]:
        with pytest.raises(RetrieverError, match=f"{lost}.*; delete {newest} to resume from checkpoint-2$"):
            call()
    (folder / "checkpoint-2" / RUN_FILE).unlink()
    with pytest.raises(RetrieverError, match=f"; delete {folder} to start over$"):
        calls[lost][0]()


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize("result", [None, [], {}, {"steps": "2"}, {"steps": 2}])
def test_a_finished_runs_damaged_result_is_one_line(tmp_path, command, result):
    """A finished.json whose settings match but whose result is missing, not a mapping, or lacks what a result holds
    (another version's record, an edit) was a KeyError or TypeError traceback on every rerun."""
    from retriever.pretraining.config import PretrainResult
    from retriever.training.trainer import TrainResult

    settings = {"epochs": 1, "max_steps": None}
    recorded(tmp_path / "run", settings, finished=True)
    path = tmp_path / "run" / CHECKPOINTS / FINISHED_FILE
    path.write_text(json.dumps({"settings": settings, **({} if result is None else {"result": result})}))
    prior = prior_run(tmp_path / "run", settings, FINGERPRINTS)
    kind = TrainResult if command == "train" else PretrainResult
    with pytest.raises(RetrieverError, match=f"^{path}: not the result of a finished run .*; delete it to run "
                                             f"{tmp_path / 'run'} again$"):
        finished_result(prior.finished, kind, tmp_path / "run")


def test_a_result_recorded_by_another_version_keeps_what_this_one_knows(tmp_path):
    """A key this version's result lacks (renamed or dropped since) is left out, not a TypeError traceback."""
    from retriever.training.trainer import TrainResult

    settings = {"epochs": 1, "max_steps": None}
    recorded(tmp_path / "run", settings, finished=True)
    path = tmp_path / "run" / CHECKPOINTS / FINISHED_FILE
    result = {"steps": 2, "examples": 4, "seconds": 1.5, "a_key_of_another_version": 1}
    path.write_text(json.dumps({"settings": settings, "result": result}))
    finished = finished_result(prior_run(tmp_path / "run", settings, FINGERPRINTS).finished, TrainResult,
                               tmp_path / "run")
    assert (finished.steps, finished.examples, finished.already_finished) == (2, 4, True)
    assert finished.output == tmp_path / "run"


@pytest.mark.parametrize("finished", [True, False])
def test_no_clipping_recorded_as_0_or_none_is_the_same_run(tmp_path, finished):
    """The library records max_grad_norm=0.0 where the CLI's --max-grad-norm 0 passes None, both no clipping: a
    library run rerun from the CLI was refused as "other settings (max_grad_norm 0.0 -> None)"."""
    recorded(tmp_path / "run", {"epochs": 1, "max_grad_norm": 0.0}, finished)
    prior = prior_run(tmp_path / "run", {"epochs": 1, "max_grad_norm": None}, FINGERPRINTS)
    assert (prior.finished if finished else prior.resume) is not None
    with pytest.raises(RetrieverError, match=r"other settings \(max_grad_norm (0\.0|None) -> 1\.0\)"):
        prior_run(tmp_path / "run", {"epochs": 1, "max_grad_norm": 1.0}, FINGERPRINTS)
