"""Peak memory of a process tree, sampled from /proc (Linux): anonymous vs file-backed pages.

RssAnon is what the process itself allocated; RssFile counts mapped file pages (an on-disk
index's inverted lists, a memory-mapped doc store), which the kernel can drop and re-read, so
the targets are on RssAnon. VmHWM is the kernel's own peak of the total resident set.
"""
from __future__ import annotations

import threading
from pathlib import Path

FIELDS = ("RssAnon", "RssFile", "VmHWM")


def status(pid: int) -> dict[str, int]:
    """The FIELDS of /proc/PID/status in bytes (empty if the process is gone)."""
    values = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in FIELDS:
                values[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return values


def descendants(root: int) -> list[int]:
    """``root`` and every process below it."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(parents.get(pid, ()))
    return tree


class Sampling:
    """Calls ``sample()`` every ``interval`` seconds in a thread while the ``with`` block runs: the one
    background loop the memory and load samplers share."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


class PeakSampler(Sampling):
    """Samples a process tree every ``interval`` seconds in a thread: the peak of the tree's summed
    RssAnon (and RssFile at that moment), and the largest VmHWM of any one process."""

    def __init__(self, root: int, interval: float = 0.5) -> None:
        super().__init__(interval)
        self.root = root
        self.peak_anon = self.file_at_peak = self.peak_file = self.max_hwm = self.samples = 0

    def sample(self) -> None:
        found = [status(pid) for pid in descendants(self.root)]
        anon = sum(s.get("RssAnon", 0) for s in found)
        mapped = sum(s.get("RssFile", 0) for s in found)
        self.samples += 1
        if anon > self.peak_anon:
            self.peak_anon, self.file_at_peak = anon, mapped
        self.peak_file = max(self.peak_file, mapped)
        self.max_hwm = max([self.max_hwm, *(s.get("VmHWM", 0) for s in found)])

    def summary(self) -> dict[str, int]:
        return {"peak_rss_anon": self.peak_anon, "rss_file_at_peak": self.file_at_peak,
                "peak_rss_file": self.peak_file, "max_vm_hwm": self.max_hwm, "samples": self.samples}
