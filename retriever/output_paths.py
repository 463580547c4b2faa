"""Whether an output path can be written, asked before a command's work rather than failed at its end: links that
loop or lead nowhere, folders, sockets, streams written in place, and places nothing can be created in."""
from __future__ import annotations

import errno
import os
import re
import stat
import threading
from pathlib import Path

from retriever.errors import RetrieverError


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: a terminal obeys them


def control_character_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot name an output, or None: a control character (a newline, an ESC sequence) in it broke the
    one-line summary and error lines naming it, or was obeyed by the terminal. Shown as Python escapes."""
    control = _CONTROL.search(str(path))
    if control is None:
        return None
    return (f"{str(path)!r}: the path holds a control character ({control.group()!r}), which would break the "
            "one-line messages naming it")


def creatable_problem(path: Path) -> str | None:
    """Why nothing can be created at ``path``, or None: a link on the way loops or leads nowhere, its nearest existing
    ancestor is a file, or no entry can be made in it (tried with an empty folder, removed at once: permission bits
    do not tell for root, nor for /proc)."""
    try:
        os.stat(path)
    except OSError as error:  # pathlib reads a loop as absent, then resolve() raises RuntimeError
        if error.errno == errno.ELOOP:
            return f"{path} goes through a symbolic link that leads back to itself (a loop); fix the link"
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():  # mkdir cannot make a folder where a link is (FileExistsError)
            return f"{existing} is a symbolic link to {os.readlink(existing)}, which does not exist, so {path} " \
                   "cannot be created under it"
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, so {path} cannot be created under it"
    probe = existing / f".{path.name}.probe-{os.getpid()}-{threading.get_ident()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as error:
        return f"nothing can be created in {existing} ({error.strerror})"
    return None


def output_file_problem(path: Path) -> str | None:
    """Why a file could never be written at ``path`` (a folder is there, or it cannot be created), so commands
    can refuse it before their work rather than fail at the end of it."""
    if path.is_dir():
        return f"{path} is a folder; give a file path"
    if written_in_place(path):
        if stat.S_ISSOCK(os.stat(path).st_mode):  # open() fails with ENXIO, after the work
            return f"{path} is a socket, which cannot be opened as a file; give another path"
        return None if os.access(path, os.W_OK) else f"{path} cannot be written (permission denied); give another path"
    problem = creatable_problem(through_link(path))
    return f"{problem}; give another path" if problem else None


def written_in_place(path: Path) -> bool:
    """Whether ``path`` is a stream, not a file to replace: an existing device, pipe or socket, or a link through
    /proc (``/dev/stdout``, ``/dev/fd/N``). Renaming over one would replace the entry instead of feeding it."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return True
    except OSError:
        return False
    hop = Path(os.path.abspath(path))
    for _ in range(40):  # the kernel's own limit on links in a path
        if str(hop).startswith(("/proc/", "/dev/fd/")):
            return True
        if not hop.is_symlink():
            return False
        hop = Path(os.path.abspath(hop.parent / os.readlink(hop)))
    return False


def check_output_apart(output: Path, label: str, inputs: dict[str, str | Path | None]) -> None:
    """Refuse an output (``label``: the flag or what it is) that is an existing input file, or an existing file
    inside an input folder (an index, a BEIR collection), before any work: writing it would destroy what is read.
    The CLI's commands and the library's mining ask it alike."""
    target = output.resolve()
    if not target.is_file():
        return
    for name, source in inputs.items():
        source = None if source is None else Path(source).resolve()
        if source is not None and (source == target or (source.is_dir() and source in target.parents)):
            what = "is the" if source == target else "is a file of the"
            raise RetrieverError(f"{label} {output} {what} {name} input, which it would overwrite; give another path")


def through_link(path: Path) -> Path:
    """The file a symlink names (it is written through, so the link stays a link), or ``path`` itself."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path
