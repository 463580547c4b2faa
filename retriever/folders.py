"""Replacing a folder so that its path always holds the old version or the new one.

A new index is assembled in a hidden ``.NAME.building-PID`` beside ``NAME``. Where the
kernel can (Linux ``renameat2(RENAME_EXCHANGE)``, on ext4, xfs, btrfs, tmpfs…), the two are
swapped in one atomic step and the old version, now under the hidden name, is deleted: a crash
at any moment leaves ``NAME`` whole. Elsewhere the fallback is two renames, ``NAME`` →
``.NAME.old-PID`` then ``.NAME.building-PID`` → ``NAME``; a crash between them leaves ``NAME``
missing for a moment, and the next build puts ``.NAME.old-PID`` back. Hidden folders of dead
processes are deleted by the next build of the same ``NAME``; their names end in ``@HOST`` too, and another host's are
kept and named (``pid_names``: its processes cannot be seen from here).

Model folders (`train`, `pretrain`) are staged too and moved in by ``publish_model_folder``, which
keeps what an existing output folder holds besides the model (its ``checkpoints/``).
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from retriever.errors import EndsInRerun, RetrieverError
from retriever.output_paths import control_character_problem, creatable_problem
from retriever.locks import held_lock, remove_unheld_lock
from retriever.name_length import BESIDE_NAME_BYTES, INSIDE_PATH_BYTES, check_name_length
from retriever.pid_names import WRITER, left_by_dead_processes, writer_name, writer_of

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
# Tests set this to a file name: the process creates it after the swap and waits, so it can be killed there.
PAUSE_ENV = "RETRIEVER_TEST_PAUSE_AFTER_SWAP"


def temporary_folder(output: Path, kind: str = "building") -> Path:
    """``.NAME.building-PID@HOST`` (or ``kind``) beside ``output``: whose it is, for ``clean_stale`` to judge."""
    return output.parent / f".{output.name}.{kind}-{writer_name()}"


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths; False when the platform or filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: no exchange here, use the fallback
        return False
    raise OSError(error, os.strerror(error), str(a))


def _pause_for_tests(stage: str) -> None:
    marker = os.environ.get(PAUSE_ENV)
    if marker:  # whole when it appears: a test polling for the file read it empty between create and write
        Path(f"{marker}.part").write_text(stage)
        os.replace(f"{marker}.part", marker)
        time.sleep(60)


def replace_folder(building: Path, output: Path) -> None:
    """Put the complete folder ``building`` at ``output``, replacing what is there. A rename the filesystem refuses
    (its folder turned read-only) is one line, and what was at ``output`` stays there."""
    try:
        _replace_folder(building, output)
    except OSError as error:
        why = (error.strerror or str(error)).lower()
        raise EndsInRerun(f"{output}: cannot move the finished folder into place ({why}); make {output.parent} "
                          "writable and rerun the same command") from None  # the CLI says whether work is kept


def _replace_folder(building: Path, output: Path) -> None:
    if not output.exists():
        os.replace(building, output)
        return
    if _exchange(building, output):
        _pause_for_tests("exchanged")
        shutil.rmtree(building, ignore_errors=True)  # now the old version
        return
    old = temporary_folder(output, "old")
    os.replace(output, old)
    _pause_for_tests("moved-old-aside")
    try:
        os.replace(building, output)
    except OSError:
        os.replace(old, output)
        raise
    shutil.rmtree(old, ignore_errors=True)


def named_output(output: Path, flag: str = "--output") -> Path:
    """``output`` with a name of its own: ``.`` (or ``dir/..``) becomes the folder it means, since NAME.shards
    and the hidden .NAME.building-PID are made beside it; the filesystem root is refused."""
    if output.name in ("", ".."):
        output = output.resolve()
    if not output.name:
        raise RetrieverError(f"{output}: cannot be an output folder (it has no name to put files beside); "
                             f"choose a folder below it as {flag}")
    check_output_name(output, flag, BESIDE_NAME_BYTES)
    return output


def check_output_name(output: Path, flag: str, beside: int = 0) -> None:
    """Refuse up front an output path Arrow and FAISS cannot take (not UTF-8: they encode paths as UTF-8), or a name
    the file system cannot hold with ``beside`` bytes added for the names made beside it, or a path the system
    cannot hold with the files made in it; all were tracebacks or misleading, the first once a shard was written.
    A control character (a newline, an ESC sequence) is refused too: every message naming the output is one line."""
    control = control_character_problem(output)
    if control:
        raise RetrieverError(f"{control}; choose another {flag}")
    try:
        os.path.abspath(output).encode("utf-8")
    except UnicodeEncodeError:
        raise RetrieverError(f"{output}: the path is not valid UTF-8, and Arrow and FAISS take UTF-8 paths only; "
                             f"choose another {flag}") from None
    check_name_length(output, flag, beside, INSIDE_PATH_BYTES)


def replaceable(path: Path, marker: str) -> bool:
    """Whether ``--overwrite`` may replace ``path``: a folder of ours (holding ``marker``) or an empty one, never
    a user's file or folder."""
    return path.is_dir() and not path.is_symlink() and ((path / marker).is_file() or not any(path.iterdir()))


