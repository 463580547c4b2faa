"""Telling another process's death (a failed collective) from a bug, and the line a survivor stops with."""
from __future__ import annotations

import pytest
import torch.distributed as dist

from retriever.errors import RetrieverError
from retriever.training.processes import is_peer_failure, peer_died

GLOO_CLOSED = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
               "[127.0.0.1]:16022. This is typically caused by a remote worker crashing. Check the logs of the "
               "remote worker before reporting an error. GLHF!")


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
    error = peer_died(RuntimeError(GLOO_CLOSED))
    assert isinstance(error, RetrieverError) and error.every_process
    assert str(error) == ("another training process died (Connection closed by peer [127.0.0.1]:16022); rerun the "
                          "same command to resume from the last checkpoint")
