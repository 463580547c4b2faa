"""The small files every stage reads and writes: atomic writes, JSON and text lines.

A file with its final name is always complete: it is written under a hidden temporary name in the
same folder, flushed to disk, then renamed over the target (a rename within one file system is
atomic). Whole folders are swapped by ``folders.replace_folder`` instead.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from retriever.errors import InputFileError, RetrieverError, full_disk
from retriever.file_kinds import HEAD_BYTES, kind_error
from retriever.name_length import check_name_length
from retriever.output_paths import output_file_problem, through_link, written_in_place
from retriever.pid_names import left_by_dead_processes, writer_name
from retriever.texts import MID_FILE_BOM


def temporary_path(path: Path) -> Path:
    """Where ``path`` is written before the rename: hidden, in the same folder, one per process (``pid_names``)."""
    return path.with_name(f".{path.name}.tmp-{writer_name()}")


def _remove_dead_temporaries(path: Path) -> None:
    """Temporary files of ``path`` that killed processes left behind (they can be as large as the output)."""
    for leftover in left_by_dead_processes(path.parent, f".{path.name}.tmp-"):
        leftover.unlink(missing_ok=True)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Let ``write`` fill a temporary file, then make it ``path`` in one rename; a failure leaves nothing.
    A stream (``written_in_place``) is written directly; a symlink is written through."""
    path = Path(path)
    if not path.is_dir() and not written_in_place(path):  # its temporary's suffix must fit too
        check_name_length(through_link(path), "file name")
    problem = output_file_problem(path)
    if problem:
        raise RetrieverError(f"cannot write {path}: {problem}")
    if written_in_place(path):
        with write_errors_named(path, path):
            write(path)
        return
    target = through_link(path)
    tmp = temporary_path(target)
    with folders_made_for(target):
        _remove_dead_temporaries(target)
        try:
            with write_errors_named(path, tmp):
                write(tmp)
                with open(tmp, "rb+") as handle:
                    os.fsync(handle.fileno())
                os.replace(tmp, target)
        except BaseException:
            with suppress(OSError):  # a folder turned read-only keeps it; the next write removes a dead writer's
                tmp.unlink(missing_ok=True)
            raise
    sync_folder(target.parent)


@contextmanager
def folders_made_for(path: Path) -> Iterator[None]:
    """Make the missing folders above ``path``; a failure or Ctrl-C inside removes those left empty (an
    interrupted ``-o new/sub/run.trec`` left ``new/sub/`` behind)."""
    missing = list(itertools.takewhile(lambda folder: not folder.exists(), path.parents))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        with suppress(OSError):  # innermost first; one still holding something stops it
            for folder in missing:
                folder.rmdir()
        raise


@contextmanager
def write_errors_named(path: Path, written: Path) -> Iterator[None]:
    """A failed write of ``written`` (a full disk, a quota, a read-only mount) as one line naming ``path``;
    an error about another file is not ours to rename."""
    try:
        yield
    except OSError as error:
        if (error.filename is not None and str(error.filename) != str(written)) or error.strerror is None:
            raise
        full = full_disk(error, f"writing {path}")
        if full is not None:
            raise full from None
        raise RetrieverError(f"cannot write {path}: {error.strerror.lower()}; check the disk or choose another "
                             "path") from None


def sync_folder(folder: Path) -> None:
    """Make the rename itself durable; not possible on every platform, so best effort."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    with suppress(OSError):
        os.fsync(handle)
    os.close(handle)


class _MakingFailed(Exception):
    """An OSError raised while making the lines, carried past ``write_errors_named``: it is no error of the write."""


def _made(lines: Iterable[str]) -> Iterator[str]:
    """``lines``, an OSError in making them (a search or a read feeding the writer) carried as ``_MakingFailed``."""
    iterator = iter(lines)
    while True:
        try:
            line = next(iterator)
        except StopIteration:
            return
        except OSError as error:
            raise _MakingFailed(error) from None
        yield line


def atomic_write_lines(path: str | Path, lines: Iterable[str]) -> None:
    """Write text lines (each with its own newline) as UTF-8, atomically, without holding them all. ``lines`` may
    be made as they are written (a search, batch by batch): an OSError in making them is raised as it came, not
    named as a failed write of ``path``."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(_made(lines))

    try:
        atomic_write(path, write)
    except _MakingFailed as carried:
        raise carried.args[0] from None


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
        data = path.read_bytes()
        foreign = kind_error(path, data[:HEAD_BYTES])
        if foreign is not None:
            raise foreign
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise InputFileError(path, None, "file not found", hint) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputFileError(path, None, f"unreadable ({error})", hint) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputFileError(path, error.lineno, f"malformed JSON ({error.msg})", hint) from None
    except (RecursionError, ValueError) as error:  # past the reader's limits: a traceback otherwise
        raise InputFileError(path, None, json_limit_problem(error), hint) from None


