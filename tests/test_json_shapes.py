"""Files of another JSON shape than the reader takes are named, with how to convert them."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from retriever.corpus import read_queries
from retriever.errors import InputFileError
from retriever.qrels import read_qrels
from retriever.runs import read_run


@pytest.mark.parametrize("text", ['{"q1": "what is honey", "q2": "lava rock"}\n',
                                  '{\n  "q1": "what is honey",\n  "q2": "lava rock"\n}\n',
                                  '{"q1": "what is honey",\n "q2": "lava rock"}\n'])
def test_a_queries_file_of_one_json_object_of_id_to_text_is_named_with_how_to_convert_it(tmp_path, text):
    """BEIR's {query id: text} dict saved with json.dump was told to pass --id-field (on one line) or was malformed
    JSON at column 2 (indented) or at the comma ending its first line: neither said what the file is. The command the message gives converts it."""
    path = tmp_path / "queries.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_queries(path)
    line = str(caught.value)
    assert "\n" not in line and "ids to texts ({id: text, ...}" in line and "--id-field" not in line, line
    command = line[line.index("python -c"):line.index(" > queries.jsonl")].replace("FILE", str(path))
    converted = subprocess.run(shlex.split(command.replace("python", sys.executable, 1)), capture_output=True,
                               text=True, check=True).stdout
    (tmp_path / "queries.jsonl").write_text(converted, encoding="utf-8")
    assert [(q.id, q.text) for q in read_queries(tmp_path / "queries.jsonl")] == [("q1", "what is honey"),
                                                                                 ("q2", "lava rock")]


def test_a_corpus_of_one_json_object_of_id_to_record_is_named_with_how_to_convert_it(tmp_path):
    """BEIR's corpus dict ({doc id: {"title", "text"}}, as its loader keeps a corpus) saved with json.dump was told
    "missing id field '_id' (its keys: d1, d2); pass --id-field", which no value of the flag could meet."""
    from retriever.corpus import iter_documents

    path = tmp_path / "corpus.json"
    path.write_text('{"d1": {"title": "Bees", "text": "make honey"}, "d2": {"text": "lava rock"}}\n', encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        list(iter_documents(path))
    line = str(caught.value)
    assert "ids to records ({id: {\"title\": ..., \"text\": ...}, ...}" in line and "--id-field" not in line, line
    command = line[line.index("python -c"):line.index(" > corpus.jsonl")].replace("FILE", str(path))
    converted = subprocess.run(shlex.split(command.replace("python", sys.executable, 1)), capture_output=True,
                               text=True, check=True).stdout
    (tmp_path / "corpus.jsonl").write_text(converted, encoding="utf-8")
    assert [(d.id, d.title, d.text) for d in iter_documents(tmp_path / "corpus.jsonl")] == [
        ("d1", "Bees", "make honey"), ("d2", "", "lava rock")]


@pytest.mark.parametrize("text, kind", [
    ('{"qid": "q1", "hits": [{"id": "d1", "score": 1}]}\n', "a JSONL run's line (a query's hits)"),
    ('{"q1": {"d1": 1, "d2": 0.5}}\n', "JSON qrels or a run ({query id: {document id: grade or score}})"),
    ('{"query_id": "q1", "doc_id": "d1", "relevance": 1}\n', "a judgment (qrels)"),
    ('{"qid": "q1", "docid": "d1", "score": 1.5}\n', "a run's hit")])
def test_json_qrels_or_a_json_run_given_as_queries_is_named_with_the_flag_that_takes_it(tmp_path, text, kind):
    """JSON qrels or a JSON run passed as --queries (or a corpus) was told "missing id field '_id' (its keys: hits,
    qid); pass --id-field", a flag that could only lead to the next missing key."""
    path = tmp_path / "test.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_queries(path)
    assert str(caught.value).startswith(f"{path}:1: the line reads as {kind}, not a record; qrels are read by "
                                        "evaluate --qrels, and a run by evaluate --run"), str(caught.value)


@pytest.mark.parametrize("lines, shape", [
    (['[{"query_id": "q1", "doc_id": "d1", "VALUE": 1},', '{"query_id": "q1", "doc_id": "d2", "VALUE": 0}]'],
     "over several lines"),
    (['[{"query_id": "q1", "doc_id": "d1", "VALUE": 1}]   '], "on one line"),
    (["[", '  {"query_id": "q1", "doc_id": "d1", "VALUE": 1}', "]"], "over several lines")])
def test_the_run_and_qrels_readers_say_alike_where_a_json_array_lies(tmp_path, lines, shape):
    """A JSON array of one record a line (its first line ``[{...},``) was "on one line" to the qrels reader, which
    tested for ``[`` alone, and "over several lines" to the run reader, which tested for a closing ``]``."""
    for read, value in ((read_qrels, "relevance"), (read_run, "score")):
        path = tmp_path / f"{read.__name__}.json"
        path.write_text("\n".join(lines).replace("VALUE", value) + "\n", encoding="utf-8")
        with pytest.raises(InputFileError, match=rf"^{re.escape(str(path))}: the file is one JSON array {shape}, not JSONL"):
            read(path)


@pytest.mark.parametrize("run_text, qrels_text", [
    ("[q1] Q0 d1 1 0.5 t\n{q2} Q0 d9 1 2e0 t\n", "{q2} 0 d9 1\n[q1] 0 d1 2\n"),
    ("{q2}\tQ0\td9\t-1\t2\tt\n", "[q1]\td1\t2\n{q2}\td9\t1\n")])
