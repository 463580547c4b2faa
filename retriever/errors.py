"""Errors a user can act on.

The CLI prints a ``RetrieverError`` as one line and exits non-zero; anything else is a bug
and keeps its traceback.
"""
from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class RetrieverError(Exception):
    """A problem with the user's input or environment, with a message saying what to do."""


class NotForThisIndex(RetrieverError):
    """A search setting the index (or the search mode) cannot take, such as --nprobe for a flat index: the caller's
    usage, not the data's, so the CLI answers it as a usage error (exit 2), as build answers --nlist with hnsw."""


class IndexDamaged(RetrieverError):
    """A file of an index folder is damaged, or is not the folder's own: the fault of whoever keeps the index, not
    of the input that reached it (a server answers 500, not 400), and mended by rebuilding what the message names."""


class EndsInRerun(RetrieverError):
    """A message ending "rerun the same command", to which the CLI adds whether the rerun keeps the finished work
    (``cli.outputs.rerun_note``), which only the command knows: a build, a search into a file or a training resumes,
    while evaluate, mine and `index` of a type other than ivf-ondisk start over; every such line said the work was
    kept."""


class MachineLimit(EndsInRerun):
    """The machine ran out of disk, file size or memory."""


OUT_OF_SPACE_HINT = "free some space (or choose another path) and rerun the same command"


def out_of_space(where: str = "") -> MachineLimit:
    """A full disk or quota, wherever it strikes: a fault of the machine, said one way everywhere."""
    return MachineLimit(f"no space left on the device{' ' if where else ''}{where}; {OUT_OF_SPACE_HINT}")


