"""A pre-training output folder (probe round 6): it gets a model card as `train` folders do, and a second run of
the same output while one runs is refused instead of resuming from, and rotating away, the other's checkpoints."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from pretraining.configs import short_config
from retriever.cli import main
from retriever.pretraining import pretrain

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_pretrained_folder_has_a_model_card(tiny_beir, tiny_model_dir, tmp_path):
    """`pretrain` folders had no README.md, while `train` folders get one."""
    output = tmp_path / "out"
    pretrain(short_config(tiny_beir, output, tiny_model_dir, cocondenser=True, max_length=24), log=print)
    card = (output / "README.md").read_text(encoding="utf-8")
    assert f"- Base model: `{tiny_model_dir.name}`\n" in card
    assert "- Training data: corpus `tiny-beir`\n" in card
    assert "- Objective: coCondenser: 2 head layers fed the last layer's CLS and the tokens of layer 2" in card
    assert "- Steps: 2\n" in card and "max_length 24" in card and "mlm_probability 0.15" in card
    assert "retriever train --dataset DATASET --split train --model MODEL_FOLDER" in card
    assert "`model.pt`" in card and str(tmp_path) not in card
    mlm = tmp_path / "mlm"
    pretrain(short_config(tiny_beir, mlm, tiny_model_dir, objective="mlm"), log=print)
    card = (mlm / "README.md").read_text(encoding="utf-8")
    assert "- Objective: MLM only (no Condenser head)" in card and "There is no Condenser head" in card


def test_a_second_run_of_the_same_output_is_refused_while_the_first_runs(tiny_beir, tiny_model_dir, tmp_path):
    """The second resumed from the first's live checkpoint and died when the first rotated it away
    (`trainer_state.json: file not found`, or a torch `Parent directory ... does not exist` traceback).

    The first run is a real process (the lock is the kernel's, held per process); the second is this test's own
    process, which has torch imported already: as a second subprocess it spent most of the test importing it
    while the first trained beside it, which on a loaded machine crossed the deadline."""
    output = tmp_path / "out"
    arguments = ["pretrain", str(tiny_beir), "--output", str(output), "--model", str(tiny_model_dir), "--max-steps",
                 "100000", "--save-steps", "1", "--sequences-per-step", "4", "--max-length", "16", "--device", "cpu",
                 "--dtype", "fp32", "--no-progress"]
    first = subprocess.Popen([sys.executable, "-m", "retriever", *arguments], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 180  # a hang guard: the first checkpoint comes once torch has loaded
        while not list((output / "checkpoints").glob("checkpoint-*/run.json")):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "no checkpoint appeared within 180 s"
            time.sleep(0.05)
        second = CliRunner().invoke(main, arguments)  # the same command
        assert second.exit_code == 1, (second.output, second.exception)
        assert f"another training run of it is running (pid {first.pid})" in second.stderr
        assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr, second.stderr
        assert first.poll() is None
    finally:
        first.kill()
        first.wait()
    assert not (output / "config.json").exists()


def test_paths_given_as_path_objects_run_as_their_strings(tiny_beir, tiny_model_dir, tmp_path):
    """PretrainConfig(model=Path(...)) died of `AttributeError: 'PosixPath' object has no attribute 'strip'` in the
    model-name check, while TrainConfig took Paths; a rerun with the same paths as strings finds the run finished."""
    output = tmp_path / "out"
    as_strings = short_config(tiny_beir, output, tiny_model_dir, max_steps=1)
    first = pretrain(dataclasses.replace(as_strings, corpus=tiny_beir, output=output, model=tiny_model_dir), log=print)
    assert first.steps == 1 and (output / "config.json").is_file()
    assert pretrain(short_config(tiny_beir, output, tiny_model_dir, max_steps=1), log=print).already_finished
