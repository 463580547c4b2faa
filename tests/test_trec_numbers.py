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


@pytest.mark.parametrize("text", [
    '{"query_id": "q1", "doc_id": "d1", "relevance": 1, "iteration": "0"}\n'
    '{"query_id": "q1", "doc_id": "d2", "relevance": 0, "iteration": "0"}\n{"query_id": "q2", "doc_id": "d1", '
    '"relevance": 2.0, "iteration": "0"}\n',
    '{"qid": "q1", "docid": "d1", "relevance": 1}\n{"qid": "q1", "docid": "d2", "relevance": 0}\n'
    '{"qid": "q2", "docid": "d1", "relevance": 2}\n',
    '{"q1": {"d1": 1, "d2": 0}}\n{"q2": {"d1": 2}}\n'])
def test_json_qrels_of_one_judgment_or_one_query_a_line_are_read_as_runs_of_those_shapes_are(tmp_path: Path,
                                                                                               text: str) -> None:
    """ir_datasets' qrels saved a judgment a line ({"query_id", "doc_id", "relevance"}) were read as one mapping: "the
    judgments of query 'query_id' are a string"; a mapping a query a line, which the run reader takes, was "invalid JSON
    (Extra data)" at line 2; a JSON array of judgments "expected 3 or 4 columns, found 6" (probe round 18)."""
    path = tmp_path / "qrels.jsonl"
    path.write_text(text, encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}
    if text.startswith('{"q1"'):
        path.write_text(text + '{"q1": {"d3": 1}}\n', encoding="utf-8")
        with pytest.raises(InputFileError, match=r"qrels.jsonl:3: query 'q1' already appeared on line 1; put all "
                                                 "judgments of a query in one object"):
            read_qrels(path)
        return
    path.write_text(text + text.splitlines(keepends=True)[0].replace(": 1", ": 3"), encoding="utf-8")
    with pytest.raises(InputFileError, match=r"qrels.jsonl:4: document 'd1' for query 'q1' judged 3 here but 1 on an "
                                             "earlier line"):
        read_qrels(path)
    path.write_text("[" + ", ".join(text.splitlines()) + "]\n", encoding="utf-8")
    with pytest.raises(InputFileError, match="the file is one JSON array on one line, not JSONL"):
        read_qrels(path)
