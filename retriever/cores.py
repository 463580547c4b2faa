"""The CPU cores this process may use: its affinity mask, and its cgroup's CPU quota (a container's ``--cpus``).

Python's ``os.cpu_count()`` (and the affinity mask alone) sees every core of the host in a container given a quota
(``docker run --cpus 2`` on a 64-core host: 64), so threads sized on it outnumber the cores the process is given, and
the kernel throttles them all at each quota period. Every thread pool here is sized on ``usable_cores``.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from retriever.cgroups import controller_folders, read_file


def usable_cores(cgroups: Path | None = None, membership: Path | None = None) -> int:
    """The cores this process may run on (its affinity mask, where the system has one), fewer where its cgroup, or
    one above it, has a CPU quota: the quota rounded up (a quota of 1.5 cores is 2), as Go and the JVM count it.
    Missing or unreadable cgroup files are no quota (``cgroups``/``membership``: other places, for tests)."""
    cores = _affinity()
    quota = cpu_quota(cgroups, membership)
    return max(1, min(cores, quota)) if quota is not None else cores


def cap_openmp_threads() -> None:
    """Size OpenMP's pools (torch's intra-op threads, FAISS's, OpenBLAS's) on ``usable_cores`` where a CPU quota leaves
    fewer cores than the affinity mask: they size themselves on the mask. Call before torch or FAISS loads (they
    read ``OMP_NUM_THREADS`` then); one the user set stands."""
    quota = None if "OMP_NUM_THREADS" in os.environ else cpu_quota()
    if quota is not None and quota < _affinity():  # the quota in whole cores, at least 1
        os.environ["OMP_NUM_THREADS"] = str(quota)


def _affinity() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_quota(cgroups: Path | None = None, membership: Path | None = None) -> int | None:
    """The fewest cores a CPU quota on this process's cgroups allows (cgroup v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``), rounded up; None without one. Each folder from the process's
    cgroup up to the mount's root is read, since a quota set on a parent (a pod's, a slice's) binds its children."""
    quotas = [_v2_quota(folder) or _v1_quota(folder) for folder in controller_folders("cpu", cgroups, membership)]
    found = [quota for quota in quotas if quota is not None]
    return min(found) if found else None


def _v2_quota(folder: Path) -> int | None:
    """cgroup v2's ``cpu.max``: ``QUOTA PERIOD`` in microseconds, or ``max PERIOD`` for none."""
    words = read_file(folder / "cpu.max").split()
    return _cores(words[0], words[1]) if len(words) == 2 else None


def _v1_quota(folder: Path) -> int | None:
    """cgroup v1's ``cpu.cfs_quota_us`` (-1 for none) over ``cpu.cfs_period_us``."""
    return _cores(read_file(folder / "cpu.cfs_quota_us").strip(), read_file(folder / "cpu.cfs_period_us").strip())


def _cores(quota: str, period: str) -> int | None:
    """A quota over its period as whole cores, rounded up; None for no quota (``max``, -1) or garbled numbers."""
    if not all(text.isascii() and text.isdigit() for text in (quota, period)) or int(quota) == 0 or int(period) == 0:
        return None
    return math.ceil(int(quota) / int(period))
