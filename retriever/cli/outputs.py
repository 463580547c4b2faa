"""What a Ctrl-C leaves: the output files a command had already put in place are whole, and said to be.

Every output file (and index folder) is written under a temporary name and renamed into place only when complete,
so an output that is another than the one there when the command started (another inode or modification time)
was written whole by this run. A Ctrl-C after all of a command's outputs are in place (while it prints its summary or
warnings) exits 0 saying so: it exited 130 telling the user to rerun, as if the work were lost. A command that runs
for hours under a scheduler (train, pretrain) takes SIGTERM as it takes Ctrl-C (``stop_on_sigterm``).
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

import click

from retriever.distributed.ray_runtime import sigterm_handler
from retriever.errors import EndsInRerun, RetrieverError
from retriever.wording import agree

INTERRUPTED = ("interrupted ({how}); outputs are written under their names only when complete, so rerun the same "
               "command")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises its KeyboardInterrupt, so it stops the command through the same cleanup
    and line; the exit code is still SIGTERM's, 143."""


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)  # through a link: the file written is its target
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_mtime_ns


def expect_outputs(*paths: Path | None) -> None:
    """Name the files the running command writes (None: standard output, not counted), noting what is there now;
    the command's stdout results must be printed before the last of them is written."""
    ctx = click.get_current_context()
    ctx.meta.setdefault("retriever.outputs", {}).update(
        {path: _identity(path) for path in paths if path is not None})


def mark_resumable() -> None:
    """Mark the running command as one whose rerun goes on from the work it finished (a build's shards and parts, a
    search's partial run, training's checkpoints), so a machine limit's line may say that work is kept."""
    click.get_current_context().meta["retriever.resumes"] = True


def rerun_note(ctx: click.Context, error: RetrieverError) -> str:
    """``error``'s line, one ending "rerun the same command" (a machine limit's) saying whether the rerun keeps the
    work done: it said "(finished work is kept)" of evaluate and mine too, whose rerun starts over."""
    if not isinstance(error, EndsInRerun):
        return str(error)
    return f"{error} {_what_rerun_keeps(ctx)}"


def _what_rerun_keeps(ctx: click.Context) -> str:
    """Whether a rerun of ``ctx``'s command goes on from this run's work or starts over, as a rerun hint's end."""
    if ctx.meta.get("retriever.resumes"):
        return "(finished work is kept)"
    return "(it starts over: nothing of this run is kept)"


def stop_on_sigterm() -> None:
    """Take SIGTERM for the running command as Ctrl-C (``Terminated``): a scheduler's stop (Slurm's time limit, a
    Kubernetes pod evicted, torchrun passing its own on) ended a training run at once without a word, where Ctrl-C
    says the rerun resumes. Later SIGTERMs are ignored while it stops (torchrun passes on a SIGTERM its workers may
    have had already from a scheduler that signals every process, and a second one killed them before they said a
    word; the scheduler's SIGKILL still follows); the handler before comes back as the command ends."""
    before = sigterm_handler()
    if before is None:  # a thread other than the main one, which alone may set it: SIGTERM stays as it was
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    click.get_current_context().call_on_close(lambda: signal.signal(signal.SIGTERM, before))


def _raise_terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # until the command has stopped and said so
    raise Terminated


def interrupted(ctx: click.Context, stop: KeyboardInterrupt) -> tuple[str, int]:
    """The line and exit code for ``stop`` (a Ctrl-C, or SIGTERM's ``Terminated``) in ``ctx``'s command: 0 when every
    output it names is in place."""
    how, code = ("SIGTERM", 128 + signal.SIGTERM) if isinstance(stop, Terminated) else ("Ctrl-C", 128 + signal.SIGINT)
    outputs = ctx.meta.get("retriever.outputs", {})  # a subcommand's context shares ``meta`` with the group's
    whole = [path for path, before in outputs.items() if _identity(path) not in (None, before)]
    if not whole:  # it said "(finished work is kept where it resumes)", leaving the user to guess whether it does
        return f"{INTERRUPTED.format(how=how)} {_what_rerun_keeps(ctx)}", code
    named = " and ".join(str(path) for path in whole)
    verb = agree(len(whole), "was", "were")
    if len(whole) == len(outputs):
        return (f"interrupted ({how}) after {named} {verb} written whole; the command's work is done, only its "
                "summary on stderr may be cut short"), 0
    return f"interrupted ({how}); {named} {verb} written whole; rerun for the rest", code

