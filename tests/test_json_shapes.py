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
