"""`retriever pretrain`: documented flags, and a killed run that resumes when rerun."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import click
import pytest
from click.testing import CliRunner

from fixtures_processes import warmed_process
from retriever.cli.pretrain import pretrain_command
from retriever.errors import RetrieverError
from retriever.pretraining import PretrainConfig, pretrain

SPEC_FLAGS = ["--model", "--output", "--n-head-layers", "--skip-from", "--cocondenser", "--temperature",
              "--max-length", "--mlm-probability", "--sequences-per-step", "--epochs", "--max-steps", "--learning-rate",
              "--warmup-ratio", "--weight-decay", "--max-grad-norm", "--save-steps", "--keep-checkpoints", "--seed",
              "--device", "--dtype", "--format", "--id-field", "--text-field", "--title-field"]
RUN_COMMAND = "from retriever.cli.pretrain import pretrain_command; pretrain_command()"


def test_help_documents_every_flag_with_its_default():
    result = CliRunner().invoke(pretrain_command, ["--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    declared = [option for param in pretrain_command.params if isinstance(param, click.Option)
                for option in param.opts if option not in getattr(param, "old_names", ())]
    for flag in set(SPEC_FLAGS) | set(declared):
        assert re.search(rf"{flag}\b", result.output), flag
    help_text = " ".join(result.output.split())
    for default in ["[default: 128;", "[default: 0.15;", "[default: 0.0001;", "[default: 500;", "[default: 42; 0<=x<=4294967295]",
                    "[default: bert-base-uncased]", "[default: 0.1;", "[default: 32;", "[default: 1.0;", "[default: auto]",
                    "num_hidden_layers // 2", "code default of 2"]:
        assert default in help_text, default
    assert pretrain_command.name == "pretrain"


def test_killed_run_resumes_from_its_last_checkpoint(tmp_path, tiny_model_dir, tiny_beir):
    output = tmp_path / "out"
    command = [sys.executable, "-c", RUN_COMMAND, str(tiny_beir), "--output", str(output), "--model",
               str(tiny_model_dir), "--max-steps", "60", "--save-steps", "2", "--sequences-per-step", "4",
               "--max-length", "16", "--device", "cpu", "--dtype", "fp32", "--no-progress", "--json"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
    # the rerun's process, held until the first is killed, imports while the first one runs
    second = warmed_process(RUN_COMMAND, command[3:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=environment)
    checkpoints = output / "checkpoints"
    try:
        deadline = time.monotonic() + 60
        while not list(checkpoints.glob("checkpoint-*/run.json")):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "no checkpoint appeared within 60 s"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait()
        steps = sorted(int(path.parent.name.split("-")[1]) for path in checkpoints.glob("checkpoint-*/run.json"))
        assert steps and steps[-1] < 60 and not (output / "model.pt").exists()
    except BaseException:
        second.kill()
        second.wait()
        raise

    stdout, stderr = second.communicate("go\n", timeout=120)
    assert second.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["resumed_from_step"] == steps[-1] and summary["steps"] == 60
    assert f"resuming from {checkpoints / f'checkpoint-{steps[-1]}'} (step {steps[-1]})" in stderr
    assert (output / "model.pt").is_file() and (output / "config.json").is_file()
    assert sorted(path.name for path in checkpoints.iterdir()) == ["finished.json"]


def test_non_finite_numbers_are_refused_at_parse_time(tmp_path, tiny_beir):
    """click's FloatRange lets nan (and inf, without an upper bound) through; either trained a NaN model."""
    for flag, value in [("--learning-rate", "inf"), ("--learning-rate", "nan"), ("--temperature", "nan"),
                        ("--backbone-lr-scale", "nan"), ("--mlm-probability", "nan"), ("--weight-decay", "nan")]:
        result = CliRunner().invoke(pretrain_command, [str(tiny_beir), "--output", str(tmp_path / "out"), flag, value])
        assert result.exit_code == 2, (flag, value, result.output)
        assert f"Invalid value for '{flag}': '{value}' is not a finite number." in result.output
    assert not (tmp_path / "out").exists()


def test_head_layer_bound_is_in_the_help_and_refused_as_usage():
    """The bound of 12 head layers was only in the README: `--help` did not give it, and 13 got past click."""
    help_text = " ".join(CliRunner().invoke(pretrain_command, ["--help"], terminal_width=200).output.split())
    assert "1 to 12" in help_text
    result = CliRunner().invoke(pretrain_command, ["corpus", "-o", "out", "--n-head-layers", "13"])
    assert result.exit_code == 2 and "--n-head-layers must be a whole number from 1 to 12 (" in result.output


@pytest.mark.parametrize("processes, sequences, use", [("1", "5", "use 4 or 6"), ("2", "5", "use 8"),
                                                     ("2", "10", "use 8 or 12")])
