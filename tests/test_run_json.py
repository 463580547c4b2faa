"""A run saved as one JSON object mapping query ids to {document id: score}, as BEIR's and ranx's tools save it."""
from __future__ import annotations

import gc
import json

import pytest

from retriever.errors import InputFileError
from retriever.runs import read_run, read_trec_run, write_trec_run

RUN = {"q1": {"d1": 0.5, "d2": 1.5, "7": 2}, "q2": {"d3": -1e-3}}


@pytest.mark.parametrize("indent", [None, 2])
def test_a_run_dict_saved_as_json_is_read_as_the_same_run(tmp_path, indent):
    """BEIR's results dict (json.dump(results, f), one line or indented) was refused: "missing 'qid' or 'hits'
    list", or "invalid JSON (Expecting property name …)" of a valid file (probe round 16)."""
    path = tmp_path / "results.json"
    path.write_text("\n" + json.dumps(RUN, indent=indent) + "\n", encoding="utf-8")
    assert read_run(path) == {"q1": {"d1": 0.5, "d2": 1.5, "7": 2.0}, "q2": {"d3": -1e-3}}
    write_trec_run(read_run(path), tmp_path / "r.trec")
    assert read_trec_run(tmp_path / "r.trec") == read_run(path)


@pytest.mark.parametrize("text, message", [
    ('{\n"q1": {"d1": "0.5"}}', "r.json: the score of document 'd1' for query 'q1' is \"0.5\", not a number"),
    ('{\n"q1": ["d1", "d2"]}', "r.json: the hits of query 'q1' are an array, not an object of document id to score"),
    ('{\n"q1": {"d1": 1, "d1": 2}}', "r.json: the key 'd1' is given 2 times in one object"),
    ('{\n"q 1": {"d1": 1}}', "r.json: bad query id: id 'q 1' holds whitespace"),
    ('{\n"q1": {"d1": NaN}}', "r.json: the score of document 'd1' for query 'q1' is NaN"),
    ('{\n"q1": {"d1": 1},\n}', "r.json:3: invalid JSON (Expecting property name enclosed in double quotes)"),
    ("{\n}", "r.json: run file is empty"),
    ("{}\n\n", "r.json: run file is empty (one JSON object of no query, {})"),  # json.dump({}): JSONL's "missing 'qid'"
    ('{}\n{"qid": "q1", "hits": []}', "r.json:1: missing 'qid' or 'hits' list"),
])
def test_a_bad_run_dict_is_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "r.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_run(path)
    assert str(caught.value).startswith(f"{tmp_path}/{message}"), str(caught.value)


def test_a_jsonl_run_is_still_read_line_by_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"qid": "q1", "hits": [{"id": "d1", "score": 1}]}\n{"qid": "q2", "hits": []}\n')
    assert read_run(path) == {"q1": {"d1": 1.0}, "q2": {}}
    path.write_text('{"qid": "q1", "hits": [{"id": "d1"}]}\n')
    with pytest.raises(InputFileError, match=r"r.jsonl:1: hit 1 lacks 'id' or 'score'"):
        read_run(path)


