"""The `retriever` command line: a thin layer over the library API.

A ``RetrieverError`` is printed as one line on stderr with exit code 1, and so is a full disk or memory
running out wherever it strikes; a usage error (a bad flag or argument) is one line too, with exit code 2;
Ctrl-C is one line with the shell's 130 (128 + SIGINT), or 0 once every output file is in place
(``cli.outputs``), and so is SIGTERM to train and pretrain, with 143; standard output's reader going away
(``| head -1``) ends the command quietly with 0, writing to a standard output closed from the start is an error, and
standard error's, or standard error closed, leaves the command to its work and its own exit code (``cli.stdout``);
anything else is a bug and keeps its traceback. Under torchrun every process runs the command and meets the same
error, so only the first process on each machine (LOCAL_RANK 0: every machine's console gets the line)
prints errors and usage errors; the others exit non-zero silently once torchrun stops them (``_exit_unheard``),
except for an error only that process can see (``every_process``, e.g. another process died).
"""
from __future__ import annotations

import codecs
import os
import sys
import time
from typing import NoReturn

import click

from retriever.cli.outputs import interrupted, rerun_note
from retriever.cli.stdout import guard_stderr, guard_stdout, reader_gone, silence_stdout
from retriever.cli.teardown import skip_final_collections
from retriever.cores import cap_openmp_threads
from retriever.errors import (NotForThisIndex, RetrieverError, error_line, full_disk, is_out_of_memory, name_too_long,
                              out_of_memory)


# `retriever --help` lists commands in the order they are used; commands not named here come last.
PIPELINE_ORDER = ("demo", "build", "encode", "index", "info", "search", "evaluate", "serve", "pretrain", "train",
                  "mine")


# The commands that share their work over torchrun's processes; under torchrun any other would run whole in each.
TORCHRUN_COMMANDS = ("train", "pretrain")
# How long a torchrun process that leaves its error for its machine's first process to print waits to be stopped, at
# least: and twice as long as it took to reach the error (`_exit_unheard`)
UNHEARD_WAIT_SECONDS = 30
_command_started = time.monotonic()  # reset as the command starts (`_Group.main`)


class _Group(click.Group):
    def resolve_command(self, ctx: click.Context, args: list[str]):
        """The command, refused under a torchrun launch of several processes unless it shares its work over them: each
        process ran the whole of it, N copies into one output, where the first refused (a lock) failed the launch and
        torchrun killed the copy that was working."""
        name, command, rest = super().resolve_command(ctx, args)
        size = os.environ.get("WORLD_SIZE", "1").strip()  # not a number: no launch (train and pretrain refuse it)
        processes = int(size) if size.isdigit() else 1
        if processes > 1 and name not in TORCHRUN_COMMANDS:
            raise click.UsageError(f"`{name}` does not run under torchrun, whose {processes} processes would each run "
                                   f"all of it; run it without torchrun (only {' and '.join(TORCHRUN_COMMANDS)} share "
                                   "their work over processes; encode and build split it with --worker-index and "
                                   "--num-workers, or --ray)")
        return name, command, rest

    def list_commands(self, ctx: click.Context) -> list[str]:
        rank = {name: position for position, name in enumerate(PIPELINE_ORDER)}
        return sorted(self.commands, key=lambda name: (rank.get(name, len(rank)), name))

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:  # `retriever --bogus`; a bare `retriever` still prints its help
            if isinstance(error, getattr(click.exceptions, "NoArgsIsHelpError", ())):
                raise
            _exit_with_usage_line(error)
        except BrokenPipeError as error:  # `retriever --help | true`
            _exit_if_reader_gone(error)
        except RetrieverError as error:  # `retriever --version >&-`: a closed standard output (``cli.stdout``)
            _exit_with_error(str(error), heard=True)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except NotForThisIndex as error:  # --nprobe for a flat index: a usage error, as --nlist with hnsw at build
            sub = ctx.invoked_subcommand
            _exit_with_usage_line(click.UsageError(str(error)), f"{ctx.command_path} {sub}" if sub else None)
        except RetrieverError as error:
            if reader_gone(error.__context__):  # `-o /dev/stdout` whose reader left, said as "cannot write" it
                _exit_if_reader_gone(error.__context__)
            _exit_with_error(rerun_note(ctx, error), heard=getattr(error, "every_process", False))
        except click.UsageError as error:  # a subcommand's flags and arguments, or a command name
            sub = ctx.invoked_subcommand  # set before its flags are parsed: click's "requires an argument" has no ctx
            _exit_with_usage_line(error, f"{ctx.command_path} {sub}" if sub else None)
        except KeyboardInterrupt as stop:  # click said "Aborted!" with exit 1, as if the command had failed
            line, code = interrupted(ctx, stop)
            if _is_rank_zero():
                click.echo(f"{'note' if code == 0 else 'error'}: {line}", err=True)
            sys.exit(code)
        except BrokenPipeError as error:  # click exited 1 with no message
            _exit_if_reader_gone(error)
        except Exception as error:  # re-raised unless the machine ran out (safetensors' full disk is no OSError)
            full = full_disk(error) or name_too_long(error) or (
                out_of_memory(f"({error_line(error)})") if is_out_of_memory(error) else None)
            if full is None:
                raise
            _exit_with_error(rerun_note(ctx, full))

    def main(self, *args, **kwargs):
        """As click's, but a torchrun process other than its machine's first exits with usage errors' codes
        without printing."""
        global _command_started
        _command_started = time.monotonic()
        cap_openmp_threads()  # before any command loads torch or FAISS
        guard_stdout()
        guard_stderr()
        _write_utf8()
        if _is_rank_zero() or kwargs.get("standalone_mode") is False:
            return super().main(*args, **kwargs)
        try:
            code = super().main(*args, **{**kwargs, "standalone_mode": False})
        except click.ClickException as error:
            _exit_unheard(error.exit_code)
        except click.Abort:
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


