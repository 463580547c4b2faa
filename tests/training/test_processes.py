"""Telling another process's death (a failed collective) from a bug, and the line a survivor stops with."""
from __future__ import annotations

import os
import re

import pytest
import torch
import torch.distributed as dist

from fixtures_system import free_port
from retriever.errors import RetrieverError
from retriever.training.processes import PeerDied, is_peer_failure, peer_deaths_reported, peer_died

GLOO_CLOSED = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
               "[127.0.0.1]:16022. This is typically caused by a remote worker crashing. Check the logs of the "
               "remote worker before reporting an error. GLHF!")
GLOO_TIMED_OUT = ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 90000ms for recv "
                  "operation to complete")


@pytest.mark.parametrize("error, processes, converted", [
    (RuntimeError(GLOO_CLOSED), 2, True),
    (RuntimeError("[../gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:1: Connection reset by peer"), 2, True),
    (dist.DistBackendError("NCCL communicator was aborted"), 2, True),
    (RuntimeError(GLOO_CLOSED), 1, False),  # no torchrun: no peers to lose
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"), 2, False),  # a bug keeps its traceback
    (ValueError("Connection closed by peer"), 2, False),
])
def test_only_failed_collectives_of_a_launch_count_as_a_dead_peer(monkeypatch, error, processes, converted):
    monkeypatch.setenv("WORLD_SIZE", str(processes))
    assert is_peer_failure(error) is converted


def test_the_survivor_says_what_happened_and_what_to_do_on_one_line():
    error = peer_died(RuntimeError(GLOO_CLOSED), 1800)
    assert isinstance(error, RetrieverError) and error.every_process
    assert str(error) == ("another training process died (Connection closed by peer [127.0.0.1]:16022); rerun the "
                          "same command to resume from the last checkpoint")


def test_a_peer_that_refuses_connections_is_said_to_have_died_not_to_be_slow():
    """gloo gives up connecting to a peer whose port refuses after a few tries, and calls that 'timed out connecting':
    the line said the peer did not answer within --ddp-timeout 1800 s, a wait that never happened."""
    refused = ("Gloo connectFullMesh failed with [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] "
               "timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:8607$0")
    assert str(peer_died(RuntimeError(refused), 1800)).startswith(f"another training process died ({refused})")


def test_under_max_restarts_the_survivor_says_torchrun_restarts_the_run(monkeypatch):
    """With restarts left, torchrun restarts every process itself and they resume: the line said to rerun by hand."""
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "1")
    assert str(peer_died(RuntimeError(GLOO_CLOSED), 1800)) == (
        "another training process died (Connection closed by peer [127.0.0.1]:16022); torchrun restarts the processes "
        "(restart 1 of --max-restarts 1) and they resume from the last checkpoint")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # the restarts used up: the launch fails
    assert str(peer_died(RuntimeError(GLOO_CLOSED), 1800)).endswith("rerun the same command to resume from the last "
                                                                    "checkpoint")


