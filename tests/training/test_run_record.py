"""What a rerun of `train` or `pretrain` accepts as the same run (`retriever/training/run_record.py`)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from retriever.errors import RetrieverError
from retriever.training.run_record import CHECKPOINTS, FINISHED_FILE, INPUTS_KEY, MODEL_FILES_KEY, RUN_FILE, prior_run

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
