"""The training stack's own callbacks."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from retriever.training.callbacks import adopt_save_steps


@pytest.mark.parametrize("steps, said", [(1, "checkpoints every 1 step from now on"),
                                         (5, "checkpoints every 5 steps from now on")])
def test_a_resume_with_another_save_steps_says_the_new_interval_in_agreement(steps, said):
    """A resume changed to --save-steps 1 said "checkpoints every 1 steps"."""
    state, lines = SimpleNamespace(save_steps=500), []
    adopt_save_steps(state, SimpleNamespace(save_steps=steps, save_strategy="steps"), lines.append)
    assert lines == [f"--save-steps changed: {said}"] and state.save_steps == steps


@pytest.mark.parametrize("command", ["train", "pretrain"])
def test_report_to_tensorboard_without_the_package_is_refused_before_loading(tmp_path, monkeypatch, command):
    """It was refused when the trainer was built: after the model and data had loaded, OUTPUT/checkpoints made."""
    from retriever.errors import RetrieverError
    from retriever.pretraining import PretrainConfig
    from retriever.training import TrainConfig

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    paths = dict(output=str(tmp_path / "out"), model=str(tmp_path / "model"), report_to="tensorboard")
    config = TrainConfig(**paths, dataset=str(tmp_path)) if command == "train" else PretrainConfig(**paths,
                                                                                                   corpus=str(tmp_path))
    with pytest.raises(RetrieverError, match="^--report-to tensorboard needs the tensorboard package"):
        config.check()
    assert not (tmp_path / "out").exists()
