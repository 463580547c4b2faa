"""Training under torchrun on the CPU: gloo, two real processes, each with half of the global batch.

The same global batch must give the loss and weights of one process (cross-device negatives and the
shared-positive mask span both ranks, GradCache included), turning cross-device negatives off must
change them, and a 2-process run killed after a checkpoint must end, when rerun, with the weights
of an uninterrupted one; when one process is killed, the survivor stops with one line, not a gloo traceback.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fixtures_corpora import TINY_DOCS, write_jsonl
from fixtures_models import make_tiny_bert
from retriever.encoder import EncoderSettings
from retriever.model_loading import load_tokenizer
from retriever.training import TrainConfig, train
from retriever.training.data import Collator, epoch_groups, load_beir_examples
from retriever.training.loss import judged_positive_mask

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1"}
STEPS, BATCH = 3, 4
LAUNCH_STDERR = "launch.stderr"
KILLED_RUN = ["--max-steps", "40", "--queries-per-step", "2", "--save-steps", "2", "--warmup-ratio", "0.2"]
# `retriever ARGS` whose processes stop, for the test to kill them, once the checkpoint of step PAUSE_STEP is complete:
# the tiny run's 38 other steps take a few seconds, and on a loaded machine the test's kill came after the run had
# finished. Step 4 ends an epoch, whose end writes the checkpoint again: the kill lands between the two.
PAUSE_STEP = 4
PAUSED_CLI = """
import sys, time
from retriever.cli import main
from retriever.training import stack

class PausedAfterCheckpoint(stack.EpochEndCheckpoints):
    def on_save(self, args, state, control, **kwargs):
        if state.global_step == int(sys.argv[1]):
            time.sleep(300)  # killed here by the test

stack.EpochEndCheckpoints = PausedAfterCheckpoint
main(sys.argv[2:])
"""
# several runs in one launch: starting two processes costs more than these tiny trainings
RUNS_SCRIPT = """
import json, sys
from retriever.training import TrainConfig, train
for settings in json.loads(sys.argv[1]):
    train(TrainConfig(**settings))
"""


def torchrun(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *arguments]


def flags(dataset: Path, model: Path, output: Path, *extra: str) -> list[str]:
    return ["-m", "retriever", "train", "--dataset", str(dataset), "--model", str(model), "--output", str(output),
            "--learning-rate", "1e-3", "--passage-max-length", "32", "--query-max-length", "16", "--device", "cpu",
            "--dtype", "fp32", *extra]


def settings(dataset: Path, model: Path, output: Path, **extra) -> dict:
    return dict(dataset=str(dataset), model=str(model), output=str(output), learning_rate=1e-3, device="cpu",
                encoder={"passage_max_length": 32, "query_max_length": 16}, dtype="fp32", progress=False, **extra)


def run(command: list[str]) -> str:
    """The launch's standard error, once it succeeded."""
    finished = subprocess.run(command, capture_output=True, text=True, env=ENVIRONMENT, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return finished.stderr


def losses(output: Path) -> list[float]:
    return json.loads((output / "checkpoints" / "finished.json").read_text())["result"]["losses"]


def weights(output: Path) -> dict[str, torch.Tensor]:
    return load_file(output / "model.safetensors")


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[name] - b[name]).abs().max()) for name in a)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A BEIR folder whose train queries each judge their document and the next one (positives shared across
    ranks), a BERT with dropout (per-rank dropout draws must resume too) and one without (equivalence)."""
    root = tmp_path_factory.mktemp("distributed")
    (root / "beir" / "qrels").mkdir(parents=True)
    write_jsonl(root / "beir" / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    write_jsonl(root / "beir" / "queries.jsonl", [{"_id": f"q{i}", "text": f"{t.lower()} {x.split()[-1]}"}
                                                  for i, (_, t, x) in enumerate(TINY_DOCS)])
    lines = [f"q{i}\td{i + 1}\t1\nq{i}\td{(i + 1) % 8 + 1}\t1\n" for i in range(8)]
    (root / "beir" / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines))
    make_tiny_bert(root / "bert", layers=1)
    folder = make_tiny_bert(root / "no-dropout", layers=1)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return root


@pytest.fixture(scope="module")
def two_process_runs(work: Path) -> Path:
    """One torchrun launch: cross-device negatives, the same with GradCache, without cross-device negatives, the
    uninterrupted reference of the killed run, and pooler pooling (no parameter left without a gradient); the
    launch's stderr is kept in LAUNCH_STDERR."""
    beir, model, runs = work / "beir", work / "no-dropout", work / "runs"
    same_batch = dict(max_steps=STEPS, batch_size=BATCH)
    configs = [settings(beir, model, runs / "two", **same_batch),
               settings(beir, model, runs / "two-gc", grad_cache_chunk_size=1, **same_batch),
               settings(beir, model, runs / "local", cross_device_negatives=False, **same_batch),
               settings(beir, work / "bert", runs / "straight", max_steps=40, batch_size=2, save_steps=2,
                        warmup_ratio=0.2),
               {**settings(beir, model, runs / "pooler", max_steps=2, batch_size=BATCH),
                "encoder": {"pooling": "pooler", "passage_max_length": 32, "query_max_length": 16}}]
    script = work / "runs.py"
    script.write_text(RUNS_SCRIPT)
    stderr = run(torchrun(str(script), json.dumps(configs)))
    (runs / LAUNCH_STDERR).write_text(stderr)
    return runs


