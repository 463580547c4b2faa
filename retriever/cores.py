"""The CPU cores this process may use: its affinity mask, and its cgroup's CPU quota (a container's ``--cpus``).

Python's ``os.cpu_count()`` (and the affinity mask alone) sees every core of the host in a container given a quota
(``docker run --cpus 2`` on a 64-core host: 64), so threads sized on it outnumber the cores the process is given, and
the kernel throttles them all at each quota period. Every thread pool here is sized on ``usable_cores``.
"""
from __future__ import annotations

import math
import os
from pathlib import Path, PurePosixPath

CGROUPS = Path("/sys/fs/cgroup")  # where the cgroup file systems are mounted
MEMBERSHIP = Path("/proc/self/cgroup")  # this process's cgroup in each hierarchy


def usable_cores(cgroups: Path | None = None, membership: Path | None = None) -> int:
    """The cores this process may run on (its affinity mask, where the system has one), fewer where its cgroup, or
    one above it, has a CPU quota: the quota rounded up (a quota of 1.5 cores is 2), as Go and the JVM count it.
    Missing or unreadable cgroup files are no quota (``cgroups``/``membership``: other places, for tests)."""
    cores = _affinity()
    quota = cpu_quota(CGROUPS if cgroups is None else cgroups, MEMBERSHIP if membership is None else membership)
    return max(1, min(cores, quota)) if quota is not None else cores


def cap_openmp_threads() -> None:
    """Size OpenMP's pools (torch's intra-op threads, FAISS's, OpenBLAS's) on ``usable_cores`` where a CPU quota leaves
    fewer cores than the affinity mask: they size themselves on the mask. Call before torch or FAISS loads (they
    read ``OMP_NUM_THREADS`` then); one the user set stands."""
    if "OMP_NUM_THREADS" not in os.environ and (cores := usable_cores()) < _affinity():
        os.environ["OMP_NUM_THREADS"] = str(cores)


def _affinity() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_quota(cgroups: Path, membership: Path) -> int | None:
    """The fewest cores a CPU quota on this process's cgroups allows (cgroup v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``), rounded up; None without one. Each folder from the process's
    cgroup up to the mount's root is read, since a quota set on a parent (a pod's, a slice's) binds its children."""
    try:
        lines = membership.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    quotas = []
    for line in lines:
        _, controllers, place = (line.split(":", 2) + ["", ""])[:3]
        if line.startswith("0::"):  # v2's unified hierarchy
            quotas += [_v2_quota(folder) for folder in _folders_up(cgroups, place)]
        elif "cpu" in controllers.split(","):  # v1: mounted as cpu, or cpu,cpuacct (with a cpu link, most often)
            mount = next((cgroups / name for name in ("cpu", controllers) if (cgroups / name).is_dir()), None)
            quotas += [_v1_quota(folder) for folder in _folders_up(mount, place)] if mount else []
    found = [quota for quota in quotas if quota is not None]
    return min(found) if found else None


def _folders_up(mount: Path, place: str) -> list[Path]:
    """The process's cgroup folder under ``mount`` and each folder above it up to ``mount``. A place outside the
    mount (``/..``, as a cgroup namespace shows another's cgroup) gives the mount alone."""
    parts = PurePosixPath(place.strip() or "/").parts[1:]
    if ".." in parts:
        parts = ()
    return [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _v2_quota(folder: Path) -> int | None:
    """cgroup v2's ``cpu.max``: ``QUOTA PERIOD`` in microseconds, or ``max PERIOD`` for none."""
    words = _read(folder / "cpu.max").split()
    return _cores(words[0], words[1]) if len(words) == 2 else None


def _v1_quota(folder: Path) -> int | None:
    """cgroup v1's ``cpu.cfs_quota_us`` (-1 for none) over ``cpu.cfs_period_us``."""
    return _cores(_read(folder / "cpu.cfs_quota_us").strip(), _read(folder / "cpu.cfs_period_us").strip())


def _cores(quota: str, period: str) -> int | None:
    """A quota over its period as whole cores, rounded up; None for no quota (``max``, -1) or garbled numbers."""
    if not all(text.isascii() and text.isdigit() for text in (quota, period)) or int(quota) == 0 or int(period) == 0:
        return None
    return math.ceil(int(quota) / int(period))


def _read(path: Path) -> str:
    """A cgroup file's text, or '' where it is missing or unreadable."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""