def check_creatable(path: Path, flag: str = "--output") -> None:
    """Refuse up front, before any encoding, a ``path`` that cannot be made (``files.creatable_problem``)."""
    problem = creatable_problem(path)
    if problem:
        raise RetrieverError(f"{path}: cannot be created: {problem}; choose another {flag}")


def make_folder(path: Path, flag: str = "--output") -> bool:
    """Create the output folder ``path`` and its parents; True if it is new. A file in the way or a place that
    cannot be written is one error naming it, not a traceback."""
    check_output_name(path, flag)
    if path.exists() and not path.is_dir():
        raise RetrieverError(f"{path}: is a file, not a folder; remove it or choose another {flag}")
    created = not path.exists()
    problem = creatable_problem(path) if created else None  # a link on the way that loops or leads nowhere
    if problem:
        raise RetrieverError(f"{problem}; choose another {flag}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RetrieverError(f"{path}: cannot be created ({error.strerror}); choose another {flag}") from None
    return created


def fresh_building_folder(output: Path) -> Path:
    """An empty hidden folder beside ``output`` to build in, after clearing dead builds' leftovers."""
    output.parent.mkdir(parents=True, exist_ok=True)
    for line in clean_stale(output):
        print(line, file=sys.stderr)
    building = temporary_folder(output)
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    return building


def clean_stale(output: Path) -> list[str]:
    """Delete hidden folders that dead processes of this host left beside ``output``; first put back an old version
    that an interrupted fallback replacement left aside. Another host's are kept, since whether its process runs
    cannot be seen from here (``pid_names``). Returns what was done, one line per folder."""
    if not output.parent.is_dir():
        return []
    pattern = re.compile(rf"^\.{re.escape(output.name)}\.(building|old)-({WRITER})$")
    remove_unheld_lock(output.parent / f".{output.name}.lock")
    done = []
    for path in sorted(output.parent.iterdir()):
        match = pattern.match(path.name)
        writer = writer_of(match.group(2)) if match else None
        if writer is None or not path.is_dir() or not (writer.gone or writer.elsewhere):
            continue
        if writer.elsewhere:
            done.append(writer.kept_line(path, "the build of", "remove it once that build no longer runs")
                        if match.group(1) == "building" else
                        writer.kept_line(path, "the index an --overwrite set aside, by", f"once that build no longer "
                                         f"runs, move it back to {output} if that is missing, else remove it"))
        elif match.group(1) == "old" and not output.exists():
            os.replace(path, output)
            done.append(f"restored {output} from {path.name}, left by an interrupted --overwrite")
        else:
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"deleted {path}, left by a killed build")
    return done


@contextmanager
def exclusive_build(output: Path, what: str = "build",
                    elsewhere: str = " or choose another --output") -> Iterator[None]:
    """Hold ``.NAME.lock`` beside ``output`` while a build of it runs, so a second build of the same output at the
    same time is refused at once: the two would share OUTPUT.shards and OUTPUT.parts and delete each other's files.
    The kernel drops the lock with its process, so a killed build never blocks the next."""
    path = output.parent / f".{output.name}.lock"
    if creatable_problem(path):  # the build's own checks say what is wrong with the output, in its words
        yield
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    with held_lock(path, lambda pid: f"{output}: another {what} of it is running (pid {pid}); wait for it to end"
                                     f"{elsewhere}"):
        yield


def publish_model_folder(folder: Path, write: Callable[[Path], None]) -> Path:
    """Let ``write`` fill a hidden staging folder, then move it to ``folder`` with ``publish_folder``: a crash
    never leaves something that loads half-written. Staged inside an existing ``folder`` (e.g. a training
    output holding ``checkpoints/``), else beside it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    beside = folder if folder.is_dir() else folder.parent
    for leftover in left_by_dead_processes(beside, f".{folder.name}.staging-"):  # a whole copy of the weights each
        shutil.rmtree(leftover, ignore_errors=True)
    staging = beside / f".{folder.name}.staging-{writer_name()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        write(staging)
        publish_folder(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def publish_folder(staging: Path, target: Path) -> None:
    """Move a finished model folder into place.

    A new target is one directory rename. An existing target keeps what the staging folder lacks (such
    as ``checkpoints/``): it first loses its ``config.json``, then gets every other entry, and gets
    ``config.json`` last, so a folder only looks like a model once everything is there.
    """
    if not target.exists():
        os.rename(staging, target)
        return
    (target / "config.json").unlink(missing_ok=True)
    for entry in sorted(staging.iterdir()):
        if entry.name == "config.json":
            continue
        destination = target / entry.name
        if destination.is_dir():
            shutil.rmtree(destination)
        os.replace(entry, destination)
    os.replace(staging / "config.json", target / "config.json")
    staging.rmdir()
