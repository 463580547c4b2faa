"""coCondenser under torchrun (two gloo processes on the CPU): each process's span softmax needs passages of
its own, a batch that does not split is refused with the real rule, and errors are printed once."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1"}


def torchrun(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "retriever", *arguments], capture_output=True, text=True, env=ENVIRONMENT,
                          timeout=300)


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
    # every parameter gets a gradient: DDP's search for those without one only made every process warn
    assert "find_unused_parameters" not in finished.stderr


def test_a_frozen_backbone_trains_under_torchrun(tiny_beir, tiny_model_dir, tmp_path):
    """The frozen steps leave the backbone without a gradient: DDP must look for such parameters there."""
    finished = pretrain(tiny_beir, tiny_model_dir, tmp_path / "out", 8, "--freeze-backbone-steps", "1")
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert (tmp_path / "out" / "model.safetensors").is_file()


@pytest.mark.parametrize("sequences, rule", [(6, "multiple of 4 (2 x processes"),
                                             (4, "at least 8 (4 x processes")])
def test_a_cocondenser_batch_that_leaves_a_process_short_is_refused_once(tiny_beir, tiny_model_dir, tmp_path,
                                                                           sequences, rule):
    finished = pretrain(tiny_beir, tiny_model_dir, tmp_path / "out", sequences)
    assert finished.returncode != 0
    lines = error_lines(finished.stderr)
    assert len(lines) == 1 and rule in lines[0] and "--sequences-per-step" in lines[0], finished.stderr
    assert "[rank" not in finished.stderr


def test_a_usage_error_is_printed_once(tmp_path):
    finished = torchrun("pretrain", "--no-such-flag")
    assert finished.returncode != 0
    assert finished.stderr.count("No such option") == 1, finished.stderr
