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


def test_a_machine_limit_reading_standard_input_still_says_whether_the_rerun_keeps_the_work(monkeypatch, tmp_path):
    """The spooled file's path was replaced by "standard input" in a plain RetrieverError, so a machine limit's line
    lost its "(it starts over ...)" end, which the CLI adds to a MachineLimit only."""
    from click.testing import CliRunner

    import retriever.evaluation as evaluation
    from retriever.cli import main
    from retriever.errors import out_of_memory

    def runs_out(run, *_):
        raise out_of_memory(f"reading {run}")
    monkeypatch.setattr(evaluation, "evaluate_run_file", runs_out)
    (tmp_path / "qrels").write_text("q1 0 d1 1\n")
    result = CliRunner().invoke(main, ["evaluate", "--run", "-", "--qrels", str(tmp_path / "qrels")],
                                input="q1 Q0 d1 1 0.5 x\n")
    said = result.output.splitlines()[-1]
    assert result.exit_code == 1 and said.startswith("error: out of memory reading standard input;"), said
    assert said.endswith("rerun the same command (it starts over: nothing of this run is kept)"), said