@pytest.mark.parametrize("keys", [("query_id", "doc_id"), ("qid", "docid")])
def test_a_flat_jsonl_run_of_one_hit_per_line_is_read(tmp_path, keys):
    """One {"query_id", "doc_id", "score"} (or qid/docid) object per line was refused as "missing 'qid' or 'hits'
    list", naming neither its format nor ours."""
    q, d = keys
    path = tmp_path / "r.jsonl"
    lines = [{q: "q1", d: "d1", "score": 1.5, "rank": 1}, {q: "q2", d: "d1", "score": 0.5},
             {q: "q1", d: "7", "score": 2}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert read_run(path) == {"q1": {"d1": 1.5, "7": 2.0}, "q2": {"d1": 0.5}}
    path.write_text(path.read_text() + json.dumps({q: "q1", d: "d1", "score": 3}) + "\n")
    with pytest.raises(InputFileError, match=r"r.jsonl:4: document 'd1' appears twice for query 'q1'"):
        read_run(path)
    path.write_text(json.dumps({q: "q1", d: "d1", "score": 1}) + "\n" + json.dumps({q: "q2", "score": 1}) + "\n")
    with pytest.raises(InputFileError, match=rf"r.jsonl:2: a flat run line needs {q!r}, {d!r} and 'score'"):
        read_run(path)


def test_a_run_of_one_json_mapping_per_line_is_read_as_one_mapping(tmp_path):
    """{"q1": {...}} on each line (a dict per query, json.dumps'd line by line) was "invalid JSON (Extra data)"."""
    path = tmp_path / "r.jsonl"
    path.write_text('{"q1": {"d1": 1.5, "d2": 1}}\n\n{"q2": {"d1": 0.5}}\n', encoding="utf-8")
    assert read_run(path) == {"q1": {"d1": 1.5, "d2": 1.0}, "q2": {"d1": 0.5}}
    path.write_text('{"q1": {"d1": 1.5}}\n{"q1": {"d2": 0.5}}\n', encoding="utf-8")
    with pytest.raises(InputFileError, match=r"r.jsonl:2: query 'q1' already appeared on line 1"):
        read_run(path)


BIG, DEEP = "9" * 5000, "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("name, content, where, problem", [
    ("r.jsonl", '{"qid": "q0", "hits": []}\n{"qid": "q1", "hits": [{"id": "d1", "score": %s}]}\n' % BIG, ":2",
     "a number of 5000 digits"),
    ("r.jsonl", '{"qid": "q1", "hits": %s}\n' % DEEP, ":1", "the file nests arrays or objects"),
    ("r.jsonl", '{"qid": "q1", "docid": "d0", "score": 1}\n{"qid": "q1", "docid": "d1", "score": %s}\n' % BIG, ":2",
     "a number of 5000 digits"),
    ("r.json", '{"q1": {"d1": %s}}\n' % BIG, ":1", "a number of 5000 digits"),
    ("r.json", '{\n  "q1": {"d1": %s}\n}\n' % BIG, "", "a number of 5000 digits"),
    ("q.json", '{"q1": {"d1": %s}}\n' % BIG, ":1", "a number of 5000 digits"),
    ("q.json", '{\n  "q1": %s\n}\n' % DEEP, "", "the file nests arrays or objects")])
def test_a_run_or_json_qrels_past_pythons_json_reader_is_a_file_line_error(tmp_path, name, content, where, problem):
    """A score or grade of over 4,300 digits was a ValueError traceback telling the user to call
    sys.set_int_max_str_digits, and arrays nested thousands deep a RecursionError one, in every JSON run shape and
    in JSON qrels: the corpus readers name these, the run and qrels readers did not (probe round 18)."""
    from retriever.qrels import read_qrels

    path = tmp_path / name
    path.write_text(content)
    gc.collect()  # a finalizer run by a collection deep in the nesting failed, and pytest's unraisable hook with it
    with pytest.raises(InputFileError) as caught:
        (read_qrels if name.startswith("q") else read_run)(path)
    assert str(caught.value).startswith(f"{path}{where}: {problem}"), caught.value
    assert "set_int_max_str_digits" not in str(caught.value)


def test_a_run_mapping_over_lines_whose_first_line_ends_in_a_comma_is_read_as_qrels_are(tmp_path):
    """{"q1": {...},\\n "q2": {...}} (one mapping, a query a line) was read as JSONL and refused at line 1, "invalid
    JSON", though JSON qrels of that shape were read (leftover of probe round 17)."""
    from retriever.qrels import read_qrels

    path = tmp_path / "r.json"
    path.write_text('{"q1": {"d1": 1.5, "d2": 1},\n "q2": {"d1": 0.5}}\n', encoding="utf-8")
    assert read_run(path) == {"q1": {"d1": 1.5, "d2": 1.0}, "q2": {"d1": 0.5}}
    path.write_text('{"q1": {"d1": 2, "d2": 1},\n "q2": {"d1": 0}}\n', encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 2, "d2": 1}, "q2": {"d1": 0}}
    path.write_text('{"qid": "q1", "hits": [{"id": "d1", "score": 1}]\n{"qid": "q2", "hits": []}\n')
    with pytest.raises(InputFileError, match=r"r.json:1: invalid JSON .*each line must be \{\"qid\""):
        read_run(path)  # a JSONL line cut short is still named by its line


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("records", [[{"qid": "q1", "hits": [{"id": "d1", "score": 1.5}]}],
                                     [{"query_id": "q1", "doc_id": "d1", "score": 1.5}]])