def _file_size_limit() -> int | None:
    """This process's file-size limit (`ulimit -f`) in bytes, or None when it has none."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if limit == resource.RLIM_INFINITY else limit


def file_too_large(where: str = "") -> MachineLimit:
    """A write refused with EFBIG: past the process's file-size limit (`ulimit -f`, which a batch system may set), or
    past the largest file its file system takes (FAT32's 4 GiB); the disk may have room, so "check the disk" misled."""
    limit = _file_size_limit()
    where = f", {where}" if where else ""
    if limit is not None:
        return MachineLimit(f"a file grew past this process's file-size limit, {limit / 1024:.1f} KiB (ulimit -f "
                            f"{limit // 1024}){where}; raise it (ulimit -f unlimited) and rerun the same command")
    return MachineLimit(f"a file grew past the largest its file system takes (FAT32's is 4 GiB){where}; choose a "
                        "path on another file system and rerun the same command")


# A short write reported without its errno, on a full disk or quota: numpy's ``tofile`` (under ``np.save``), and
# torch.save's zip writer finding the file shorter than what it wrote
_SHORT_WRITE = re.compile(r"^\d+ requested and \d+ written$|inline_container\.cc:\d+\] \. unexpected pos \d+ vs \d+$",
                          re.MULTILINE)


def full_disk(error: BaseException, where: str = "") -> MachineLimit | None:
    """``out_of_space`` for a full disk or quota (``file_too_large`` for a file past a size limit) however a library
    reports it (Python's and Arrow's errno, FAISS's and Arrow's text, numpy's and torch.save's short writes), saying
    ``where`` when given, else the file it names; None for any other error."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        named = where or (f"writing {error.filename}" if error.filename else "")
        return file_too_large(named) if error.errno == errno.EFBIG else out_of_space(named)
    text = str(error).strip()
    shown = where or f"({error_line(error)})"
    if "File too large" in text:  # FAISS's text for EFBIG
        return file_too_large(shown)
    if "No space left on device" in text or "Disk quota exceeded" in text or _SHORT_WRITE.search(text):
        if _SHORT_WRITE.search(text) and _file_size_limit() is not None:  # no errno tells EFBIG from ENOSPC:
            return file_too_large(shown)  # the limit is the likelier cause where one is set
        return out_of_space(shown)
    return None


def name_too_long(error: BaseException) -> RetrieverError | None:
    """A path holding a name longer than its file system takes (ENAMETOOLONG, often 255 bytes), wherever it is met;
    None for any other error."""
    if not (isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG):
        return None
    return RetrieverError(f"{error.filename or 'a path'}: a name in the path is longer than the file system takes "
                          "(often 255 bytes); choose a shorter one")


@contextmanager
def full_disk_named(path: Path) -> Iterator[None]:
    """A full disk met inside, by a library writing into ``path`` (a folder being built), as one line naming
    ``path``: Arrow named no file, FAISS the hidden building folder, and numpy's and torch's short writes and
    safetensors' error (not an OSError) were tracebacks."""
    try:
        yield
    except RetrieverError:
        raise
    except Exception as error:
        full = full_disk(error, f"writing {path}")
        if full is None:
            raise
        raise full from None


@contextmanager
def refused_writes_named(path: Path) -> Iterator[None]:
    """A write under ``path`` (a training run's output) that the file system refuses mid-run (the folder made
    read-only, a mount remounted read-only after disk errors) as one line naming the file and what to do: the
    Trainer's checkpoint save died of a PermissionError traceback. The rerun resumes from the last checkpoint."""
    try:
        yield
    except OSError as error:
        refused = error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and error.filename is not None
        within = refused and Path(os.path.abspath(error.filename)).is_relative_to(os.path.abspath(home_expanded(path)))
        if not within:
            raise
        raise EndsInRerun(f"cannot write {error.filename}: {error.strerror.lower()}; make {path} writable and rerun "
                          "the same command") from None


OUT_OF_MEMORY_HINT = ("free some memory or raise the process's memory limit (`ulimit -v` counts memory-mapped files: "
                      "an ivf-ondisk index needs address space for its whole index.ivfdata), then rerun the same "
                      "command")


def out_of_memory(where: str = "") -> MachineLimit:
    """Memory or address space running out, wherever it strikes: a limit of the machine, not damage to a file."""
    return MachineLimit(f"out of memory{' ' if where else ''}{where}; {OUT_OF_MEMORY_HINT}")


def is_out_of_memory(error: BaseException) -> bool:
    """Python's MemoryError (Arrow's ArrowMemoryError is one), the OS's ENOMEM, or a C++ library's report of
    either in its text (FAISS: ``could not mmap …: Cannot allocate memory``, ``std::bad_alloc``; Arrow under
    `ulimit -v`: ``Failed to launch worker thread``, the thread's stack not mapped)."""
    if isinstance(error, MemoryError) or (isinstance(error, OSError) and error.errno == errno.ENOMEM):
        return True
    return isinstance(error, Exception) and any(  # FAISS raises RuntimeError, Arrow its own ArrowException
        text in str(error) for text in ("Cannot allocate memory", "std::bad_alloc", "Failed to launch worker thread"))


def faiss_message(error: Exception) -> str:
    """FAISS's reason without the C++ function and source line it prefixes to it."""
    return re.sub(r"^Error in .*? at \S+:\d+: (Error: )?", "", str(error).strip().splitlines()[-1])


def error_line(error: BaseException) -> str:
    """What a library's error says, for a line of ours: its last line (the reason, after any traceback text) without
    FAISS's C++ prefix, at most 200 characters; its type's name when it says nothing."""
    return (faiss_message(error) if str(error).strip() else type(error).__name__)[:200]


class InputFileError(RetrieverError):
    """A problem at a known place in an input file, reported as ``file:line: problem``."""

    def __init__(self, path: str | Path, line: int | None, problem: str, hint: str = "") -> None:
        where = f"{path}:{line}" if line is not None else f"{path}"
        message = f"{where}: {problem}"
        if hint:
            message += f"; {hint}"
        super().__init__(message)
        self.path = str(path)
        self.line = line
        self.problem = problem
        self.hint = hint

    def __reduce__(self):
        """Rebuilt from its parts, so one raised in a worker process or Ray task reaches the caller intact."""
        return type(self), (self.path, self.line, self.problem, self.hint)


def check_kind(value: object, kind: type | tuple[type, ...], name: str, wanted: str) -> None:
    """A library argument of the wrong kind, refused in one line naming it: it failed deep in the call instead, as
    an AttributeError (``'str' object has no attribute 'metadata'``) or pathlib's TypeError naming no argument."""
    if not isinstance(value, kind):
        raise RetrieverError(f"{name} must be {wanted}, not {type(value).__name__} {repr(value)[:60]}")


CORPUS_PATH = "a path to a corpus file or BEIR folder"  # what given_path asks for, in the words each caller uses
INDEX_PATH = "the index folder's path (str or Path)"


def given_path(value: object, name: str, wanted: str) -> Path:
    """A library path argument as a Path with ``~`` expanded to the home folder, as model paths and the shell expand
    it (a literal ``~`` folder was made in the working folder, and pyarrow, which expands it, wrote shards elsewhere);
    refused in one line if it is of another kind or an empty or blank name: pathlib reads "" (an unset variable) as
    the working folder, which was then trained into, read or overwritten."""
    check_kind(value, (str, os.PathLike), name, wanted)
    if not str(os.fspath(value)).strip():
        raise RetrieverError(f"{name} is empty (an unset variable?): give {wanted}")
    return home_expanded(value)


def home_expanded(value: str | os.PathLike) -> Path:
    """``value`` with a leading ``~`` or ``~USER`` read as that home folder, as the shell reads it; a user with no
    home folder is one line naming the path: pathlib raised a bare RuntimeError, a traceback."""
    path = Path(value)
    try:
        return path.expanduser()
    except RuntimeError:
        raise RetrieverError(f"{path}: no home folder for {path.parts[0]}; write ./{path} for a folder of that "
                             "name") from None
