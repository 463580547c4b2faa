"""Qrels grades read as trec_eval reads them (``retriever.qrels``); the other qrels cases are in test_runs.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from retriever.errors import InputFileError
from retriever.qrels import LAYOUT_HINT, read_qrels


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


@pytest.mark.parametrize("indent", [None, 2])
def test_qrels_saved_as_one_json_object_are_read_as_the_same_judgments(tmp_path: Path, indent) -> None:
    """Qrels kept as pytrec_eval and ranx take them, {query id: {doc id: grade}}, json.dump'd: refused as "relevance
    '1}}' is not an integer" (the line split at spaces) or "expected 3 or 4 columns, found 1" (probe round 16)."""
    import json

    path = tmp_path / "qrels.json"
    path.write_text(json.dumps({"q1": {"d1": 1, "d2": 0, "7": 2.0}, "q2": {"d3": -1}}, indent=indent))
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 0, "7": 2}, "q2": {"d3": -1}}


@pytest.mark.parametrize("text, message", [
    ('{"q1": {"d1": "1"}}', "q.json:1: the grade of document 'd1' for query 'q1' is \"1\", not an integer"),
    ('{"q1": {"d1": 0.5}}', "q.json:1: the grade of document 'd1' for query 'q1' is 0.5, not an integer"),
    ('{"q1": {"d1": true}}', "q.json:1: the grade of document 'd1' for query 'q1' is true, not an integer"),
    ('{"q1": {"d1": 1e10}}', "q.json:1: the grade of document 'd1' for query 'q1' is 10000000000.0, beyond a 32-bit integer"),
    ('{"q1": {"d1": 1' + "0" * 400 + '}}', "q.json:1: the grade of document 'd1' for query 'q1' is 1" + "0" * 39 +
                                          ", beyond a 32-bit integer"),  # an OverflowError traceback
    ('{"q1": ["d1"]}', "q.json:1: the judgments of query 'q1' are an array, not an object of document id to grade"),
    ('{"q1": {"d 1": 1}}', "q.json:1: bad document id: id 'd 1' holds whitespace"),
    ('{\n"q1": {"d1": 1, "d1": 0}}', "q.json: the key 'd1' is given 2 times in one object"),
    ("{}", "q.json: qrels file is empty"),
])
def test_bad_json_qrels_are_one_line_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "q.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as error:
        read_qrels(path)
    assert str(error.value).startswith(f"{tmp_path}/{message}"), str(error.value)


def test_reading_qrels_holds_no_line_number_per_judgment(tmp_path: Path) -> None:
    """A dict of every (query, document) pair to its line number was kept beside the judgments, for the message of
    a conflicting repeat: 2M judgments peaked at 592 MiB. The first line is found again only when a conflict is."""
    import tracemalloc

    path = tmp_path / "qrels.txt"
    path.write_text("".join(f"q{q} 0 d{q * 7 + d} {d % 3}\n" for q in range(2000) for d in range(10)),
                    encoding="utf-8")
    tracemalloc.start()
    try:
        qrels = read_qrels(path)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(map(len, qrels.values())) == 20000
    assert peak < 1.4 * held, (peak, held)  # the judgments, plus a line's worth of work
    path.write_text("q1 0 d1 1\nq2 0 d1 1\nq1 0 d1 1\nq1 0 d1 2\n", encoding="utf-8")
    with pytest.raises(InputFileError, match=r":4: document 'd1' for query 'q1' judged 2 here but 1 on line 1"):
        read_qrels(path)


def test_qrels_joined_with_their_headers_name_the_repeated_header(tmp_path: Path) -> None:
    """`cat train.tsv dev.tsv` of BEIR qrels: the second header was 'relevance 'score' is not an integer', where the
    TSV corpus reader names a repeated header as such (probe round 18)."""
    path = tmp_path / "all.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n\nquery-id\tcorpus-id\tscore\nq2\td2\t1\n", encoding="utf-8")
    with pytest.raises(InputFileError) as error:
        read_qrels(path)
    assert str(error.value) == (f"{path}:4: the line repeats the header of line 1 (files joined with their headers?); "
                                "remove it, or join them without their headers (tail -n +2 FILE)")


def test_json_qrels_whose_first_line_is_part_of_one_object_are_read_whole(tmp_path: Path) -> None:
    """An object whose first line ends in ',' (written by hand, or by a tool indenting its own way) is one object over
    the file, not one a line: read line by line it was invalid JSON at line 1."""
    path = tmp_path / "qrels.json"
    path.write_text('{"q1": {"d1": 1, "d2": 0},\n "q2": {"d1": 2}}\n', encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}


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


