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

from retriever.pretraining import PretrainConfig
from retriever.pretraining import pretrain as run_pretrain

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1"}
RUNS_SCRIPT = """
import json, sys
from retriever.pretraining import PretrainConfig, pretrain
for settings in json.loads(sys.argv[1]):
    pretrain(PretrainConfig(**settings))
"""

KEPT_CHECKPOINTS_SCRIPT = """
import json, sys
from retriever.pretraining import PretrainConfig, pretrain
from retriever.training import stack
stack.StackTrainer.finish = lambda self, write_model, result: None  # as if killed once the last step is saved
pretrain(PretrainConfig(**json.loads(sys.argv[1])))
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


def test_two_passages_per_process_give_a_span_loss(tiny_beir, tiny_model_dir, tmp_path):
    finished = pretrain(tiny_beir, tiny_model_dir, tmp_path / "out", 8)
    assert finished.returncode == 0, finished.stderr[-3000:]
    history = json.loads((tmp_path / "out" / "checkpoints" / "finished.json").read_text())["result"]["history"]
    assert len(history) == 2 and all(entry["span"] > 0.01 for entry in history)
    # the parts are the launch's means, as the loss is: they were rank 0's alone, and did not add up to it
    assert all(entry["loss"] == pytest.approx(entry["head_mlm"] + entry["backbone_mlm"] + entry["span"], rel=1e-5)
               for entry in history), history
    # every parameter gets a gradient: DDP's search for those without one only made every process warn
    assert "find_unused_parameters" not in finished.stderr


def weights(output: Path) -> dict[str, torch.Tensor]:
    return {**load_file(output / "model.safetensors"), **torch.load(output / "model.pt", weights_only=True)}


def test_frozen_steps_average_the_heads_gradients_without_a_warning(tiny_beir, tiny_model_dir, tmp_path):
    """The frozen steps leave the backbone without a gradient, so they run past DDP and average the heads' gradients
    themselves: the heads must learn as when DDP averages them (a run whose backbone learns at a rate too small to
    move it, without clipping, whose norm would count the backbone), and no process may warn that DDP searched each
    step for parameters without a gradient (every process did, once the backbone thawed)."""
    same = dict(corpus=str(tiny_beir), model=str(tiny_model_dir), max_length=16, batch_size=8, max_steps=2,
                device="cpu", dtype="fp32", progress=False, save_steps=None, learning_rate=2e-3, warmup_ratio=0.0,
                max_grad_norm=None, backbone_lr_scale=1e-30)
    configs = [dict(same, output=str(tmp_path / "frozen"), freeze_backbone_steps=1),
               dict(same, output=str(tmp_path / "still"))]
    script = tmp_path / "runs.py"
    script.write_text(RUNS_SCRIPT)
    finished = run_script(str(script), json.dumps(configs))
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "find_unused_parameters" not in finished.stderr, finished.stderr[-3000:]
    frozen, still = weights(tmp_path / "frozen"), weights(tmp_path / "still")
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


def test_a_resume_under_another_process_count_says_its_random_draws_differ(tiny_beir, tiny_model_dir, tmp_path,
                                                                            capfd):
    """A checkpoint of two processes resumed by one (steps laid out alike: 12 blocks in steps of 4) reads neither
    process's RNG state, so dropout draws differ from an uninterrupted run's; the library noted it at info level only,
    so the resume said nothing. One process cannot replay two generators' draws: stderr says so, in one line."""
    settings = dict(corpus=str(tiny_beir), model=str(tiny_model_dir), output=str(tmp_path / "out"), max_length=16,
                    batch_size=4, max_steps=3, save_steps=1, device="cpu", dtype="fp32", progress=False)
    script = tmp_path / "kept.py"
    script.write_text(KEPT_CHECKPOINTS_SCRIPT)
    finished = run_script(str(script), json.dumps(settings))
    assert finished.returncode == 0, finished.stderr[-3000:]
    checkpoints = tmp_path / "out" / "checkpoints"
    assert (checkpoints / "checkpoint-2" / "rng_state_1.pth").is_file()
    shutil.rmtree(checkpoints / "checkpoint-3")  # as if killed after step 2
    capfd.readouterr()
    resumed = run_pretrain(PretrainConfig(**settings))
    assert (resumed.resumed_from_step, resumed.steps) == (2, 3)
    notes = [line for line in capfd.readouterr().err.splitlines() if "other random draws" in line]
    assert notes == ["note: checkpoint-2 was saved by 2 processes and this run has 1: it continues with the same "
                     "data order but other random draws (dropout) than an uninterrupted run, so its losses and "
                     "weights will not be that run's; resume with 2 processes to continue it exactly"], notes
