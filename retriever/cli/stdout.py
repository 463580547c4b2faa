"""Standard output whose reader went away (`retriever search IDX "q" | head -1`): the command ends quietly, exit 0.

Click exited 1 with no message, and Python could add an "Exception ignored ... BrokenPipeError" line at exit. Exit 0
rather than the 141 of a process killed by SIGPIPE (as ripgrep does): the reader took what it wanted, and under
`set -o pipefail` a 141 failed a script or not as the output did or did not outgrow the pipe's buffer.
"""
from __future__ import annotations

import os
import select
import sys

import click


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
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)


def echo_result(text: str) -> None:
    """``text`` on standard output, or nowhere once its reader has gone, for results printed before the command's
    files are written (evaluate's table): those are still written whole."""
    try:
        click.echo(text)
    except BrokenPipeError as error:
        if not reader_gone(error):
            raise
        silence_stdout()
