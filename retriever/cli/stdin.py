"""Standard input as a file, for the readers that take a path: `search --queries -` and `evaluate --run -`."""
from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from retriever.errors import EndsInRerun, RetrieverError

T = TypeVar("T")


def read_stdin(suffix: str, read: Callable[[Path], T]) -> T:
    """``read`` of standard input spooled to a temporary file named ``stdin{suffix}`` (a reader may tell the format
    by it); an error names standard input, not the temporary file, which is gone once this returns. A terminal is
    refused: a `-` typed with nothing piped in waited for lines until Ctrl-D, with no word of why."""
    if sys.stdin is None or sys.stdin.isatty():
        raise RetrieverError("standard input is a terminal, not a pipe: `-` reads what is piped in (e.g. `retriever "
                             "search INDEX --queries Q | retriever evaluate --run - ...`, or `- < FILE`); pipe it in, "
                             "or give the file's path instead of -")
    with tempfile.TemporaryDirectory() as folder:
        spooled = Path(folder) / f"stdin{suffix}"
        with open(spooled, "wb") as file:
            shutil.copyfileobj(sys.stdin.buffer, file)
        try:
            return read(spooled)
        except RetrieverError as error:  # a line ending "rerun the same command" stays one, which the CLI completes
            kind = type(error) if isinstance(error, EndsInRerun) else RetrieverError
            raise kind(str(error).replace(str(spooled), "standard input")) from None
