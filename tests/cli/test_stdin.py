"""Standard input as a file for `search --queries -` and `evaluate --run -`/`--qrels -`."""
from __future__ import annotations

import io
import sys

import pytest

from retriever.cli.stdin import read_stdin
from retriever.errors import RetrieverError


class _Terminal(io.BytesIO):
    """Standard input left on a terminal: nothing is piped in."""

    buffer = property(lambda self: self)

    def isatty(self) -> bool:
        return True


def test_a_terminal_as_standard_input_is_refused_not_waited_on(monkeypatch):
    """`retriever evaluate --run - --qrels Q` typed with nothing piped in waited for lines until Ctrl-D, with no word
    of why (probe round 18)."""
    monkeypatch.setattr(sys, "stdin", _Terminal(b"q1 Q0 d1 1 0.5 x\n"))
    with pytest.raises(RetrieverError, match=r"^standard input is a terminal, not a pipe: `-` reads what is piped in"):
        read_stdin(".run", lambda path: path.read_text())
    piped = _Terminal(b"q1 Q0 d1 1 0.5 x\n")
    piped.isatty = lambda: False
    monkeypatch.setattr(sys, "stdin", piped)
    assert read_stdin(".run", lambda path: path.read_text()) == "q1 Q0 d1 1 0.5 x\n"