@pytest.mark.parametrize("text, column", [("q1\td1\t\t1\n", "column 3 of 4"), ("q1\t\td1\t1\n", "column 2 of 4"),
                                          ("q1\t\t1\n", "column 2 of 3")])
def test_a_qrels_line_with_two_tabs_in_a_row_names_the_empty_column(tmp_path: Path, text: str, column: str) -> None:
    """'q1<TAB>d1<TAB><TAB>1' (a BEIR line with a doubled tab) was "bad query or document id: empty id", though it
    holds both ids: split at tabs it is 4 columns, read as TREC with an empty document id."""
    path = tmp_path / "qrels.tsv"
    path.write_text("q0\td0\t1\n" + text, encoding="utf-8")
    with pytest.raises(InputFileError, match=rf"qrels.tsv:2: {column} is empty \(two tabs in a row\); remove the "
                                             "extra tab; qrels lines are"):
        read_qrels(path)


@pytest.mark.parametrize("text, column", [
    ("q1\t \td1\t1\n", "column 2 of 4 holds only whitespace (' ' between tabs)"),
    ("q1\td1\t  \t1\n", "column 3 of 4 holds only whitespace ('  ' between tabs)")])
def test_a_qrels_column_of_whitespace_between_tabs_is_named_as_such(tmp_path: Path, text: str, column: str) -> None:
    """'q1<TAB> <TAB>d1<TAB>1' was refused as "column 2 of 4 is empty (two tabs in a row)", of a line with no two
    tabs in a row."""
    path = tmp_path / "qrels.tsv"
    path.write_text("q0\td0\t1\n" + text, encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_qrels(path)
    assert str(caught.value) == f"{path}:2: {column}; remove the extra tab; {LAYOUT_HINT}"


@pytest.mark.parametrize("text", ['{"query_id": "q1", "doc_id": "d1", "relevance": 1}\n'
                                  '{"query_id": "q1", "doc_id": "d2", "relevance": 0}\n',
                                  '{"q1": {"d1": 1, "d2": 0}, "_id": {"text": 1}}\n'])
def test_the_first_line_of_json_qrels_is_parsed_once(tmp_path: Path, monkeypatch, text: str) -> None:
    """It was parsed to tell its kind and again by its reader: for qrels json.dump'd on one line, the whole file."""
    import json

    parsed, loads = [], json.loads
    monkeypatch.setattr(json, "loads", lambda doc, **kwargs: (parsed.append(doc), loads(doc, **kwargs))[1])
    path = tmp_path / "qrels.json"
    path.write_text(text, encoding="utf-8")
    qrels = read_qrels(path)
    assert qrels["q1"] == {"d1": 1, "d2": 0} and parsed.count(text.splitlines()[0]) == 1, parsed


def test_mteb_qrels_of_one_beir_named_judgment_a_line_are_read_and_named_where_a_run_or_queries_go(tmp_path: Path):
    """MTEB's hub copy of a BEIR collection keeps its judgments as qrels/test.jsonl of {"query-id", "corpus-id",
    "score": 1.0}, BEIR's TSV header as JSON keys: `--qrels` said "the judgments of query 'query-id' are a string", and
    given as a run or as queries it was "missing 'qid' or 'hits' list" or told to pass --id-field (probe round 20)."""
    from retriever.corpus import read_queries
    from retriever.runs import read_run

    path = tmp_path / "test.jsonl"
    lines = ['{"query-id": "q1", "corpus-id": "d1", "score": 1.0}', '{"query-id": "q1", "corpus-id": "d2", "score": 0}',
             '{"query-id": "q2", "corpus-id": "d1", "score": 2}']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}
    with pytest.raises(InputFileError, match=r"test.jsonl: its first line is a judgment \({query, document, grade}\), "
                                             r"not a run's hits; if the run and qrels files are swapped"):
        read_run(path)
    with pytest.raises(InputFileError, match=r"test.jsonl:1: the line reads as a judgment \(qrels\), not a record"):
        read_queries(path)
    path.write_text(lines[0] + "\n" + lines[0].replace("1.0", "0.5") + "\n", encoding="utf-8")
    with pytest.raises(InputFileError, match=r"test.jsonl:2: the grade of document 'd1' for query 'q1' is 0.5, not an "
                                             "integer"):
        read_qrels(path)
    path.write_text(lines[0] + '\n{"query-id": "q1", "score": 1}\n', encoding="utf-8")
    with pytest.raises(InputFileError, match=r"test.jsonl:2: a flat qrels line needs 'query-id', 'corpus-id' and "
                                             "'score'"):
        read_qrels(path)
