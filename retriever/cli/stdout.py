"""Standard output or error whose reader went away, or standard error closed: the command still does its work.

Standard output's reader gone (`retriever search IDX "q" | head -1`): the command ends quietly, exit 0. Click exited 1
with no message, and Python could add an "Exception ignored ... BrokenPipeError" line at exit. Exit 0 rather than the
141 of a process killed by SIGPIPE (as ripgrep does): the reader took what it wanted, and under `set -o pipefail` a 141
failed a script or not as the output did or did not outgrow the pipe's buffer.

Standard error's reader gone (`2> >(exit)`, `2>&1 >/dev/null | head -0`): what the command says there is dropped and
it goes on to its own exit status; the first progress bar ended a build with exit 1 and nothing built. An error it
cannot print still exits non-zero. Standard error closed (`2>&-`): the null device takes its descriptor, which a file
the command opens would otherwise get, and with it what C code writes to standard error.

Standard output closed from the start (`>&-`): results written there are lost, so the first write is an error, exit 1
(the command exited 0 having printed nothing). The null device takes descriptor 1, so no file the command opens takes
it; a command whose results go to a file (-o) writes nothing on standard output and does its work. --json, whose
summary only standard output takes, is refused as the flags are read, before the command builds or trains anything
(a build ran to its end, then exited 1 saying nothing was written of a folder it had written).
"""
from __future__ import annotations

import errno
import io
import os
import select
import sys

import click

from retriever.errors import RetrieverError

# what a write to a standard output closed at start says; " or give -o" is added where the command has -o
STDOUT_CLOSED = "standard output is closed; nothing was written: redirect it to a file"
# what a write to standard output on a full disk says: there is no path to choose, and what was printed is cut short
STDOUT_FULL = ("no space left on the device standard output goes to, so what was printed there is cut short; free "
               "some space or redirect standard output to another disk, and rerun the same command")


def reader_gone(error: BaseException) -> bool:
    """``error`` is a broken pipe and standard output's reader is gone (a pipe other than standard output's stays
    an error); a pipe whose reader closed it polls as an error condition."""
    if not isinstance(error, BrokenPipeError):
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no file descriptor behind it (a test runner's buffer)
        return False


def silence_stdout() -> None:
    """Standard output pointed at the null device: what is still buffered for it is dropped at exit, where Python
    printed "Exception ignored ... BrokenPipeError"."""
    _to_null(sys.stdout.fileno())


def _to_null(descriptor: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    if null != descriptor:
        os.dup2(null, descriptor)
        os.close(null)


class _Descriptor(io.RawIOBase):
    """A standard descriptor written straight, so that its own errors can be said for what they are."""
    descriptor: int

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.descriptor

    def isatty(self) -> bool:
        return os.isatty(self.descriptor)


class _Stderr(_Descriptor):
    """Descriptor 2 that takes every write: once its reader has gone, it points at the null device, for this
    process's later writes and C code's alike."""
    descriptor = 2

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        try:
            done = 0
            while done < len(view):
                done += os.write(self.descriptor, view[done:])
        except BrokenPipeError:
            _to_null(2)
        return len(view)


class _ClosedStdout(io.RawIOBase):
    """Descriptor 1 closed at start: every write refused, as ``guard_stdout`` says."""

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if not len(memoryview(data)):
            return 0
        raise RetrieverError(STDOUT_CLOSED)


class _Stdout(_Descriptor):
    """Descriptor 1, whose write failing for want of space is said as standard output's: the generic full-disk line
    said "choose another path and rerun the same command (finished work is kept)", which fits an output file, not
    standard output. What is still buffered for it then goes to the null device (no second error at exit)."""
    descriptor = 1

    def write(self, data) -> int:
        try:
            return os.write(self.descriptor, data)
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            _to_null(1)
            raise RetrieverError(STDOUT_FULL) from None


def guard_stdout() -> None:
    """Standard output as the module docstring says when descriptor 1 is closed; else written through ``_Stdout``,
    unless it is another stream than the process's own (a test runner's)."""
    try:
        os.fstat(1)
    except OSError:
        _to_null(1)
        sys.stdout = io.TextIOWrapper(_ClosedStdout(), encoding="utf-8", write_through=True)
        return
    if sys.stdout is sys.__stdout__ and sys.stdout is not None:
        sys.stdout.flush()
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(_Stdout()), encoding=sys.stdout.encoding,
                                      errors=sys.stdout.errors, line_buffering=sys.stdout.line_buffering)


def stdout_closed() -> bool:
    """Whether standard output was closed at start (``guard_stdout``)."""
    return isinstance(getattr(sys.stdout, "buffer", None), _ClosedStdout)


def check_stdout_open(output: object) -> None:
    """Refuse, before any work, a command that would print its results (no ``output`` file) on a closed standard
    output."""
    if output is None and stdout_closed():
        raise RetrieverError(f"{STDOUT_CLOSED} or give -o")


def refuse_json_to_closed_stdout(ctx: click.Context, param: click.Parameter, as_json: bool) -> bool:
    """--json's callback: refuse it on a closed standard output before any work, as ``check_stdout_open`` does."""
    if as_json and stdout_closed():
        raise RetrieverError("standard output is closed, so --json has nowhere to print; nothing was done: redirect "
                             "standard output to a file or drop --json")
    return as_json


def guard_stderr() -> None:
    """Standard error as the module docstring says; a stream other than the process's own (a test runner's) is
    left as it is."""
    try:
        os.fstat(2)
    except OSError:  # closed
        _to_null(2)
    else:
        if sys.stderr is not sys.__stderr__:
            return
    sys.stderr = io.TextIOWrapper(_Stderr(), encoding="utf-8", errors="backslashreplace", line_buffering=True,
                                  write_through=True)


def echo_result(text: str, in_file: bool = False) -> None:
    """``text`` on standard output, or nowhere once its reader has gone, for results printed before the command's
    files are written (evaluate's table): those are still written whole. ``in_file``: the results are written to a
    file too (-o), so a closed standard output loses nothing."""
    if in_file and stdout_closed():
        return
    try:
        click.echo(text)
    except BrokenPipeError as error:
        if not reader_gone(error):
            raise
        silence_stdout()
