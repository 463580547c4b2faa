"""Errors a user can act on.

The CLI prints a ``RetrieverError`` as one line and exits non-zero; anything else is a bug
and keeps its traceback.
"""
from __future__ import annotations

from pathlib import Path


class RetrieverError(Exception):
    """A problem with the user's input or environment, with a message saying what to do."""


OUT_OF_SPACE_HINT = "free some space (or choose another path) and rerun the same command (finished work is kept)"


def out_of_space(where: str = "") -> RetrieverError:
    """A full disk or quota, wherever it strikes: a fault of the machine, said one way everywhere."""
    return RetrieverError(f"no space left on the device{' ' if where else ''}{where}; {OUT_OF_SPACE_HINT}")


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
