"""The small files every stage reads and writes: atomic writes, JSON and text lines.

A file with its final name is always complete: it is written under a hidden temporary name in the
same folder, flushed to disk, then renamed over the target (a rename within one file system is
atomic). Whole folders are swapped by ``folders.replace_folder`` instead.
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from retriever.errors import InputFileError, RetrieverError


def temporary_path(path: Path) -> Path:
    """Where ``path`` is written before the rename: hidden, in the same folder, one per process."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def creatable_problem(path: Path) -> str | None:
    """Why nothing can be created at ``path``, or None: its nearest existing ancestor is a file, or no entry
    can be made in it (tried with an empty folder, removed at once: permission bits do not tell for root,
    nor for /proc)."""
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
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
    problem = creatable_problem(path)
    return f"{problem}; give another path" if problem else None


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Let ``write`` fill a temporary file, then make it ``path`` in one rename; a failure leaves nothing."""
    path = Path(path)
    problem = output_file_problem(path)
    if problem:
        raise RetrieverError(f"cannot write {path}: {problem}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable; not possible on every platform, so best effort."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def atomic_write_lines(path: str | Path, lines: Iterable[str]) -> None:
    """Write text lines (each with its own newline) as UTF-8, atomically, without holding them all."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(lines)

    atomic_write(path, write)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_lines(path, [text])


def write_json(path: str | Path, value: object) -> None:
    """Indented JSON with a final newline, atomically."""
    atomic_write_text(path, json.dumps(value, indent=2) + "\n")


def read_json(path: str | Path, hint: str = "fix or delete the file") -> object:
    """A JSON file's value; a missing, undecodable or malformed file is a one-line ``FILE:LINE: problem; hint``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(path, None, "file not found", hint) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputFileError(path, None, f"unreadable ({error})", hint) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputFileError(path, error.lineno, f"malformed JSON ({error.msg})", hint) from None


def read_json_object(path: str | Path, hint: str = "fix or delete the file", missing: dict | None = None) -> dict:
    """``read_json`` of a file that must hold a JSON object; ``missing``, when given, stands for an absent file."""
    if missing is not None and not Path(path).is_file():
        return missing
    value = read_json(path, hint)
    if not isinstance(value, dict):
        raise InputFileError(path, None, f"not a JSON object (it holds a {type(value).__name__})", hint)
    return value


def decoded_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) of non-blank lines without a leading BOM, naming the line of any invalid UTF-8.

    Every line-based reader (corpus, queries, qrels, runs, training files) reads through this."""
    path = Path(path)
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputFileError(path, number, f"invalid UTF-8 at byte {error.start} of the line",
                                     "re-encode the file as UTF-8") from None
            if number == 1:
                line = line.lstrip("\ufeff")
            line = line.rstrip("\r\n")
            if line.strip():
                yield number, line


def check_is_file(path: Path) -> None:
    """Refuse a missing path or a folder where a file is expected, before anything is read."""
    if not path.exists():
        raise InputFileError(path, None, "file not found", "check the path")
    if path.is_dir():
        raise InputFileError(path, None, "is a directory, not a file", "pass a file path")

