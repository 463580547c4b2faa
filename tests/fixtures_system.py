"""The machine as tests see or simulate it: threads started together, a free port, torchrun's environment, a local
Ray and worker counts past its cores, cgroup files and a 64-core affinity mask, a folder nothing can be created in."""
from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest


def run_in_threads(target, argument_tuples, timeout: float | None = None) -> None:
    """Start one thread per argument tuple, all before any is joined, so they run at the same time."""
    threads = [threading.Thread(target=target, args=arguments) for arguments in argument_tuples]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)


def free_port() -> int:
    """A local TCP port nothing listens on once this returns (a server's, or one that must refuse connections)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def as_torchrun_process(monkeypatch, processes: int) -> None:
    """The environment torchrun gives the first of ``processes`` processes (no group is joined here)."""
    for name, value in {"WORLD_SIZE": str(processes), "RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray (2 CPUs, no dashboard) shared by every test that needs it: starting Ray costs seconds."""
    ray = pytest.importorskip("ray", reason="Ray is the optional extra [ray]; .ci/run installs it")
    import logging

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


def too_many(per_worker: int = 1) -> int:
    """More workers than this machine's cores hold (Ray counts the machine's cores, or a container's fewer)."""
    return (os.cpu_count() or 1) // per_worker + 1


def fake_cgroup_tree(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup mount holding ``files`` (path under the mount: text) and a /proc/self/cgroup of ``membership``, for
    ``retriever.cgroups``' CGROUPS and MEMBERSHIP: (the mount, the membership file)."""
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    (tmp_path / "fs").mkdir(exist_ok=True)
    (tmp_path / "cgroup").write_text(membership)
    return tmp_path / "fs", tmp_path / "cgroup"


@pytest.fixture
def many_cores(monkeypatch):
    """A 64-core affinity mask, as a container with a quota sees on a 64-core host."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)


def nothing_created_in(folder: Path, monkeypatch) -> None:
    """Make ``folder`` read-only to this process: mkdir of an entry in it raises EACCES. The suite runs as root,
    which ignores permission bits, so a read-only folder is simulated."""
    mkdir = Path.mkdir

    def refused(self, *args, **kwargs):
        if self.parent == folder:
            raise PermissionError(13, "Permission denied", str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)