def test_an_odd_cocondenser_step_is_refused_before_loading(tmp_path, tiny_beir, monkeypatch, processes,
                                                            sequences, use):
    """`--cocondenser --sequences-per-step 5` once trained steps of 4 sequences (2 passages x 2 spans); refused since,
    it exited 1 like a failed run, naming no value that fits. A bad flag is a usage error (exit 2, --help pointer),
    before anything is loaded, by the process count torchrun gives; the library raises the same line."""
    from retriever.cli import main

    monkeypatch.setenv("WORLD_SIZE", processes)
    arguments = [str(tiny_beir), "--output", str(tmp_path / "out"), "--cocondenser", "--sequences-per-step", sequences,
                 "--model", "no-such-model"]
    result = CliRunner().invoke(main, ["pretrain", *arguments])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: --sequences-per-step {sequences} does not fit --cocondenser: it must be")
    assert use in result.output and result.output.rstrip().endswith("pretrain --help`)"), result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    library = PretrainConfig(corpus=str(tiny_beir), output=str(tmp_path / "out"), model="no-such-model",
                             cocondenser=True, batch_size=int(sequences))
    with pytest.raises(RetrieverError) as refused:
        pretrain(library)
    assert f"error: {refused.value} (see" in result.output


def test_the_default_start_is_a_bert_pretrain_does_not_warn_against():
    """The default was minilm, on which `pretrain` itself warns that pre-training lowers fine-tuned quality."""
    from retriever.pretraining import PretrainConfig
    from retriever.pretraining.trainer import contrastive_start_warning

    default = next(p.default for p in pretrain_command.params if p.name == "model")
    assert default == PretrainConfig(corpus="c", output="o").model == "bert-base-uncased"
    assert contrastive_start_warning(default) is None and contrastive_start_warning("minilm") is not None


def test_epochs_with_max_steps_is_refused_before_any_work(tmp_path):
    """--max-steps sets the run's length in place of --epochs (HF's rule, as `train` has it), so giving both would
    leave --epochs unused: refused, as `train` refuses it, where pretrain used to take whichever ended first."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a"}\n', encoding="utf-8")
    result = CliRunner().invoke(pretrain_command, [str(corpus), "--output", str(tmp_path / "out"), "--model",
                                                   str(tmp_path / "missing"), "--epochs", "2", "--max-steps", "5"])
    assert result.exit_code == 2, result.output
    assert "--epochs" in result.output and "--max-steps" in result.output and "one of them" in result.output
    assert not (tmp_path / "out").exists()


def test_a_start_model_offline_is_not_answered_with_minilm(tmp_path, monkeypatch):
    """Offline, the default bert-base-uncased was refused with 'or use --model minilm for the shipped weights', the
    start pretrain's help and README advise against (it lowers fine-tuned quality); refused as the flags are read."""
    from huggingface_hub import constants

    from retriever.cli import main
    from retriever.model_names import hub_json_files

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    hub_json_files.cache_clear()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a"}\n', encoding="utf-8")
    try:
        result = CliRunner().invoke(main, ["pretrain", str(corpus), "--output", str(tmp_path / "out")])
    finally:
        hub_json_files.cache_clear()
    assert result.exit_code == 1 and "'bert-base-uncased' is neither a local folder nor reachable" in result.output
    assert "--model DIR" in result.output and "minilm" not in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_contradicting_flags_are_usage_errors(tmp_path, tiny_beir):
    """The README calls a bad flag combination a usage error (exit 2, the --help pointer); these two exited 1 with
    the library's line, as PretrainConfig.check refused them."""
    from retriever.cli import main

    for flags, message in ((["--objective", "mlm", "--n-head-layers", "2"], "mlm has no head (no --n-head-layers"),
                           (["--temperature", "0.5"], "--temperature 0.5 is the --cocondenser span loss's")):
        result = CliRunner().invoke(main, ["pretrain", str(tiny_beir), "--output", str(tmp_path / "out"), "--model",
                                           "no-such-model", *flags])
        assert result.exit_code == 2 and result.output.startswith("error: --"), result.output
        assert message in result.output and result.output.rstrip().endswith("pretrain --help`)"), result.output
        assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_step_that_does_not_split_over_the_processes_is_a_usage_error(tmp_path, tiny_beir, monkeypatch):
    """`--sequences-per-step 3` under two torchrun processes was refused only once the model and corpus had loaded,
    with exit 1 as if a run had failed."""
    from retriever.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    result = CliRunner().invoke(main, ["pretrain", str(tiny_beir), "--output", str(tmp_path / "out"), "--model",
                                       "no-such-model", "--sequences-per-step", "3"])
    assert result.exit_code == 2 and result.output.startswith("error: --sequences-per-step 3 does not split over 2 "
                                                              "processes: it must be a multiple of 2; use 2 or 4 (see")
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_save_steps_help_says_checkpoints_come_at_each_epochs_end():
    """The help said '0 = only at the end', but a checkpoint is written at each epoch's end too (as README says)."""
    help_text = " ".join(CliRunner().invoke(pretrain_command, ["--help"], terminal_width=200).output.split())
    assert ("Checkpoint every N steps and at the run's end, and at each epoch's end unless --max-steps sets the "
            "run's length (0 = only at epochs' ends)") in help_text
    assert "only at the end" not in help_text
