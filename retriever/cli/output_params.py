"""The click types of the paths commands write: refused as the flags are read when they could never be written."""
from __future__ import annotations

import os
from pathlib import Path

import click

from retriever.errors import RetrieverError
from retriever.name_length import check_name_length
from retriever.output_paths import control_character_problem, output_file_problem, through_link, written_in_place


class OutputFolder(click.Path):
    """A folder a command writes into: an empty name is refused, where pathlib reads it as the working folder, so
    `-o "$SHARDS"` with SHARDS unset wrote into the folder the command ran in; ``-`` is refused as ``OutputFile``
    refuses it (`build -o -` made a folder named '-', where `search -o -` prints)."""

    def __init__(self, file_okay: bool = True) -> None:
        super().__init__(file_okay=file_okay, path_type=Path)

    def convert(self, value, param, ctx) -> Path:
        if isinstance(value, str) and not value.strip():
            self.fail("the name is empty (an unset shell variable?); give the folder's name, or . for the working "
                      "folder", param, ctx)
        if value == "-":
            self.fail("'-' is not standard output here: this command writes a folder; give its name (./- for a "
                      "folder named '-')", param, ctx)
        return super().convert(value, param, ctx)


class OutputFile(click.Path):
    """A file a command writes at the end of its work: a path that could never be written is refused first.
    ``-`` is standard output (None, for a command whose default is to print) where ``dash_is_stdout``, else
    refused: `--queries -` reads standard input, and `-o -` wrote a file named '-' with exit 0."""

    def __init__(self, dash_is_stdout: bool = False) -> None:
        super().__init__(dir_okay=False, path_type=Path)
        self.dash_is_stdout = dash_is_stdout

    def convert(self, value, param, ctx) -> Path | None:
        if isinstance(value, str) and value == "-":
            if self.dash_is_stdout:
                return None
            self.fail("'-' is not standard output for this option; give a file name (./- for a file named '-')",
                      param, ctx)
        problem = control_character_problem(value) if isinstance(value, str) else None
        if problem:
            self.fail(f"{problem}; give another name", param, ctx)
        if isinstance(value, str) and value.endswith(("/", os.sep)) and not Path(value).is_dir():
            # Path() drops the slash: `-o runs/` wrote a file named runs
            self.fail(f"{value} ends in a slash, so it names a folder; give the path of a file in it ({value}NAME)",
                      param, ctx)
        last = value.replace(os.sep, "/").rsplit("/", 1)[-1] if isinstance(value, str) else ""
        if last in (".", "..") and not Path(value).is_dir():  # Path() drops a last '.': `-o new/.` wrote new
            self.fail(f"{value} ends in {last!r}, so it names a folder; give the path of a file in it", param, ctx)
        path = super().convert(value, param, ctx)
        flag = f"--{param.name.replace('_', '-')}" if param and param.name else "path"
        try:  # the name, then a link's target: a temporary file is made beside it, .NAME.tmp-PID@HOST
            check_name_length(Path(path), flag)
            if not written_in_place(Path(path)):
                check_name_length(through_link(Path(path)), flag)
        except RetrieverError as error:
            self.fail(str(error), param, ctx)
        problem = output_file_problem(Path(path))
        if problem:
            self.fail(problem, param, ctx)
        return path
