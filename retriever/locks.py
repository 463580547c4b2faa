"""Lock files that keep two runs from writing the same output at once (``folders.exclusive_build``, an encode
worker's share): an flock, which the kernel drops with its process, on a file that names its holder's pid and host.
"""
from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from retriever.errors import RetrieverError

# What a lock file's record is read up to: a pid and a host name are far shorter, and the file may be no file
# (a link to a device that reads forever).
RECORD_CHARS = 512


@contextmanager
def held_lock(path: Path, refusal: Callable[[str], str]) -> Iterator[None]:
    """Hold an flock on the file ``path`` (it records our pid and host, and is removed on the way out), or raise at
    once ``refusal(the holder's pid, and host if another)`` when another process holds it. The kernel drops the lock
    with its process, so a lock file a killed run left behind blocks nobody, on this host. One another host left is
    refused too, saying how to remove it: on a shared file system (NFS) an flock may not reach across hosts, and
    whether that process still runs cannot be seen from here."""
    while True:
        handle = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _holder(handle.read(RECORD_CHARS))
            handle.close()
            raise RetrieverError(refusal(holder)) from None
        if path.exists() and os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
            handle.seek(0)
            recorded = handle.read(RECORD_CHARS)
            if _other_host(recorded) is None:
                break
            handle.close()
            raise RetrieverError(f"{refusal(_holder(recorded))}; if it no longer runs there (a run killed on that "
                                 f"host leaves its lock), remove {path}")
        handle.close()  # the holder before ours removed the file after we opened it: lock the new one
    try:
        _record_holder(handle.fileno())
        yield
    finally:
        try:
            path.unlink(missing_ok=True)
        except OSError:  # its folder turned read-only meanwhile: the file stays, but the lock goes with the handle
            pass
        handle.close()


def _record_holder(descriptor: int) -> None:
    """Our pid and host in the lock file, for a refused run to name; on a full disk the lock holds without them (the
    refused run says pid ?), so the command's own write can say which path it could not write (this one failed
    first, naming none)."""
    try:
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()} {socket.gethostname()}".encode())
    except OSError:
        pass


def _other_host(recorded: str) -> str | None:
    """The host a lock file's ``PID HOST`` names if it is not this one (a file of a pid alone is this host's)."""
    host = recorded.strip().partition(" ")[2].strip()
    return host if host and host != socket.gethostname() else None


def _holder(recorded: str) -> str:
    """A lock file's holder as a refusal names it: its pid, with its host if that is another."""
    pid = recorded.strip().partition(" ")[0] or "?"
    host = _other_host(recorded)
    return f"{pid} on host {host}" if host else pid


def remove_unheld_lock(path: Path) -> None:
    """A killed build's lock file (``exclusive_build``): nobody holds it, so it can go; a held one stays, and so does
    one of another host (``_other_host``)."""
    try:
        with open(path, encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _other_host(handle.read(RECORD_CHARS)) is None:
                path.unlink(missing_ok=True)
    except OSError:  # absent, or held (by a live build, this one's included)
        pass
