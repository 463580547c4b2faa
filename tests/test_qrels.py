"""Qrels grades read as trec_eval reads them (``retriever.qrels``); the other qrels cases are in test_runs.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from retriever.errors import InputFileError
from retriever.qrels import read_qrels


@pytest.mark.parametrize("grade, meant, trec_evals", [("1e1", 10, 1), ("10e-1", 1, 10), ("2.0e1", 20, 2),
                                                       (".3e1", 3, 0), ("-.5e1", -5, 0)])
def test_a_grade_trec_eval_reads_as_another_number_is_refused(tmp_path: Path, grade: str, meant: int,
                                                              trec_evals: int) -> None:
    """trec_eval reads a grade with C's atol, which stops at the first character that is not a digit: '1e1' is
    grade 1 there and was 10 here, '10e-1' grade 10 there and 1 here, so graded nDCG disagreed with trec_eval."""
    path = tmp_path / "qrels.txt"
    path.write_text(f"q1 0 d1 2\nq1 0 d2 {grade}\n", encoding="utf-8")
    with pytest.raises(InputFileError) as error:
        read_qrels(path)
    message = str(error.value)
    assert message.startswith(f"{path}:2: relevance {grade!r}")
    assert f"trec_eval reads it as {trec_evals}" in message and f"write it as {meant}" in message


def test_a_grade_in_exponent_form_that_trec_eval_reads_alike_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 1e0\nq1 0 d2 2.0\nq1 0 d3 3.00e+00\nq1 0 d4 -1E0\nq1 0 d5 0e5\n", encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 2, "d3": 3, "d4": -1, "d5": 0}}
