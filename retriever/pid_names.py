"""Names of the temporary files and hidden folders a process writes (``.NAME.tmp-PID@HOST``,
``.NAME.building-PID@HOST``…), and whether the process that wrote one has certainly ended.

A pid says whether its process runs only on the host that gave it: on a shared file system (NFS) a name with a pid
alone was judged by the kernel of whichever host looked, so a write on one host deleted the temporary a live process
on another was writing. The name carries the host; another host's names are kept (and named by those that report),
never judged. A name without a host (made by an earlier version) is taken as this host's, as it always was: those
leftovers are still cleaned, and only a run of an earlier version on another host is unprotected.
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# The most characters a name's host takes (``name_length.BESIDE_NAME_BYTES`` counts them).
HOST_CHARS = 20
_PLAIN_HOST = re.compile(rf"[A-Za-z0-9-]{{1,{HOST_CHARS}}}")
# What follows a name's kind (``.tmp-``, ``.building-``…): the pid, and the host in names made since it is recorded.
WRITER = rf"\d+(?:@[A-Za-z0-9~-]{{1,{HOST_CHARS}}})?"


def host_tag(host: str | None = None) -> str:
    """``host`` (this one's by default) as names carry it: as is when it is at most HOST_CHARS letters, digits and
    hyphens; else its first 11 characters (others as hyphens: a dot would end a name in a file suffix), ``~`` and 8 hex
    digits of its SHA-256, so that hosts alike at the start still differ."""
    host = socket.gethostname() if host is None else host
    if _PLAIN_HOST.fullmatch(host):
        return host
    return re.sub(r"[^A-Za-z0-9-]", "-", host)[:11] + "~" + hashlib.sha256(host.encode()).hexdigest()[:8]


def writer_name() -> str:
    """``PID@HOST`` of this process, for the names of what it writes and may leave behind if killed."""
    return f"{os.getpid()}@{host_tag()}"


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs on this host (one of another user's counts: it cannot be signalled, but it runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Writer:
    """The process a name says wrote it; ``host`` is None in a name without one (taken as this host's)."""

    pid: int
    host: str | None

    @property
    def elsewhere(self) -> bool:
        return self.host is not None and self.host != host_tag()

    @property
    def gone(self) -> bool:
        """Whether it has certainly ended: only a process of this host can be looked up."""
        return not self.elsewhere and not process_alive(self.pid)

    def kept_line(self, path: Path, what: str, remedy: str) -> str:
        """The line that says another host's ``path`` was kept: ``what`` it is, whose, and ``remedy``."""
        return f"kept {path}: {what} process {self.pid} on host {self.host}, which cannot be seen from here; {remedy}"


def writer_of(text: str) -> Writer | None:
    """The writer ``text`` (a name's end, after its kind) names, or None if it names none."""
    if re.fullmatch(WRITER, text) is None:
        return None
    pid, _, host = text.partition("@")
    return Writer(int(pid), host or None)


def left_behind(folder: Path, prefix: str, marker: str = "") -> list[tuple[Path, Writer]]:
    """Entries of ``folder`` named ``prefix`` and a writer (``writer_of``), with it. With ``marker``, any name between
    ``prefix`` and the marker (``prefix`` ".", marker ".tmp-": every output's temporaries in a folder several write)."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:  # absent, or not listable (a folder one may write in but not read): nothing to clean
        return []
    found = []
    for entry in entries:
        rest = entry.name[len(prefix):]
        if not entry.name.startswith(prefix) or marker not in rest:  # "" is in every name
            continue
        writer = writer_of(rest.rpartition(marker)[2] if marker else rest)
        if writer is not None:
            found.append((entry, writer))
    return found


def left_by_dead_processes(folder: Path, prefix: str, marker: str = "") -> list[Path]:
    """What killed writers of this host left (``left_behind`` whose writer is ``gone``): never a live one's, nor one
    of another host, whose pids cannot be looked up here."""
    return [entry for entry, writer in left_behind(folder, prefix, marker) if writer.gone]


def clear_left_behind(leftovers: Iterable[tuple[Path, Writer]], what: str, remedy: str) -> None:
    """Delete what killed writers of this host left among ``leftovers`` (``left_behind``), keep a live one's, and name
    another host's on stderr (``Writer.kept_line`` with ``what`` and ``remedy``): its process cannot be seen here."""
    for path, writer in leftovers:
        if writer.elsewhere:
            print(writer.kept_line(path, what, remedy), file=sys.stderr)
        elif writer.gone:
            path.unlink(missing_ok=True)
