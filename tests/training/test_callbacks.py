"""The training stack's own callbacks."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from retriever.training.callbacks import adopt_save_steps


@pytest.mark.parametrize("before, steps, said", [(500, 1, "checkpoints every 1 step from now on"),
                                                 (500, 5, "checkpoints every 5 steps from now on"),
                                                 (0, 1, "checkpoints every 1 step from now on")])
def test_a_resume_with_another_save_steps_says_the_new_interval_in_agreement(before, steps, said):
    """A resume changed to --save-steps 1 said "checkpoints every 1 steps"; one from --save-steps 0 (held as 1) to 1
    said nothing."""
    state, lines = SimpleNamespace(save_steps=before), []
    adopt_save_steps(state, SimpleNamespace(save_steps=steps, save_strategy="steps"), lines.append)
    assert lines == [f"--save-steps changed: {said}"] and state.save_steps == steps


def test_a_resume_that_keeps_its_save_steps_says_nothing(tmp_path, small_bert):
    """--save-steps 0 reaches the library as 0, not as 1: a resume of a run of 0 at 1, or of 1 at 0, was silent."""
    from retriever.training import TrainConfig

    for steps in (None, 0, 1, 5):
        arguments, _ = TrainConfig(output=str(tmp_path / "m"), model=str(small_bert), dataset=str(tmp_path),
                                   device="cpu", save_steps=steps).arguments(4, 1, 1)
        state, lines = SimpleNamespace(save_steps=arguments.save_steps), []
        adopt_save_steps(state, arguments, lines.append)
        assert arguments.save_steps == (steps or 0) and lines == []


def test_a_resume_at_save_steps_0_of_a_checkpoint_that_held_0_as_1_says_nothing():
    """--save-steps 0 reached the library as 1 in checkpoints written before it was passed as 0: resuming one with the
    same --save-steps 0 said "--save-steps changed: checkpoints only at each epoch's end", though nothing had."""
    state, lines = SimpleNamespace(save_steps=1), []
    adopt_save_steps(state, SimpleNamespace(save_steps=0, save_strategy="epoch"), lines.append)
    assert lines == [] and state.save_steps == 0


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


def test_examples_per_second_count_every_process_of_a_launch(monkeypatch):
    """Under torchrun each process holds per_device_train_batch_size examples of a step; the bar and the logs counted
    one process's share, so 2 processes showed half the run's rate (pretrain's tokens/s counted them all)."""
    from retriever.training import callbacks

    clock = iter([100.0, 110.0])
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: next(clock))
    progress = callbacks.StderrProgress(enabled=False)
    state = SimpleNamespace(is_world_process_zero=True, max_steps=20, global_step=0)
    progress.on_train_begin(None, state, None)
    state.global_step, logs = 5, {"loss": 1.0, "learning_rate": 1e-4}
    progress.on_log(SimpleNamespace(per_device_train_batch_size=4, world_size=2), state, None, logs=logs)
    assert logs["examples_per_second"] == 5 * 4 * 2 / 10
