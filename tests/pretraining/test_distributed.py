"""Pre-training under torchrun (two gloo processes on the CPU): each coCondenser process's span softmax needs
passages of its own, a batch that does not split is refused with the real rule, errors are printed once, and
frozen-backbone steps average the heads' gradients without DDP's search for parameters without one."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fixtures_corpora import write_tiny_beir
from retriever.pretraining import PretrainConfig
from retriever.pretraining import pretrain as run_pretrain

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1"}
# the module's runs in one launch (starting two processes costs more than these tiny runs); a run marked kept stops
# as if killed once its last step is saved: no model, no record of the finished run
RUNS_SCRIPT = """
import json, sys
from retriever.pretraining import PretrainConfig, pretrain
from retriever.training import stack
finish = stack.StackTrainer.finish
for settings, kept in json.loads(sys.argv[1]):
    stack.StackTrainer.finish = (lambda self, write_model, result: None) if kept else finish
    pretrain(PretrainConfig(**settings))
"""


def torchrun(*arguments: str) -> subprocess.CompletedProcess:
    return run_script("-m", "retriever", *arguments)


def run_script(*command: str) -> subprocess.CompletedProcess:
    """Two gloo processes under torchrun running ``command`` (a script and its argument, or ``-m`` a module)."""
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           *command], capture_output=True, text=True, env=ENVIRONMENT, timeout=300)


def pretrain(corpus, model, output, sequences: int, *extra: str) -> subprocess.CompletedProcess:
    return torchrun("pretrain", str(corpus), "--model", str(model), "--output", str(output), "--cocondenser",
                    "--sequences-per-step", str(sequences), "--max-steps", "2", "--max-length", "16",
                    "--device", "cpu", "--dtype", "fp32", "--no-progress", *extra)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def runs(tiny_model_dir, root: Path) -> dict[str, dict]:
    """The launch's runs by name: coCondenser's span loss; frozen-backbone steps and the same run without them, at a
    backbone rate too small to move it; and one whose checkpoints are kept as a kill would leave them."""
    corpus = write_tiny_beir(root / "tiny-beir")
    same = dict(corpus=str(corpus), model=str(tiny_model_dir), max_length=16, device="cpu", dtype="fp32",
                progress=False)
    slow_backbone = dict(same, batch_size=8, max_steps=2, save_steps=None, learning_rate=2e-3, warmup_ratio=0.0,
                         max_grad_norm=None, backbone_lr_scale=1e-30)
    return {"span": dict(same, output=str(root / "span"), cocondenser=True, batch_size=8, max_steps=2),
            "frozen": dict(slow_backbone, output=str(root / "frozen"), freeze_backbone_steps=1),
            "still": dict(slow_backbone, output=str(root / "still")),
            "kept": dict(same, output=str(root / "kept"), batch_size=4, max_steps=3, save_steps=1)}


@pytest.fixture(scope="module")
def launch(tiny_model_dir, tmp_path_factory) -> tuple[dict[str, dict], str]:
    """Each of ``runs`` in one launch of two processes: their settings, and the launch's standard error."""
    root = tmp_path_factory.mktemp("pretrain-launch")
    settings = runs(tiny_model_dir, root)
    script = root / "runs.py"
    script.write_text(RUNS_SCRIPT)
    finished = run_script(str(script), json.dumps([[run, name == "kept"] for name, run in settings.items()]))
    assert finished.returncode == 0, finished.stderr[-3000:]
    return settings, finished.stderr


def test_two_passages_per_process_give_a_span_loss(launch):
    settings, stderr = launch
    history = json.loads((Path(settings["span"]["output"]) / "checkpoints" / "finished.json").read_text())
    history = history["result"]["history"]
    assert len(history) == 2 and all(entry["span"] > 0.01 for entry in history)
    # the parts are the launch's means, as the loss is: they were rank 0's alone, and did not add up to it
    assert all(entry["loss"] == pytest.approx(entry["head_mlm"] + entry["backbone_mlm"] + entry["span"], rel=1e-5)
               for entry in history), history
    # every parameter gets a gradient: DDP's search for those without one only made every process warn
    assert "find_unused_parameters" not in stderr


def weights(output: Path) -> dict[str, torch.Tensor]:
    return {**load_file(output / "model.safetensors"), **torch.load(output / "model.pt", weights_only=True)}


def test_frozen_steps_average_the_heads_gradients_without_a_warning(launch):
    """The frozen steps leave the backbone without a gradient, so they run past DDP and average the heads' gradients
    themselves: the heads must learn as when DDP averages them (a run whose backbone learns at a rate too small to
    move it, without clipping, whose norm would count the backbone), and no process may warn that DDP searched each
    step for parameters without a gradient (every process did, once the backbone thawed)."""
    settings, stderr = launch
    assert "find_unused_parameters" not in stderr, stderr[-3000:]
    frozen, still = weights(Path(settings["frozen"]["output"])), weights(Path(settings["still"]["output"]))
    assert frozen.keys() == still.keys() and any(key.startswith("c_head.") for key in frozen)
    assert max(float((frozen[key] - still[key]).abs().max()) for key in frozen) < 1e-6


@pytest.mark.parametrize("sequences, rule", [(6, "multiple of 4 (whole 2-span passages in each of the 2 processes"),
                                             (5, "at least 8 (2+ passages a process")])
def test_a_cocondenser_batch_that_leaves_a_process_short_is_refused_once(tiny_beir, tiny_model_dir, tmp_path,
                                                                           sequences, rule):
    finished = pretrain(tiny_beir, tiny_model_dir, tmp_path / "out", sequences)
    assert finished.returncode != 0
    lines = error_lines(finished.stderr)
    assert len(lines) == 1 and rule in lines[0] and lines[0].endswith("; use 8 (see `python -m retriever pretrain --help`)"), \
        finished.stderr
    assert "[rank" not in finished.stderr


def test_a_usage_error_is_printed_once(tmp_path):
    finished = torchrun("pretrain", "--no-such-flag")
    assert finished.returncode != 0
    assert finished.stderr.count("No such option") == 1, finished.stderr


def test_a_resume_under_another_process_count_says_its_random_draws_differ(launch, capfd):
    """A checkpoint of two processes resumed by one (steps laid out alike: 12 blocks in steps of 4) reads neither
    process's RNG state, so dropout draws differ from an uninterrupted run's; the library noted it at info level only,
    so the resume said nothing. One process cannot replay two generators' draws: stderr says so, in one line."""
    settings = launch[0]["kept"]
    checkpoints = Path(settings["output"]) / "checkpoints"
    assert (checkpoints / "checkpoint-2" / "rng_state_1.pth").is_file()
    shutil.rmtree(checkpoints / "checkpoint-3")  # as if killed after step 2
    capfd.readouterr()
    resumed = run_pretrain(PretrainConfig(**settings))
    assert (resumed.resumed_from_step, resumed.steps) == (2, 3)
    notes = [line for line in capfd.readouterr().err.splitlines() if "other random draws" in line]
    assert notes == ["note: checkpoint-2 was saved by 2 processes and this run has 1: it continues with the same "
                     "data order but other random draws (dropout) than an uninterrupted run, so its losses and "
                     "weights will not be that run's; resume with 2 processes to continue it exactly"], notes