def test_trec_lines_whose_first_id_opens_with_a_bracket_or_brace_are_read_as_trec(tmp_path, run_text, qrels_text):
    """trec_eval reads an id as any token, but a run of '[q1] Q0 d1 1 0.5 t' was "one JSON array over several lines"
    and qrels of '{q1} 0 d1 1' "invalid JSON": the first character alone chose JSON."""
    run, qrels = tmp_path / "run.trec", tmp_path / "qrels.txt"
    run.write_text(run_text, encoding="utf-8")
    qrels.write_text(qrels_text, encoding="utf-8")
    lines = map(str.split, run_text.splitlines())
    assert read_run(run) == {qid: {doc: float(score)} for qid, _, doc, _, score, _ in lines}
    assert read_qrels(qrels) == {"[q1]": {"d1": 2}, "{q2}": {"d9": 1}}


@pytest.mark.parametrize("reader, text, message", [
    (read_run, "{'q1': {'d1': 1}}\n", "r:1: invalid JSON (Expecting property name enclosed in double quotes)"),
    (read_qrels, "{'q1': {'d1': 1}}\n", "r:1: invalid JSON (Expecting property name enclosed in double quotes)"),
    (read_run, '{"q1": {"d1": 1, "d2": 0.5 }}\n', None),  # 6 columns, the 5th a number: still JSON
    (read_run, "{q1} 0 d1 1\n", "r:1: expected 6 whitespace-separated columns, found 4: the line reads as qrels"),
    (read_qrels, "[q1] Q0 d1 1 0.5 t\n", "r:1: expected 3 or 4 columns, found 6: the line is a TREC run line"),
    (read_qrels, '[{"query_id": "q1", "doc_id": "d1", "relevance": 1}]\n',
     "r: the file is one JSON array on one line"),
    (read_run, "[1 , 2 , 3]\n", "r: the file is one JSON array on one line")])  # valid JSON, though split so
def test_a_first_line_that_is_no_trec_line_is_still_read_as_json(tmp_path, reader, text, message):
    """Only a line of a TREC run's or qrels' shape leaves the JSON readers: a Python dict keeps its JSON refusal,
    and a run given as qrels (or qrels as a run) is named as such whatever its ids open with."""
    path = tmp_path / "r"
    path.write_text(text, encoding="utf-8")
    if message is None:
        assert reader(path) == {"q1": {"d1": 1.0, "d2": 0.5}}
        return
    with pytest.raises(InputFileError) as caught:
        reader(path)
    assert str(caught.value).startswith(f"{path.parent}/{message}"), caught.value


@pytest.mark.parametrize("reader, text, message", [
    (read_run, "{q1} Q0 d1 1 0.5\n", "r:1: expected 6 whitespace-separated columns, found 5; TREC run lines"),
    (read_run, "[q1] Q0 d1 1 0.5 t x\n", "r:1: expected 6 whitespace-separated columns, found 7; TREC run lines"),
    (read_qrels, "{q1} 0 d1 1 x\n", "r:1: expected 3 or 4 columns, found 5; qrels lines are"),
    (read_qrels, "[q1] 0 d1 -\n", "r:1: relevance '-' is not an integer")])
def test_a_wrong_trec_line_whose_id_opens_with_a_bracket_gets_the_trec_message(tmp_path, reader, text, message):
    """The same line with 'q1' got the TREC reader's message, but with '{q1}' "invalid JSON" and with '[q1]' "one JSON
    array over several lines": only a line of the right columns left the JSON readers."""
    path = tmp_path / "r"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        reader(path)
    assert str(caught.value).startswith(f"{path.parent}/{message}"), caught.value


def test_a_run_whose_bracketed_first_id_has_a_rank_of_dash_is_read_as_trec(tmp_path):
    """trec_eval reads the rank column as any token; '{q1} Q0 d1 - 0.5 t' was "invalid JSON"."""
    path = tmp_path / "run"
    path.write_text("{q1} Q0 d1 - 0.5 t\n{q1} Q0 d2 - 0.25 t\n", encoding="utf-8")
    assert read_run(path) == {"{q1}": {"d1": 0.5, "d2": 0.25}}


@pytest.mark.parametrize("reader, text, expected", [
    (read_run, '{"q1": {"d1": 1\n, "d2": 0.5}}\n', {"q1": {"d1": 1.0, "d2": 0.5}}),
    (read_qrels, '{"q1": {"d1": 1\n, "d2": 0}}\n', {"q1": {"d1": 1, "d2": 0}}),
    (read_run, '{"q1": {"d1": 1, "d2": 0.5}}\n', {"q1": {"d1": 1.0, "d2": 0.5}})])
def test_json_whose_first_line_splits_as_trec_columns_is_read_as_json(tmp_path, reader, text, expected):
    """A first line of JSON whose columns looked like a TREC line's ('{"q1": {"d1": 1', 3 columns, the last a number)
    went to the TREC reader: 'expected 6 whitespace-separated columns, found 3' or "relevance '0}}'"."""
    path = tmp_path / "r"
    path.write_text(text, encoding="utf-8")
    assert reader(path) == expected


def test_a_json_line_of_six_columns_is_not_read_as_a_trec_line(tmp_path):
    """'{"a": "x y 1 2 z"}' splits as 6 columns, the 4th and 5th numbers, and was read as the run {'{"a":': {'y': 2}}."""
    path = tmp_path / "r"
    path.write_text('{"a": "x y 1 2 z"}\n', encoding="utf-8")
    with pytest.raises(InputFileError, match="missing 'qid' or 'hits' list"):
        read_run(path)