def json_limit_problem(error: RecursionError | ValueError) -> str:
    """What passes Python's JSON reader: nesting past the C parser's guard (about a thousand levels), or an integer
    past Python's digit limit (its message says set_int_max_str_digits)."""
    if isinstance(error, RecursionError):
        return (f"the file nests arrays or objects deeper than Python's JSON reader goes (about {sys.getrecursionlimit()} "
                "levels)")
    digits = re.search(r"has (\d+) digits", str(error))
    return (f"a number of {digits[1] if digits else 'too many'} digits, more than Python's JSON reader takes "
            f"({sys.get_int_max_str_digits()})")


def repeated_key(pairs: Iterable[tuple[str, object]]) -> tuple[str, int] | None:
    """The first key a JSON object's (key, value) pairs give more than once, and how often: ``json.loads`` keeps
    the last value silently (other parsers the first), so the object says two things."""
    counts = Counter(key for key, _ in pairs)
    return next(((key, count) for key, count in counts.items() if count > 1), None)


class RepeatedKeyError(ValueError):
    """A JSON object giving one key more than once (raised by ``unique_keys``)."""

    def __init__(self, key: str, count: int) -> None:
        super().__init__(f"the key {key!r} is given {count} times in one object")
        self.key, self.count = key, count


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A ``json.loads`` object hook refusing a key given twice in any object (``repeated_key``); the dict is built
    first, so an object without one costs a length comparison (a run file has one object per hit)."""
    record = dict(pairs)
    if len(record) != len(pairs):
        raise RepeatedKeyError(*repeated_key(pairs))
    return record


def read_json_object(path: str | Path, hint: str = "fix or delete the file", missing: dict | None = None) -> dict:
    """``read_json`` of a file that must hold a JSON object; ``missing``, when given, stands for an absent file."""
    if missing is not None and not Path(path).is_file():
        return missing
    value = read_json(path, hint)
    if not isinstance(value, dict):
        raise InputFileError(path, None, f"not a JSON object (it holds a {type(value).__name__})", hint)
    return value


def decoded_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) of non-blank lines without a leading BOM, naming the line of any invalid UTF-8,
    or what the file is when its first line is not UTF-8 text (``file_kinds``: a run.trec.gz, a UTF-16 corpus).

    Every line-based reader (corpus, queries, qrels, runs, training files) reads through this."""
    path = Path(path)
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            foreign = kind_error(path, raw[:HEAD_BYTES]) if number == 1 else None
            if foreign is not None:  # UTF-16 without a mark decodes as UTF-8, NULs and all
                raise foreign
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


def carriage_return_error(path: Path, number: int) -> InputFileError:
    """What line-based readers say of a line holding a CR: the usual cause is a file with CR-only line endings,
    which reads as one long line."""
    return InputFileError(path, number, "the line holds a carriage return (CR): the file has CR-only line endings, "
                          "or a text holds a CR", "convert the line endings to LF (e.g. tr '\\r' '\\n') and replace "
                          "CRs inside texts by spaces")


def mid_file_bom_error(path: Path, number: int) -> InputFileError:
    """What JSON line readers say of a line starting with a byte-order mark past the first (files joined with cat):
    JSON refuses the mark, and its "Expecting value at column 1" named no cause, while TSV and TREC readers named it."""
    fixed = shlex.quote(str(path.with_name(path.name + ".fixed")))
    return InputFileError(path, number, f"the line starts with {MID_FILE_BOM}",
                          f"or strip every such mark: sed '1!s/^\\xEF\\xBB\\xBF//' {shlex.quote(str(path))} > {fixed}")


def check_is_file(path: Path) -> None:
    """Refuse a missing path or a folder where a file is expected, before anything is read."""
    if not path.exists():
        raise InputFileError(path, None, "file not found", "check the path")
    if path.is_dir():
        raise InputFileError(path, None, "is a directory, not a file", "pass a file path")