def test_masks_cross_the_ranks_in_this_data(work):
    """Precondition of the equivalence test: some query on one rank has a judged positive on the other's slice."""
    examples = load_beir_examples(work / "beir", "train")
    model = str(work / "no-dropout")
    batch = Collator(load_tokenizer(model), EncoderSettings(model=model))(epoch_groups(examples, 0, 42, 1)[:BATCH])
    mask = judged_positive_mask(batch["judged_keys"], batch["passage_keys"], batch["targets"])
    half = BATCH // 2
    assert mask[:half, half:].any() or mask[half:, :half].any()


def test_two_processes_match_one_on_the_same_global_batch(tmp_path, work, two_process_runs):
    single = train(TrainConfig(**settings(work / "beir", work / "no-dropout", tmp_path / "one", max_steps=STEPS,
                                          batch_size=BATCH)))
    assert len(single.losses) == STEPS
    for output in ("two", "two-gc"):  # GradCache under DDP too
        assert losses(two_process_runs / output) == pytest.approx(single.losses, abs=1e-5)
        assert largest_difference(weights(two_process_runs / output), weights(tmp_path / "one")) < 1e-4
    # without cross-device negatives each rank's logits miss the other rank's passages
    assert abs(losses(two_process_runs / "local")[0] - single.losses[0]) > 1e-2
    assert largest_difference(weights(two_process_runs / "local"), weights(tmp_path / "one")) > 1e-4


def test_ddp_searches_for_parameters_without_gradient_only_where_a_step_leaves_some(two_process_runs):
    """Mean pooling leaves the pooler without a gradient, so DDP must search for it (else it fails at the second
    step); pooler pooling leaves none, and the search made every process warn of its extra traversal a step."""
    assert (two_process_runs / "two" / "model.safetensors").is_file()  # mean pooling of a model with a pooler
    assert (two_process_runs / "pooler" / "model.safetensors").is_file()
    assert "find_unused_parameters" not in (two_process_runs / LAUNCH_STDERR).read_text()


def complete_checkpoints(output: Path) -> list[int]:
    return sorted(int(p.parent.name.split("-")[1]) for p in (output / "checkpoints").glob("checkpoint-*/run.json"))


