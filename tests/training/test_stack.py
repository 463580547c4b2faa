"""The shared training stack's schedule: a run whose only step warm-up holds at learning rate 0 says so."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from safetensors.torch import load_file

from retriever.errors import RetrieverError
from retriever.training import TrainConfig, train
from retriever.training.trainer import TrainResult

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def one_step(output: Path, dataset: Path, model: Path, **overrides) -> TrainConfig:
    """8 training queries in one step of 32 (the default --queries-per-step) and one epoch: a single step."""
    return TrainConfig(**{**dict(output=str(output), dataset=str(dataset), model=str(model), batch_size=32,
                                 learning_rate=1e-3, device="cpu", dtype="fp32", progress=False,
                                 encoder={"passage_max_length": 32, "query_max_length": 16}), **overrides})


def changed(start: Path, trained: Path) -> bool:
    before, after = load_file(start / "model.safetensors"), load_file(trained / "model.safetensors")
    return any(not before[name].equal(after[name]) for name in before)


def test_a_one_step_run_that_warm_up_holds_at_learning_rate_0_is_warned_about(tmp_path, small_bert, train_beir,
                                                                              capsys):
    """`train --dataset D` on 32 or fewer queries (or `--max-steps 1`) with the default --warmup-ratio 0.1 wrote the
    start model back unchanged, exit 0 and no word: warm-up runs the first step at learning rate 0."""
    assert train(one_step(tmp_path / "warm", train_beir, small_bert)).steps == 1
    assert "warning: the run is 1 optimizer step and warm-up (--warmup-ratio 0.1" in capsys.readouterr().err
    assert not changed(small_bert, tmp_path / "warm")
    train(one_step(tmp_path / "cold", train_beir, small_bert, warmup_ratio=0.0))
    assert "warm-up" not in capsys.readouterr().err and changed(small_bert, tmp_path / "cold")


def test_rerunning_a_finished_one_step_run_says_one_step(tmp_path, small_bert, train_beir, capsys):
    """It said "this run already finished (1 steps); nothing to do", and not how to train it again (README neither)."""
    settings = one_step(tmp_path / "m", train_beir, small_bert, warmup_ratio=0.0)
    train(settings)
    capsys.readouterr()
    assert train(settings).steps == 1
    finished = tmp_path / "m" / "checkpoints" / "finished.json"
    assert (f"{tmp_path / 'm'}: this run already finished (1 step); nothing to do (to train it again, delete "
            f"{finished} or give another --output)") in capsys.readouterr().err
    finished.unlink()
    assert train(settings).steps == 1 and finished.is_file()  # trained again, as the line says



def test_a_max_steps_run_records_no_epochs_and_resumes_a_checkpoint_that_recorded_them(tmp_path, small_bert,
                                                                                      train_beir):
    """A `train --max-steps` folder's retriever.json (and checkpoints) recorded `epochs: 1`, train's default, of a run
    that passed over the data as often as its steps needed; a checkpoint written so still resumes."""
    from retriever.training.run_record import prior_run

    config = one_step(tmp_path / "m", train_beir, small_bert, max_steps=5).normalised()
    assert config.learning_settings()["epochs"] is None and config.learning_settings()["max_steps"] == 5
    assert one_step(tmp_path / "m", train_beir, small_bert).learning_settings()["epochs"] == 1
    checkpoint = tmp_path / "m" / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "run.json").write_text(json.dumps({**config.learning_settings(), "epochs": 1,
                                                     **config.fingerprints}))
    assert prior_run(tmp_path / "m", config.learning_settings(), config.fingerprints).resume == checkpoint

@pytest.mark.parametrize("setting", ["max_steps", "epochs", "batch_size", "train_group_size",
                                     "grad_cache_chunk_size", "dev_max_docs"])
def test_a_count_of_0_from_the_library_is_refused_not_read_as_unset(tmp_path, small_bert, train_beir, setting):
    """TrainConfig(max_steps=0) trained whole epochs, epochs=0 one epoch (the log said '0 epochs'), batch_size=0 was
    refused as a step of one query: 0 passed the check as unset. --save-steps 0 (every epoch) stays allowed."""
    config = one_step(tmp_path / "m", train_beir, small_bert, **{setting: 0})
    with pytest.raises(RetrieverError, match=f"^--{setting.replace('_', '-')} must be a whole number of at least 1, "
                                             "not 0$"):
        config.check()
    assert not (tmp_path / "m").exists()
    one_step(tmp_path / "m", train_beir, small_bert, save_steps=0).check()


@pytest.mark.parametrize("setting, said", [("output", "--output is empty"), ("model", "the model name is empty")])
def test_an_empty_output_or_model_from_the_library_is_refused_not_read_as_the_current_folder(
        tmp_path, small_bert, train_beir, monkeypatch, setting, said):
    """Path("") is the current folder: TrainConfig(output="") trained into it, model="" loaded whatever was there."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    config = one_step(tmp_path / "m", train_beir, small_bert)
    with pytest.raises(RetrieverError, match=said):
        train(dataclasses.replace(config, **{setting: ""}))
    assert not any(here.iterdir()) and not (tmp_path / "m").exists()