def test_a_peer_that_timed_out_is_not_said_to_have_died(monkeypatch):
    """A stopped (not dead) peer fails the others after --ddp-timeout, and they said it "died (Timed out ...)"."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(PeerDied) as caught, peer_deaths_reported(90):
        raise RuntimeError(GLOO_TIMED_OUT)
    assert str(caught.value) == ("another training process did not answer within --ddp-timeout 90 s (stopped, hung or "
                                 "died: Timed out waiting 90000ms for recv operation to complete); rerun the same "
                                 "command to resume from the last checkpoint")


def test_the_process_group_waits_the_ddp_timeout_for_a_stopped_peer(monkeypatch):
    """A process stopped (not dead) under torchrun held the others for torch's 30 minutes: the Trainer starts the
    group on CPU without its ddp_timeout, and nothing else set one. A one-process group shows the timeout it got."""
    import torch

    from retriever.training.processes import join_process_group

    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr("retriever.training.processes.launched_processes", lambda: 2)  # as torchrun's WORLD_SIZE
    assert join_process_group(torch.device("cpu"), 77) == "gloo"
    try:
        group = dist.distributed_c10d._get_default_group()
        assert group._get_backend(torch.device("cpu")).options._timeout.total_seconds() == 77
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def joined_then_left():
    """A process that imports the group's module (saying which heavy libraries came with it), joins a group of one,
    gathers the settings as a launch does, and exits."""
    import subprocess
    import sys

    port = free_port()
    script = ("import atexit, sys, torch, torch.distributed as dist\n"
              "atexit.register(lambda: print('joined' if dist.is_initialized() else 'left'))\n"
              "from retriever.training import processes\n"
              "print(sorted(name for name in ('accelerate', 'transformers') if name in sys.modules))\n"
              "processes.launched_processes = lambda: 2  # as torchrun's WORLD_SIZE\n"
              "processes.join_process_group(torch.device('cpu'), 60)\n"
              "records = [None]\n"
              "dist.all_gather_object(records, {'learning_rate': 0.001})\n")
    environment = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0",
                   "WORLD_SIZE": "1"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                          timeout=120)


def test_a_process_leaves_the_group_it_joined_before_the_interpreter_finalises(joined_then_left):
    """Left to finalisation, a gloo worker thread freeing the tensors of the last ``all_gather_object`` (a refusal
    raised right after it) could not take the interpreter lock and aborted the process with SIGABRT, about one launch
    in three. An exit handler registered before joining runs after ours (last in, first out) and sees no group."""
    finished = joined_then_left
    assert (finished.returncode, finished.stdout.splitlines()[1:]) == (0, ["left"]), finished.stderr[-2000:]


def test_the_process_group_module_comes_without_the_trainer(joined_then_left):
    """`import retriever.training.processes` (every training process, and this file's scripts) imported the whole
    package first: transformers' Trainer, Accelerate and torch._dynamo, 3.7 s of CPU a process before it joined."""
    assert joined_then_left.stdout.splitlines()[:1] == ["[]"], joined_then_left.stdout


def test_a_peer_gone_before_the_group_starts_fails_the_join_in_one_line():
    """A process whose peer on another machine stops before joining (refused there, say: its --output was locked)
    loses the group's store with that machine's launcher; its join ended in a DistNetworkError traceback."""
    import subprocess
    import sys
    import time

    store = dist.TCPStore("127.0.0.1", 0, world_size=2, is_master=True, wait_for_workers=False)  # the other launcher's
    script = ("import torch\n"
              "from retriever.training.processes import join_process_group\n"
              "join_process_group(torch.device('cpu'), 60)\n")
    environment = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "RANK": "1",
                   "LOCAL_RANK": "0", "WORLD_SIZE": "2"}
    joining = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True, env=environment)
    deadline = time.monotonic() + 60
    while store.num_keys() == 0 and joining.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until it waits in the store for its peer
    assert joining.poll() is None, "the join ended before its peer left"
    del store
    stderr = joining.communicate(timeout=60)[1]
    assert joining.returncode != 0
    last = stderr.strip().splitlines()[-1]  # gloo's words for the lost store vary with timing (seen under load)
    assert re.search(r"PeerDied: another training process died \((Failed to recv, got 0 bytes|Broken pipe)\); rerun the "
                     r"same command to resume from the last checkpoint$", last), stderr[-2000:]


RESTARTED_SCRIPT = """
import os, time
import torch, torch.distributed as dist
from retriever.training.processes import join_process_group
join_process_group(torch.device("cpu"), 60)
value = torch.ones(1)
dist.all_reduce(value)
attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), dist.get_rank()
if attempt == 0:
    if rank == 1:
        os._exit(1)  # a process lost once the group had formed
    time.sleep(60)  # stopped by the launcher, which restarts both
os.write(1, f"attempt {attempt}: {value.item():g}\\n".encode())  # one write: print's two interleaved across processes
"""


def test_processes_restarted_by_torchrun_form_a_new_group(tmp_path):
    """torchrun --max-restarts keeps one store across attempts, where the lost attempt's processes left their
    addresses: the restarted ones read those and failed to connect ('Connection refused', or hung), so a run killed
    mid-epoch never resumed by itself."""
    import subprocess
    import sys

    script = tmp_path / "restarted.py"
    script.write_text(RESTARTED_SCRIPT)
    finished = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                               "--max-restarts", "1", str(script)], capture_output=True, text=True, timeout=180,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.splitlines() == ["attempt 1: 2", "attempt 1: 2"]


@pytest.mark.parametrize("command", ["train", "pretrain"])
def test_ddp_timeout_reaches_the_process_group_a_launch_starts(monkeypatch, small_bert, tmp_path, command):
    from retriever.choices import DDP_TIMEOUT
    from retriever.pretraining import PretrainConfig
    from retriever.training import TrainConfig
    from retriever.training import stack

    joined = []
    monkeypatch.setattr(stack, "join_process_group", lambda device, seconds: joined.append((device.type, seconds)))
    monkeypatch.setattr(stack, "TrainingArguments", dict)  # the real one would start the group of 2 itself
    kind = TrainConfig if command == "train" else PretrainConfig
    given = kind(output=str(tmp_path / "m"), model=str(small_bert), device="cpu", ddp_timeout=90).arguments(4, 1, 1)
    kind(output=str(tmp_path / "m"), model=str(small_bert), device="cpu").arguments(4, 1, 1)
    assert joined == [("cpu", 90), ("cpu", DDP_TIMEOUT)] and DDP_TIMEOUT == 1800  # the Trainer's own default
    assert given[0]["ddp_timeout"] == 90


