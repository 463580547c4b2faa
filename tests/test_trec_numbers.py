"""Grades and scores read as trec_eval reads them (``retriever.trec_numbers``); the qrels readers' other cases are in
test_qrels.py and test_runs.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from retriever.errors import InputFileError
from retriever.qrels import read_qrels


@pytest.mark.parametrize("grade", ["9" * 5000, "-" + "1" * 4400, "0" * 5000 + "1.0"])
def test_a_grade_of_thousands_of_digits_is_a_file_line_error(tmp_path: Path, grade: str) -> None:
    """int() of a grade over 4,300 digits was a ValueError traceback naming sys.set_int_max_str_digits (probe round
    18); a grade is beyond a C int long before, and leading zeros are no digits of it."""
    path = tmp_path / "qrels.txt"
    path.write_text(f"q1 0 d1 {grade}\n", encoding="utf-8")
    if grade.endswith("1.0"):
        assert read_qrels(path) == {"q1": {"d1": 1}}
        return
    with pytest.raises(InputFileError) as error:
        read_qrels(path)
    assert str(error.value).startswith(f"{path}:1: relevance '{grade[:37]}...' is beyond a 32-bit integer")
