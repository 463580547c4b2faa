"""Lock files name their holder's pid and host; one another host left is refused, saying how to remove it (on a
shared file system an flock may not reach across hosts, and that host's processes cannot be seen from here)."""
from __future__ import annotations

import fcntl
import os
import socket

import pytest

from retriever.errors import RetrieverError
from retriever.folders import exclusive_build
from retriever.locks import held_lock, remove_unheld_lock


def test_a_lock_another_host_left_is_refused_naming_the_host_and_how_to_remove_it(tmp_path):
    """It was taken (the pid judged by its flock, on this machine only): two builds of one output on two hosts
    shared OUTPUT.shards and deleted each other's files."""
    lock = tmp_path / ".idx.lock"
    lock.write_text("4242 node-b.example")
    with pytest.raises(RetrieverError) as refused:
        with exclusive_build(tmp_path / "idx"):
            raise AssertionError("the lock was taken")
    assert str(refused.value) == (f"{tmp_path / 'idx'}: another build of it is running (pid 4242 on host "
                                  "node-b.example); wait for it to end or choose another --output; if it no longer "
                                  f"runs there (a run killed on that host leaves its lock), remove {lock}")
    assert lock.read_text() == "4242 node-b.example"
    remove_unheld_lock(lock)  # as a build's clean-up of killed builds' leftovers does
    assert lock.read_text() == "4242 node-b.example"


def test_a_lock_records_this_host_and_one_this_host_left_is_taken(tmp_path):
    lock = tmp_path / ".idx.lock"
    for left in ("4242", f"4242 {socket.gethostname()}"):  # an older lock of a pid alone is this host's
        lock.write_text(left)
        with held_lock(lock, lambda pid: f"held by {pid}"):
            assert lock.read_text().split(" ") == [str(os.getpid()), socket.gethostname()]
            with open(lock) as other, pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert not lock.exists()


def test_a_lock_held_on_this_host_is_refused_naming_the_pid_alone(tmp_path):
    lock = tmp_path / ".idx.lock"
    with held_lock(lock, lambda pid: f"held by {pid}"):
        with pytest.raises(RetrieverError, match=rf"^held by {os.getpid()}$"):
            with held_lock(lock, lambda pid: f"held by {pid}"):
                pass