def test_on_gpus_each_process_takes_its_own_gpu_before_the_group_starts(monkeypatch):
    """The group is started before the Trainer sets each process's GPU, and our first collective (the settings
    compared across processes) runs before that too: NCCL would put every process of a machine on GPU 0."""
    from retriever.training import processes

    calls = []
    monkeypatch.setattr(processes, "launched_processes", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(("set_device", index)))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(processes, "_this_attempts_store", lambda timeout: ("the launch's store", 1, 2))
    monkeypatch.setattr(dist, "init_process_group", lambda **kwargs: calls.append(("init", kwargs["backend"])))
    assert processes.join_process_group(torch.device("cuda"), 60) == "nccl"
    assert calls == [("set_device", 1), ("init", "nccl")]


def test_the_lookup_of_another_processs_line_is_bounded_when_the_store_does_not_answer(monkeypatch):
    """A store whose host is stopped (SIGSTOP, not dead) never answers, and torch's store calls wait for it without
    bound: a process that had already waited --ddp-timeout for a collective then waited for ever for the line."""
    import threading
    import time

    from retriever.training import processes

    released = threading.Event()

    class Unanswering:
        def check(self, keys):
            released.wait(120)
            return False

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(processes, "_STORE", [Unanswering()])
    monkeypatch.setattr(processes, "REFUSAL_LOOKUP_SECONDS", 0.2, raising=False)
    caught: list[BaseException] = []

    def stop() -> None:
        try:
            with peer_deaths_reported(90):
                raise RuntimeError(GLOO_TIMED_OUT)
        except PeerDied as error:
            caught.append(error)

    stopping = threading.Thread(target=stop, daemon=True)
    started = time.monotonic()
    stopping.start()
    stopping.join(10)
    released.set()
    assert caught and time.monotonic() - started < 5, "the lookup waited for the store"
    assert str(caught[0]).startswith("another training process did not answer within --ddp-timeout 90 s")


def test_a_ddp_timeout_past_a_year_is_refused_before_anything_runs(small_bert, tmp_path):
    """Under torchrun, --ddp-timeout 10000000000000 failed the join with gloo's C++ 'timeout.count() >= 0. Invalid
    timeout' traceback, and 10**15 with an OverflowError: 'Python int too large to convert to C int'."""
    from retriever.training import TrainConfig

    settings = dict(output=str(tmp_path / "m"), dataset=str(tmp_path), model=str(small_bert), device="cpu")
    with pytest.raises(RetrieverError, match=r"^--ddp-timeout must be a whole number from 1 to 31536000 \(a year, "
                                             r"in seconds\), not 10000000000000$"):
        TrainConfig(**settings, ddp_timeout=10**13).check()
    with pytest.raises(RetrieverError, match=r"^--ddp-timeout must be a whole number from 1 to 31536000 .*, not 0$"):
        TrainConfig(**settings, ddp_timeout=0).check()  # 0 once passed as unset
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize("world_size, said", [("2", "WORLD_SIZE is 2 in the environment, but RANK, MASTER_ADDR and "
                                                    "MASTER_PORT are not, so this is no torchrun launch"),
                                              ("two", "WORLD_SIZE is 'two' in the environment, not a process count")])
def test_a_world_size_left_in_the_environment_without_torchrun_is_one_line(tmp_path, monkeypatch, command,
                                                                           world_size, said):
    """`export WORLD_SIZE=2` left over (or set by a scheduler) without torchrun: a ValueError traceback from torch's
    env:// rendezvous ("environment variable RANK expected, but not set") once the model and data had loaded."""
    from retriever.pretraining import PretrainConfig
    from retriever.training import TrainConfig

    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", world_size)
    paths = dict(output=str(tmp_path / "out"), model=str(tmp_path / "model"), batch_size=4)
    config = TrainConfig(**paths, dataset=str(tmp_path)) if command == "train" else PretrainConfig(**paths,
                                                                                                   corpus=str(tmp_path))
    with pytest.raises(RetrieverError, match=f"^{said}"):
        config.check()
    assert not (tmp_path / "out").exists()
