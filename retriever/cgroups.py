"""The folders of this process's cgroups, where a container's limits are read: its CPU quota (``cores``) and its
memory limit (``train_memory``).

A limit set on a parent cgroup (a pod's, a slice's) binds its children, so each reader looks at every folder from the
process's own cgroup up to the mount's root, in cgroup v2's unified hierarchy and in the v1 hierarchy mounted for
its controller.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath

CGROUPS = Path("/sys/fs/cgroup")  # where the cgroup file systems are mounted
MEMBERSHIP = Path("/proc/self/cgroup")  # this process's cgroup in each hierarchy


def controller_folders(controller: str, cgroups: Path | None = None, membership: Path | None = None) -> list[Path]:
    """The folders holding ``controller``'s files (``cpu``, ``memory``) for this process, its own cgroup's first,
    then each above it up to the mount: v2's, and v1's where that controller is mounted apart. No folder where the
    membership file is missing or unreadable (``cgroups``/``membership``: other places, for tests)."""
    cgroups = CGROUPS if cgroups is None else cgroups
    try:
        lines = (MEMBERSHIP if membership is None else membership).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    folders = []
    for line in lines:
        _, controllers, place = (line.split(":", 2) + ["", ""])[:3]
        if line.startswith("0::"):  # v2's unified hierarchy
            folders += _folders_up(cgroups, place)
        elif controller in controllers.split(","):  # v1: mounted as cpu, or cpu,cpuacct (with a cpu link, most often)
            mount = next((cgroups / name for name in (controller, controllers) if (cgroups / name).is_dir()), None)
            folders += _folders_up(mount, place) if mount else []
    return folders


def read_file(path: Path) -> str:
    """A cgroup file's text, or '' where it is missing or unreadable."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def _folders_up(mount: Path, place: str) -> list[Path]:
    """The process's cgroup folder under ``mount`` and each folder above it up to ``mount``. A place outside the
    mount (``/..``, as a cgroup namespace shows another's cgroup) gives the mount alone."""
    parts = PurePosixPath(place.strip() or "/").parts[1:]
    if ".." in parts:
        parts = ()
    return [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]