@pytest.mark.parametrize("setting", ["output", "dataset", "model"])
def test_a_path_under_the_home_of_no_such_user_is_one_line_from_the_library(tmp_path, small_bert, train_beir, setting):
    """The training paths were expanded by pathlib alone, whose bare RuntimeError for '~nosuchuser' was a traceback."""
    config = one_step(tmp_path / "m", train_beir, small_bert)
    with pytest.raises(RetrieverError, match="no home folder for ~nosuchuser_zz; write ./~nosuchuser_zz/x"):
        train(dataclasses.replace(config, **{setting: "~nosuchuser_zz/x"}))
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("setting, value, said", [
    ("batch_size", "4", "--batch-size must be a whole number of at least 1, not '4'"),
    ("epochs", 1.5, "--epochs must be a whole number of at least 1, not 1.5"),
    ("max_steps", True, "--max-steps must be a whole number of at least 1, not True"),
    ("seed", "1", "--seed must be a whole number from 0 to 4294967295 (the seeds numpy takes), not '1'"),
    ("learning_rate", "1e-3", "--learning-rate must be a number, not '1e-3'"),
    ("temperature", "0.1", "--temperature must be a number, not '0.1'"),
    ("negatives", 5, "--negatives must be a path"),
    ("dev_batch_size", 0, "dev_batch_size must be a whole number of at least 1, not 0"),  # after loading, a folder made
    ("report_to", "wandb", "report_to must be one of none, tensorboard, not 'wandb'"),  # it reported to TensorBoard
    ("progress", "no", "progress must be True or False, not str 'no'"),  # a truthy string: bars drawn
    ("cross_device_negatives", "no", "cross_device_negatives must be True or False, not str 'no'"),  # on
])
def test_a_setting_of_the_wrong_kind_from_the_library_is_refused_in_one_line(tmp_path, small_bert, train_beir, setting,
                                                                             value, said):
    """A string count or rate was a TypeError traceback, an int path pathlib's; epochs=1.5 and max_steps=True ran."""
    config = dataclasses.replace(one_step(tmp_path / "m", train_beir, small_bert), **{setting: value})
    with pytest.raises(RetrieverError, match=f"^{re.escape(said)}"):
        config.check()
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize("setting, value, said", [
    ("weight_decay", -0.5, "--weight-decay must be at least 0 (0: no decay), not -0.5"),
    ("max_grad_norm", -1.0, "--max-grad-norm must be at least 0 (0: no clipping), not -1.0")])
def test_a_negative_decay_or_clipping_norm_from_the_library_is_refused(tmp_path, command, setting, value, said):
    """The CLI refused them, the library trained: AdamW with weight_decay -0.5 grew every weight each step, and a
    negative norm was read as no clipping, both without a word."""
    from retriever.pretraining import PretrainConfig

    paths = dict(output=str(tmp_path / "out"), model=str(tmp_path / "model"))
    config = (TrainConfig(**paths, dataset=str(tmp_path)) if command == "train" else
              PretrainConfig(**paths, corpus=str(tmp_path)))
    with pytest.raises(RetrieverError, match=f"^{re.escape(said)}$"):
        dataclasses.replace(config, **{setting: value}).check()
    assert not (tmp_path / "out").exists()


def test_rerunning_a_finished_run_whose_model_files_are_gone_says_so(tmp_path, tiny_beir, tiny_model_dir):
    """A finished run whose model.safetensors (or config.json) was deleted said "already finished; nothing to do",
    exit 0, with no model in OUTPUT; rerunning can never bring it back unless finished.json goes."""
    config = one_step(tmp_path / "m", tiny_beir, tiny_model_dir)
    normalised = config.normalised()
    finished = tmp_path / "m" / "checkpoints" / "finished.json"
    finished.parent.mkdir(parents=True)
    finished.write_text(json.dumps({"settings": {**normalised.learning_settings(), **normalised.fingerprints},
                                    "result": {"steps": 1, "examples": 4, "seconds": 1.0}}))
    (tmp_path / "m" / "config.json").write_text("{}")
    with pytest.raises(RetrieverError, match=rf"^{tmp_path / 'm'}: this run finished, but its model files are gone "
                                             rf"\(no model\.safetensors\); delete {finished} to train it again"):
        config.prepare(TrainResult)
    (tmp_path / "m" / "model.safetensors").write_bytes(b"")
    assert config.prepare(TrainResult)[1].finished.already_finished


@pytest.mark.parametrize("run, saved", [(dict(max_steps=6, save_steps=4), [4, 6]),
                                        (dict(max_steps=6, save_steps=0), [2, 4, 6]),
                                        (dict(epochs=3, save_steps=4), [2, 4, 6])])
def test_a_max_steps_run_saves_every_save_steps_not_every_epoch(tmp_path, small_bert, train_beir, monkeypatch, run,
                                                                 saved):
    """`--max-steps` over a small data set wrote a checkpoint (weights and optimizer state) at every epoch's end,
    whatever --save-steps said: 2 steps an epoch here, 500 checkpoints in a 1000-step run. A run of --epochs (or
    --save-steps 0) still saves at each epoch's end."""
    from retriever.training.stack import StackTrainer

    steps = []
    original = StackTrainer._save_checkpoint
    monkeypatch.setattr(StackTrainer, "_save_checkpoint",
                        lambda self, *a: (steps.append(self.state.global_step), original(self, *a))[1])
    train(one_step(tmp_path / "m", train_beir, small_bert, batch_size=4, warmup_ratio=0.0, **run))
    assert steps == saved