# Pyserini's spellings of flags a command has under another name: click suggests only names that look alike.
PYSERINI_FLAGS = {"--hits": "-k", "--topics": "--queries", "--output-format": "--run-format"}


def _exit_with_usage_line(error: click.UsageError, command_path: str | None = None) -> None:
    """A bad flag, argument or command as one line like every other error, saying where the flags are listed
    (click printed the usage, a hint and the error on four lines), with click's exit code; ``command_path`` is the
    command's when click's error names no context."""
    ours = PYSERINI_FLAGS.get(getattr(error, "option_name", None) or "")
    if isinstance(error, click.NoSuchOption) and error.ctx is not None and ours in {
            name for param in error.ctx.command.params for name in param.opts}:
        error.message, error.possibilities = (f"No such option '{error.option_name}' (Pyserini's {error.option_name} "
                                              f"is {ours} here)."), []
    error = _ray_took_the_argument(error)
    command_path = error.ctx.command_path if error.ctx is not None else command_path
    where = f" (see `{command_path} --help`)" if command_path else ""
    _exit_with_error(f"{error.format_message()}{where}", error.exit_code)


def _exit_with_error(line: str, code: int = 1, heard: bool = False) -> NoReturn:
    """``error: LINE`` on stderr and exit ``code``; a torchrun process other than its machine's first leaves the line
    to the first (``_exit_unheard``) unless the error is ``heard`` from every process."""
    if not (heard or _is_rank_zero()):
        _exit_unheard(code)
    click.echo(f"error: {line}", err=True)
    sys.exit(code)


def _exit_unheard(code: int) -> NoReturn:
    """Exit ``code`` without a word, from a torchrun process that leaves its error for its machine's first process
    to print, once torchrun stops it (or after ``UNHEARD_WAIT_SECONDS``): torchrun stops every process as soon as one
    fails, so a process that left first had the first one stopped before it printed, and the launch failed without
    an error line (most launches on a loaded machine). It waits twice as long as it took to get here, if longer: on a
    loaded machine importing torch alone takes half a minute, so the first process, doing the same work beside it, was
    at times more than 30 s behind, stopped before it printed, and the launch failed without an error line."""
    if "LOCAL_RANK" in os.environ:
        time.sleep(max(UNHEARD_WAIT_SECONDS, 2 * (time.monotonic() - _command_started)))
    sys.exit(code)


def _ray_took_the_argument(error: click.UsageError) -> click.UsageError:
    """`encode --ray CORPUS ...`: --ray takes the next word as its address, so the corpus is missing; click's
    "Missing argument 'CORPUS'" named neither --ray nor the fix."""
    if not (isinstance(error, click.MissingParameter) and isinstance(error.param, click.Argument)
            and error.ctx is not None):
        return error
    address = error.ctx.params.get("ray_address")
    if address in (None, "local"):
        return error
    name = error.param.human_readable_name
    return click.UsageError(f"Missing argument '{name}': --ray took {address!r} as its Ray address, since it takes "
                            f"the next word; put --ray after the {name.lower()}, or write --ray=auto", error.ctx)


def _exit_if_reader_gone(error: BrokenPipeError) -> None:
    """Exit 0 with nothing more said when standard output's reader left (``cli.stdout``); re-raise another pipe's."""
    if not reader_gone(error):
        raise error
    silence_stdout()
    sys.exit(0)


def _write_utf8() -> None:
    """Standard output and error in UTF-8 whatever the locale, as Python's UTF-8 mode does: under a Latin-1
    locale the first hit holding a character Latin-1 lacks (the snippet's '…', a CJK title) was a
    UnicodeEncodeError traceback, and a run on standard output must be the bytes `-o` writes."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if encoding and codecs.lookup(encoding).name != "utf-8" and hasattr(stream, "reconfigure"):
            stream.reconfigure(encoding="utf-8")


def _is_rank_zero() -> bool:
    """The first torchrun process on this machine, or a process started without torchrun."""
    return int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))) == 0


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="retriever")
def main() -> None:
    """Dense retrieval from a raw corpus to an evaluated, served index.

    Typical flow: `retriever build CORPUS --output indexes/NAME`, then
    `retriever search indexes/NAME "a query"` and `retriever evaluate`.
    """


def _register() -> None:
    from retriever.cli import bm25, demo, evaluating, indexing, info, pretrain, searching, serving, training
    from retriever.cli.text_params import check_text_params

    for module in (indexing, bm25, searching, evaluating, info, pretrain, training, serving, demo):
        for command in module.COMMANDS:
            check_text_params(command)
            main.add_command(command)


skip_final_collections()
try:
    _register()
except KeyboardInterrupt:  # Ctrl-C while the commands' modules import: it was a traceback
    click.echo("error: interrupted (Ctrl-C) while starting; nothing was done", err=True)
    sys.exit(130)