def test_a_run_saved_as_one_json_array_is_named_with_how_to_write_it_as_jsonl(tmp_path, indent, records):
    """A run's records json.dump'd as one array was "invalid JSON (Expecting value)" at line 1 when indented, and a
    flat one on one line was told to hold a {"qid", "hits"} object per line; JSON qrels of that shape were named."""
    import shlex
    import subprocess
    import sys

    path = tmp_path / "r.json"
    path.write_text(json.dumps(records, indent=indent) + "\n", encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_run(path)
    line = str(caught.value)
    assert line.startswith(f"{path}: the file is one JSON array {'on one line' if indent is None else 'over several'}")
    command = line[line.index("python -c"):line.index(" > FILE.jsonl")].replace("FILE", str(path))
    converted = subprocess.run(shlex.split(command.replace("python", sys.executable, 1)), capture_output=True,
                               text=True, check=True).stdout
    path.write_text(converted, encoding="utf-8")
    assert read_run(path) == {"q1": {"d1": 1.5}}


@pytest.mark.parametrize("text", ['{\n  "qid": "q1",\n  "hits": [{"id": "d1", "score": 1}]\n}\n{\n  "qid": "q2",\n'
                                  '  "hits": []\n}\n', '{\n  "q1": {"d1": 1}\n}\n{\n  "q2": {"d1": 2}\n}\n'])
def test_pretty_printed_jsonl_runs_and_qrels_are_named_with_how_to_write_them_one_a_line(tmp_path, text):
    """`jq . run.jsonl > run.json` (objects indented one after another) was "invalid JSON (Extra data)" with the
    hint of one mapping for the file, which it was not."""
    from retriever.qrels import read_qrels

    path = tmp_path / "r.json"
    path.write_text(text, encoding="utf-8")
    for reader in (read_run, read_qrels):
        with pytest.raises(InputFileError) as caught:
            reader(path)
        assert str(caught.value).startswith(
            f"{path}:{text[:text.index(chr(10) + '{')].count(chr(10)) + 2}: a second JSON object starts here: the file holds "
            "several JSON objects over several lines (pretty-printed JSONL, as jq writes without -c); write one per "
            "line (jq -c . FILE)"), str(caught.value)


@pytest.mark.parametrize("line", ['{"_id": "q1", "text": "what is honey"}', '{"_id": "d1", "title": "Bees", "text": "x"}',
                                  '{"id": "d1", "contents": "x"}'])
def test_a_corpus_or_queries_file_given_as_a_run_or_qrels_is_named_so(tmp_path, line):
    """queries.jsonl given as --qrels was told "the judgments of query '_id' are a string", and as --run "missing
    'qid' or 'hits' list": neither said the file holds queries or passages."""
    from retriever.qrels import read_qrels

    path = tmp_path / "queries.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    for reader, what in ((read_run, "a run"), (read_qrels, "judgments (qrels)")):
        with pytest.raises(InputFileError) as caught:
            reader(path)
        assert str(caught.value).startswith(f"{path}: its first line is a corpus or queries record, not {what}; a "
                                            "queries file goes to search --queries, a corpus to encode or build"), \
            str(caught.value)


@pytest.mark.parametrize("name, text", [
    ("r.jsonl", '{"qid": " q1", "hits": [{"id": "d1 ", "score": 1}]}\n'),
    ("r.json", '{"q1\\t": {" d1": 1}}\n'),
    ("flat.jsonl", '{"query_id": "q1 ", "doc_id": " d1", "score": 1}\n'),
    ("qrels.json", '{" q1": {"d1 ": 1}}\n'),
    ("qrels.jsonl", '{"query-id": "q1 ", "corpus-id": "\\u00a0d1", "score": 1}\n'),
])
def test_whitespace_around_a_json_id_is_dropped_as_the_corpus_readers_drop_it(tmp_path, name, text):
    """The corpus, queries and training readers drop the whitespace around an id (' d1' is d1), and TREC files
    cannot hold it, but a JSON run or JSON qrels refused the same ' d1' ("holds whitespace"): one file's id was
    another's refusal. Whitespace inside an id is still refused; two ids that are one once trimmed are a repeat."""
    from retriever.corpus import iter_documents
    from retriever.qrels import read_qrels

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    read = read_qrels if name.startswith("qrels") else read_run
    assert read(path) == {"q1": {"d1": 1}}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": " d1", "text": "x"}\n', encoding="utf-8")
    assert [document.id for document in iter_documents(corpus)] == ["d1"]


@pytest.mark.parametrize("name, text, message", [
    ("r.json", '{"q1": {"d1": 1, " d1": 2}}\n', r"r\.json:1: document 'd1' appears twice for query 'q1'"),
    ("qrels.json", '{"q1": {"d1": 1, " d1": 2}}\n', r"qrels\.json:1: document 'd1' for query 'q1' judged 2 here but 1"),
])
def test_two_json_ids_that_are_one_once_trimmed_are_refused_as_a_repeat(tmp_path, name, text, message):
    from retriever.qrels import read_qrels

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError, match=message):
        (read_qrels if name.startswith("qrels") else read_run)(path)
    path.write_text('{"q1": {"d1": 1, " d1": 1}}\n', encoding="utf-8")
    if name.startswith("qrels"):  # an identical repeated judgment is taken, as the TSV reader takes it
        assert read_qrels(path) == {"q1": {"d1": 1}}