def process_tree(pid: int) -> list[int]:
    """The launcher and its workers (torchrun starts each worker in a session of its own)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return [pid]
    return [pid, *(grandchild for child in children for grandchild in process_tree(int(child)))]


def gone(pid: int) -> bool:
    """Whether a process has exited (a zombie holds no file, lock or socket any more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_killed_two_process_run_resumes_to_the_uninterrupted_weights(work, two_process_runs):
    output, script = work / "killed", work / "paused_cli.py"
    script.write_text(PAUSED_CLI)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
               str(PAUSE_STEP), *flags(work / "beir", work / "bert", output, *KILLED_RUN)[2:]]
    killed = subprocess.Popen(command, env=ENVIRONMENT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while PAUSE_STEP not in complete_checkpoints(output) and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert killed.poll() is None and PAUSE_STEP in complete_checkpoints(output), "the run ended or never paused"
    processes = process_tree(killed.pid)
    for pid in processes:
        with contextlib.suppress(ProcessLookupError):  # a worker may go with its launcher before its own kill
            os.kill(pid, signal.SIGKILL)
    killed.wait()
    deadline = time.monotonic() + 60
    while not all(gone(pid) for pid in processes) and time.monotonic() < deadline:
        time.sleep(0.01)  # the workers are not ours to wait for; rank 0 holds the output's lock until it is gone
    assert all(gone(pid) for pid in processes), "a killed worker is still running"
    assert not (output / "checkpoints" / "finished.json").exists()
    run(torchrun(*flags(work / "beir", work / "bert", output, *KILLED_RUN)))
    record = json.loads((output / "checkpoints" / "finished.json").read_text())["result"]
    assert record["resumed_from_step"] == PAUSE_STEP and record["steps"] == 40
    assert largest_difference(weights(output), weights(two_process_runs / "straight")) < 1e-6


def worker_of_rank(launcher: int, rank: int) -> int | None:
    for pid in process_tree(launcher)[1:]:
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        if f"RANK={rank}".encode() in environment:
            return pid
    return None


def test_a_killed_process_leaves_the_survivor_one_line(work, tmp_path):
    output = tmp_path / "out"
    # the launcher's watch is slowed so the survivor meets the dead peer before it is told to stop
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "--monitor-interval", "5", *flags(work / "beir", work / "bert", output, "--max-steps", "400", "--queries-per-step", "2",
                     "--save-steps", "2", "--no-progress")]
    launched = subprocess.Popen(command, env=ENVIRONMENT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not complete_checkpoints(output) and launched.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    victim = worker_of_rank(launched.pid, 1)
    assert victim is not None and launched.poll() is None, "the run ended before a process could be killed"
    os.kill(victim, signal.SIGKILL)
    stderr = launched.communicate(timeout=120)[1]
    assert launched.returncode != 0
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "another training process died (" in errors[0], stderr[-3000:]
    assert errors[0].endswith("rerun the same command to resume from the last checkpoint")
    assert "[rank0]: Traceback" not in stderr and "[rank0]: RuntimeError" not in stderr, stderr[-3000:]


def test_a_process_killed_at_the_final_barrier_leaves_the_survivor_one_line(work, tmp_path):
    output = tmp_path / "out"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "--monitor-interval", "5", *flags(work / "beir", work / "bert", output, "--max-steps", "2",
                                                 "--queries-per-step", "2", "--no-progress")]
    launched = subprocess.Popen(command, env=ENVIRONMENT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    # rank 0 stages the model folder while rank 1 already waits at the last barrier
    while not list(output.glob(".out.staging-*")) and launched.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    victim = worker_of_rank(launched.pid, 1)
    assert victim is not None and launched.poll() is None, "the run ended before a process could be killed"
    os.kill(victim, signal.SIGKILL)
    stderr = launched.communicate(timeout=120)[1]
    assert launched.returncode != 0 and (output / "model.safetensors").is_file()
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "another training process died (" in errors[0], stderr[-3000:]
    assert "[rank0]: Traceback" not in stderr and "[rank0]: RuntimeError" not in stderr, stderr[-3000:]
