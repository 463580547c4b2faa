from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from retriever.errors import InputFileError, RetrieverError
from retriever.runs import (
    ranked_hits,
    read_qrels,
    read_run,
    read_trec_run,
    write_run,
    write_trec_run,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------- TREC runs


def test_trec_run_round_trip_is_exact(tmp_path: Path) -> None:
    run = {
        "q1": {"d1": 0.5, "d2": 1.25, "d3": 1 / 3, "d4": -2.0},
        "q2": {"x": 1e-12, "y": 123456789.123456789},
    }
    path = tmp_path / "run.trec"
    write_trec_run(run, path)
    assert read_trec_run(path) == run
    assert read_run(path) == run
    assert not list(tmp_path.glob("*.tmp-*"))


def test_trec_run_lines_are_ranked_by_score_then_docid_descending(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    write_trec_run({"q1": {"a": 1.0, "c": 2.0, "b": 1.0}}, path, tag="mine")
    lines = path.read_text().splitlines()
    assert lines == [
        "q1 Q0 c 1 2.0 mine",
        "q1 Q0 b 2 1.0 mine",
        "q1 Q0 a 3 1.0 mine",
    ]


def test_write_trec_run_accepts_ranked_lists_and_overwrites(tmp_path: Path) -> None:
    path = write(tmp_path / "run.trec", "stale content\n")
    write_trec_run({"q1": [("d2", 3.0), ("d1", 4.0)]}, path)
    assert [line.split()[2:4] for line in path.read_text().splitlines()] == [["d1", "1"], ["d2", "2"]]


def test_write_trec_run_creates_parent_folder(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "deep" / "run.trec"
    write_trec_run({"q": {"d": 1.0}}, path)
    assert read_trec_run(path) == {"q": {"d": 1.0}}


@pytest.mark.parametrize("run", [{"q 1": {"d": 1.0}}, {"q1": {"d 1": 1.0}}, {"q1": {"d": float("nan")}}])
def test_write_trec_run_rejects_unrepresentable_runs(tmp_path: Path, run: dict) -> None:
    path = tmp_path / "run.trec"
    with pytest.raises(RetrieverError):
        write_trec_run(run, path)
    assert not path.exists()
    assert not list(tmp_path.iterdir())  # temp file cleaned up


def test_ranked_hits_orders_like_trec_eval() -> None:
    assert ranked_hits({"a": 1.0, "b": 1.0, "c": 0.5}) == [("b", 1.0), ("a", 1.0), ("c", 0.5)]


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("q1 Q0 d1 1 1.0 tag\nq1 Q0 d2 2 1.0\n", 2, "expected 6"),
        ("\nq1 Q0 d1 1 high tag\n", 2, "is not a number"),
        ("q1 Q0 d1 1 nan tag\n", 1, "NaN"),
        ("q1 Q0 d1 1 1_0 tag\n", 1, "score '1_0' is not a number"),
        ("q1 Q0 d1 1 \u0661\u0662 tag\n", 1, "is not a number"),  # Arabic-Indic digits: float() takes them
        ("q1 Q0 d1 1 0x1p3 tag\n", 1, "is not a number"),
        ("q1 Q0 d1 1 1.0 t\nq2 Q0 d1 1 1.0 t\nq1 Q0 d1 2 0.5 t\n", 3, "first on line 1"),
    ],
)
def test_read_trec_run_errors_name_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = write(tmp_path / "bad.trec", text)
    with pytest.raises(InputFileError) as err:
        read_trec_run(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert fragment in str(err.value)
    assert err.value.line == line


def test_read_run_reports_missing_empty_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="file not found"):
        read_run(tmp_path / "nope.trec")
    with pytest.raises(InputFileError, match="empty"):
        read_run(write(tmp_path / "empty.trec", "\n  \n"))
    bad = tmp_path / "latin1.trec"
    bad.write_bytes(b"q1 Q0 d1 1 1.0 t\nq1 Q0 caf\xe9 2 0.5 t\n")
    with pytest.raises(InputFileError, match=rf"{bad}:2: invalid UTF-8"):
        read_run(bad)


# ---------------------------------------------------------------------------- JSONL runs


def test_jsonl_run_round_trip_and_autodetect(tmp_path: Path) -> None:
    run = {"q1": {"d1": 0.25, "d2": 0.75}, "7": {"é": 1.0}}
    path = tmp_path / "run.jsonl"
    write_run(run, path, fmt="jsonl")
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert first == {"qid": "q1", "hits": [{"id": "d2", "score": 0.75}, {"id": "d1", "score": 0.25}]}
    assert read_run(path) == run


def test_read_run_jsonl_accepts_leading_blank_lines_and_int_qids(tmp_path: Path) -> None:
    path = write(tmp_path / "run.jsonl", '\n  {"qid": 3, "hits": [{"id": "a", "score": 2}]}\n')
    assert read_run(path) == {"3": {"a": 2.0}}


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ('{"qid": "q1", "hits": []}\n{"qid": "q2", "hits": [\n', 2, "invalid JSON"),
        ('{"qid": "q1"}\n', 1, "'hits'"),
        ('{"qid": "q1", "hits": [{"id": "a"}]}\n', 1, "hit 1 lacks"),
        ('{"qid": "q1", "hits": [{"id": "a", "score": "x"}]}\n', 1, "not a number"),
        ('{"qid": 1.5, "hits": []}\n', 1, "qid 1.5 is not a string"),
        ('{"qid": "q1", "hits": [{"id": "a", "score": 1}, {"id": "a", "score": 2}]}\n', 1, "twice"),
        ('{"qid": "q1", "hits": []}\n\n{"qid": "q1", "hits": []}\n', 3, "already appeared on line 1"),
    ],
)
def test_read_run_jsonl_errors_name_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = write(tmp_path / "bad.jsonl", text)
    with pytest.raises(InputFileError) as err:
        read_run(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert fragment in str(err.value)


# ---------------------------------------------------------------------------- qrels


@pytest.mark.parametrize("line", [
    '{"qid": "q1", "hits": [{"id": "d5", "score": 9, "id": "d6"}]}',  # which document is ranked first?
    '{"qid": "q1", "hits": [{"id": "d5", "score": 9, "score": 1}]}',
    '{"qid": "q1", "hits": [{"id": "d5", "score": 9}], "qid": "q2"}',
])
def test_a_jsonl_run_giving_a_key_twice_is_refused_not_read_with_the_last_value(tmp_path: Path, line: str) -> None:
    path = write(tmp_path / "run.jsonl", '{"qid": "q0", "hits": []}\n' + line + "\n")
    with pytest.raises(InputFileError, match=rf"^{path}:2: the key '(id|score|qid)' is given 2 times in one object"):
        read_run(path)


def test_read_qrels_beir_tsv_with_header(tmp_path: Path) -> None:
    path = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td1\t2\n")
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}


def test_read_qrels_beir_tsv_refuses_ids_with_spaces(tmp_path: Path) -> None:
    """A TREC run cannot hold such an id, so no run could ever match it (issue #10 item 9)."""
    path = write(tmp_path / "test.tsv", "q1\td2\t1.0\nq1\tdoc one\t3\n")
    with pytest.raises(InputFileError, match=r"test\.tsv:2: bad query or document id: id 'doc one' holds whitespace"):
        read_qrels(path)


def test_read_qrels_trec_format_spaces_tabs_and_negative_grades(tmp_path: Path) -> None:
    path = write(tmp_path / "qrels.txt", "301 0 FT1 2\n301  0  FT2  -1\n302\t0\tFT1\t0\n")
    assert read_qrels(path) == {"301": {"FT1": 2, "FT2": -1}, "302": {"FT1": 0}}


def test_read_qrels_mixed_formats_per_line(tmp_path: Path) -> None:
    path = write(tmp_path / "qrels.txt", "q1\td1\t1\nq1 0 d2 2\n")
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 2}}


def test_read_qrels_tolerates_identical_duplicates(tmp_path: Path) -> None:
    path = write(tmp_path / "qrels.txt", "q1 0 d1 1\nq1 0 d1 1\n")
    assert read_qrels(path) == {"q1": {"d1": 1}}


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("q1 0 d1 1\nq1 d2\n", 2, "expected 3 or 4 columns, found 2"),
        ("q1 0 d1 1\nq1 0 d2 1 extra\n", 2, "3 or 4 columns"),
        ("q1\td1\t1\nq1\td2\tyes\n", 2, "not an integer"),
        ("q1 0 d1 0.5\n", 1, "not an integer"),
        ("q1\td1\t1_0\n", 1, "relevance '1_0' is not an integer"),
        ("q1\td1\t\u0661\n", 1, "is not an integer"),  # ARABIC-INDIC DIGIT ONE: int() takes it, atol does not
        ("q1\td1\t2147483648\n", 1, "beyond a 32-bit integer"),
        ("q1\td1\t1" + "0" * 400 + "\n", 1, "beyond a 32-bit integer"),
        ("q1\td1\t1e10\n", 1, "beyond a 32-bit integer"),
        ("q1 0 d1 1\n\nq1 0 d1 2\n", 3, "judged 2 here but 1 on line 1"),
    ],
)
def test_read_qrels_errors_name_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = write(tmp_path / "qrels.txt", text)
    with pytest.raises(InputFileError) as err:
        read_qrels(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert fragment in str(err.value)


@pytest.mark.parametrize("text", ["", "\n\n", "query-id\tcorpus-id\tscore\n"])
def test_read_qrels_empty_file_is_an_error(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "qrels.tsv", text)
    with pytest.raises(InputFileError, match="qrels file is empty"):
        read_qrels(path)


def test_read_trec_run_accepts_plain_decimal_syntax(tmp_path: Path) -> None:
    path = write(tmp_path / "run.trec", "q1 Q0 a 1 +1.5 t\nq1 Q0 b 2 .5 t\nq1 Q0 c 3 -2. t\nq1 Q0 d 4 1E-3 t\n"
                                        "q1 Q0 e 5 -inf t\nq1 Q0 f 6 7 t\n")
    assert read_run(path) == {"q1": {"a": 1.5, "b": 0.5, "c": -2.0, "d": 1e-3, "e": float("-inf"), "f": 7.0}}


def test_scores_beyond_float_range_are_infinite_in_trec_and_jsonl_alike(tmp_path: Path) -> None:
    """A 400-digit JSON integer used to raise OverflowError; it now reads as the TREC reader reads 1e400."""
    huge = "1" + "0" * 400
    trec = write(tmp_path / "run.trec", f"q1 Q0 a 1 1e400 t\nq1 Q0 b 2 {huge} t\nq1 Q0 c 3 -{huge} t\n")
    jsonl = write(tmp_path / "run.jsonl", '{"qid": "q1", "hits": [{"id": "a", "score": 1e400}, '
                                          f'{{"id": "b", "score": {huge}}}, {{"id": "c", "score": -{huge}}}]}}\n')
    expected = {"q1": {"a": float("inf"), "b": float("inf"), "c": float("-inf")}}
    assert read_run(trec) == expected and read_run(jsonl) == expected


def test_read_qrels_accepts_space_separated_beir_lines(tmp_path: Path) -> None:
    """trec_eval reads qrels split at any whitespace; ids cannot hold whitespace, so 3 space-separated columns
    are unambiguous."""
    path = write(tmp_path / "qrels.txt", "q1 d6 1\nq1  d7\t2\n")
    assert read_qrels(path) == {"q1": {"d6": 1, "d7": 2}}


@pytest.mark.parametrize("header", ["qid iter docid rel", "qid\t0\tdocid\trelevance", "query-id corpus-id score"])
def test_read_qrels_header_named_by_its_grade_column(tmp_path: Path, header: str) -> None:
    path = write(tmp_path / "qrels.txt", f"{header}\nq1 0 d1 1\n")
    assert read_qrels(path) == {"q1": {"d1": 1}}


def test_read_qrels_grades_within_a_c_int_and_integral_decimals(tmp_path: Path) -> None:
    path = write(tmp_path / "qrels.txt", "q1\td1\t2147483647\nq1\td2\t-2147483648\nq1\td3\t2.0\nq1\td4\t+1\n")
    assert read_qrels(path) == {"q1": {"d1": 2**31 - 1, "d2": -2**31, "d3": 2, "d4": 1}}


@pytest.mark.parametrize("first", ["q1 Q0 d1 1 1.0 t\n", '{"qid": "q1", "hits": [{"id": "d1", "score": 1.0}]}\n'])
def test_read_run_reads_a_pipe_once(tmp_path: Path, first: str) -> None:
    import os
    import threading

    trec = first.startswith("q1")
    lines = [first] + [f"q{i} Q0 d{i} 1 1.0 t\n" if trec else json.dumps({"qid": f"q{i}", "hits": [
        {"id": f"d{i}", "score": 1.0}]}) + "\n" for i in range(2, 3000)]
    fifo = tmp_path / "run.pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("".join(lines)))
    writer.start()
    run = read_run(fifo)
    writer.join(10)
    assert len(run) == 2999 and run["q1"] == {"d1": 1.0} and run["q2999"] == {"d2999": 1.0}


@pytest.mark.parametrize("reader, text", [
    (read_qrels, "q\t0\td1\t1\rq\t0\td2\t1\r"),
    (read_run, "q Q0 d1 1 2.0 t\rq Q0 d2 2 1.0 t\r"),
])
def test_cr_only_line_endings_are_named(tmp_path: Path, reader, text: str) -> None:
    path = tmp_path / "cr.txt"
    path.write_bytes(text.encode())
    with pytest.raises(InputFileError, match=r"cr\.txt:1: the line holds a carriage return \(CR\): the file has "
                                             "CR-only line endings"):
        reader(path)


@pytest.mark.parametrize("reader, text", [(read_run, "q1 Q0 d1 1 1.0 t\n"), (read_qrels, "q1\td1\t1\n")])
@pytest.mark.parametrize("module, kind", [("gzip", "gzip"), ("bz2", "bzip2"), ("lzma", "xz")])
def test_a_compressed_run_or_qrels_file_says_it_is_compressed(tmp_path: Path, reader, text: str, module: str,
                                                             kind: str) -> None:
    """Pyserini's runs and many qrels ship as .gz: it said `invalid UTF-8 at byte 1 of the line; re-encode the
    file as UTF-8`, as if the file were text in another encoding."""
    import importlib

    path = tmp_path / "file.gz"
    path.write_bytes(importlib.import_module(module).compress(text.encode() * 50))
    with pytest.raises(InputFileError, match=rf"file\.gz: the file is {kind}-compressed, which this reader does not "
                                             r"unpack; decompress it first \(\w+ (-k )?file\.gz\)"):
        reader(path)


@pytest.mark.parametrize("fmt", ["trec", "jsonl"])
@pytest.mark.parametrize("run, fragment", [
    ({"q1": {"a b": 1.0}}, "holds whitespace"),
    ({"q1": {"": 1.0}}, "empty id"),
    ({"q1": {"d\x00": 1.0}}, "holds a control character"),
    ({"q\x01": {"d1": 1.0}}, "holds a control character"),
    ({"q1": [("d1", 1.0), ("d1", 2.0)]}, "document 'd1' is given twice for query 'q1'"),
    ({"q1": {1: 1.0, "1": 2.0}}, "document '1' is given twice"),
    ({"q1": {"d1": "0.5"}}, "is '0.5', not a number"),
    ({"q1": {"d1": None}}, "is None, not a number"),
    ({"q1": {"d1": float("nan")}}, "is NaN"),
])
def test_the_run_writers_refuse_what_the_run_readers_refuse(tmp_path: Path, fmt: str, run: dict, fragment: str) -> None:
    """The JSONL writer wrote ids with whitespace or empty ones, and both writers control characters and a document
    twice, all of which read_run then refused; a score given as text was written as its float."""
    path = tmp_path / "run.out"
    with pytest.raises(RetrieverError, match=re.escape(fragment)):
        write_run(run, path, fmt=fmt)
    assert not list(tmp_path.iterdir())


def test_write_run_refuses_a_format_it_does_not_write_and_jsonl_infinity(tmp_path: Path) -> None:
    """fmt="TREC" (or any name but "trec") wrote JSONL, and JSONL wrote the non-JSON token Infinity."""
    with pytest.raises(RetrieverError, match="unknown run format 'TREC'; choose one of trec, jsonl"):
        write_run({"q1": {"d1": 1.0}}, tmp_path / "run.trec", fmt="TREC")
    with pytest.raises(RetrieverError, match="is inf, which JSON cannot hold; write the run in TREC format"):
        write_run({"q1": {"d1": float("inf")}}, tmp_path / "run.jsonl", fmt="jsonl")
    assert not list(tmp_path.iterdir())
    write_run({"q1": {"d1": float("inf"), "d2": -float("inf")}}, tmp_path / "run.trec")
    assert read_run(tmp_path / "run.trec") == {"q1": {"d1": float("inf"), "d2": -float("inf")}}


def test_a_ranked_list_of_ids_without_scores_is_named_not_read_letter_by_letter(tmp_path):
    """Hits given as a list of ids (``["d1", "e2"]``) were unpacked as (id, score) pairs of letters: "the score of
    document 'd' for query 'q' is '1'", naming a document no one gave."""
    from retriever.metrics import evaluate_run

    for call in (lambda: evaluate_run({"q": ["d1", "e2"]}, {"q": {"d1": 1}}, ["ndcg@10"]),
                 lambda: write_run({"q": ["d1", "e2"]}, tmp_path / "r.trec")):
        with pytest.raises(RetrieverError, match=r"the hits of query 'q' must be a mapping of document id to score, "
                                                 r"or \(id, score\) pairs, not ids alone"):
            call()
    assert not (tmp_path / "r.trec").exists()


def test_a_run_of_json_arrays_is_named_as_json_not_as_a_trec_line_of_few_columns(tmp_path):
    """A run file holding a JSON array (``json.dump`` of a list of records) was read as TREC: "expected 6
    whitespace-separated columns, found 4"."""
    path = write(tmp_path / "r.json", '[{"qid": "q1", "hits": [{"id": "d1", "score": 1.0}]}]\n')
    with pytest.raises(InputFileError, match=r"r.json: the file is one JSON array on one line, not JSONL \(one "
                                             r"object per line\); write one record per line"):
        read_run(path)


def test_a_run_or_qrels_that_is_no_mapping_or_hits_as_search_results_are_named(tmp_path):
    """`write_run(searcher.search(...), path)` and `evaluate_run` of a list were AttributeError tracebacks, and
    `write_run({"q": searcher.search(...)[0]}, path)` (Hit objects) said the hits were "ids alone" (probe round 13)."""
    from retriever.hits import Hit
    from retriever.metrics import evaluate_run

    hits = [Hit(1, "d1", 0.9, "T", "x"), Hit(2, "d2", 0.5, "U", "y")]
    for call, message in (
            (lambda: write_run([hits], tmp_path / "r.trec"), r"a run must be a mapping of query id to hits"),
            (lambda: evaluate_run([hits], {"q": {"d1": 1}}, ["ndcg@10"]), r"a run must be a mapping of query id"),
            (lambda: evaluate_run({"q": {"d1": 1.0}}, [("q", "d1", 1)], ["ndcg@10"]),
             r"qrels must be a mapping of query id to \{document id: grade\}"),
            (lambda: write_run({"q": hits}, tmp_path / "r.trec"), r"the hits of query 'q' are Hit objects .*"
                                                                   r"\{hit.id: hit.score for hit in hits\}")):
        with pytest.raises(RetrieverError, match=message):
            call()
    assert not (tmp_path / "r.trec").exists()
    write_run({"q": {h.id: h.score for h in hits}}, tmp_path / "r.trec")
    assert read_run(tmp_path / "r.trec") == {"q": {"d1": 0.9, "d2": 0.5}}


@pytest.mark.parametrize("space", ["\u00a0", "\u3000", "\x1c"])
def test_run_and_qrels_columns_split_where_trec_eval_splits_them(tmp_path, space):
    """trec_eval splits lines at C's whitespace only; str.split() split an id holding a no-break space (or U+3000,
    \\x1c) in two, so the 5-column run line `q1 Q0 d1<NBSP>x 1 0.5` was read as document d1 scored 1 (its rank) and
    the qrels line `q1 d1<NBSP>x 1` as a TREC line judging document x, silently (probe round 13)."""
    run = write(tmp_path / "run.trec", f"q1 Q0 d1{space}x 1 0.5\n")
    with pytest.raises(InputFileError, match="expected 6 whitespace-separated columns, found 5"):
        read_run(run)
    qrels = write(tmp_path / "qrels.txt", f"q1 d1{space}x 1\n")
    with pytest.raises(InputFileError, match="bad query or document id"):
        read_qrels(qrels)
    run = write(tmp_path / "run.trec", f"q1 Q0 d1{space}x 1 0.5 tag\n")  # an id the qrels reader refused was read
    with pytest.raises(InputFileError, match=r"run\.trec:1: bad document id: id 'd1\S+x' holds whitespace"):
        read_run(run)


def test_an_ms_marco_run_of_rank_without_score_is_named_with_its_conversion(tmp_path):
    """Pyserini's --output-format msmarco and MS MARCO's own runs ('qid<TAB>docid<TAB>rank') were refused as
    'expected 6 whitespace-separated columns, found 3', naming neither the format nor a way out (probe round 16)."""
    import subprocess

    from retriever.metrics import trec_order

    path = tmp_path / "run.msmarco.tsv"
    path.write_text("1048585\t7187158\t1\n1048585\t7187157\t2\n", encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_run(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:1: expected 6 whitespace-separated columns, found 3: 'qid docid rank' is an "
                              "MS MARCO run, which holds no score"), message
    subprocess.run(re.search(r"\(awk .*?\)", message).group()[1:-1], shell=True, check=True)
    assert trec_order(read_run(tmp_path / "run.msmarco.tsv.trec")["1048585"]) == ["7187158", "7187157"]


def test_a_run_whose_scores_rise_with_its_rank_column_is_warned_of(tmp_path, capsys):
    """A run of distances (FAISS L2: rank 1 nearest, lowest) is ranked by score, highest first, as trec_eval ranks
    it, so it was scored backwards without a word (probe round 16); the ranking itself stays trec_eval's."""
    path = tmp_path / "l2.trec"
    path.write_text("q1 Q0 d1 1 0.25 x\nq1 Q0 d2 2 0.5 x\nq1 Q0 d3 3 0.5 x\nq2 Q0 d4 1 1e-3 x\nq2 Q0 d5 2 7 x\n")
    run = read_run(path)
    assert run["q1"] == {"d1": 0.25, "d2": 0.5, "d3": 0.5}
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {path}: its scores rise with its rank column (rank 1 scored lowest, as "
                          "distances are), but a run is ranked by score, highest first, as trec_eval ranks it"), err
    for text in ("q1 Q0 d1 1 0.5 x\nq1 Q0 d2 2 0.25 x\nq2 Q0 d4 1 7 x\nq2 Q0 d5 2 1e-3 x\n",  # falling: right
                 "q1 Q0 d1 1 1 x\nq1 Q0 d2 2 1 x\n",  # tied
                 "q1 Q0 d1 1 1 x\nq1 Q0 d2 2 2 x\nq2 Q0 d4 1 7 x\nq2 Q0 d5 2 1 x\n",  # mixed: no telling
                 "q1 Q0 d1 x 1 x\nq1 Q0 d2 y 2 x\n",  # no ranks
                 "".join(f"q1 Q0 d{i} {i} {1 if i < 12 else 0} x\n" for i in range(1, 14))):  # ties, then falls
        path.write_text(text)
        read_run(path)
        assert capsys.readouterr().err == "", text
    # A ranked list written with one score throughout is scored in document id order, trec_eval's order of ties, so
    # the ranking its rank column held was dropped without a word (probe round 20); a query with a few ties is not.
    path.write_text("".join(f"q{q} Q0 d{i} {i} 1 x\n" for q in (1, 2) for i in range(1, 7)))
    assert sorted(read_run(path)["q1"].values()) == [1.0] * 6
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {path}: every score ties with the one before it (10 pairs of lines), and "
                          "trec_eval ranks tied hits by document id, not by the rank column, so this run is scored in "
                          "document id order; if the rank column holds the ranking, make it the score (awk "), err
    ranked = tmp_path / "l2.trec.ranked"
    subprocess.run(["sh", "-c", err.split("(awk ", 1)[1].rsplit(")", 1)[0].join(["awk ", ""])], check=True)
    assert [d for d, _ in ranked_hits(read_run(ranked)["q1"])] == [f"d{i}" for i in range(1, 7)]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("reader, text, message", [
    (read_run, "q1 Q0 d1 1 1.0 t\nq1 Q0 d1 2 0.5 t\n", r":2: document 'd1' appears twice for query 'q1' \(first on "
                                                        r"an earlier line\)"),
    (read_qrels, "q1 0 d1 1\nq1 0 d1 2\n", r":2: document 'd1' for query 'q1' judged 2 here but 1 on an earlier line"),
])
def test_a_repeated_pair_read_from_a_pipe_is_named_not_a_traceback(tmp_path: Path, reader, text: str,
                                                                    message: str) -> None:
    """The first line of the pair is looked up by reading the file again, which a pipe (`--run <(...)`) cannot be:
    a StopIteration traceback."""
    import os
    import threading

    fifo = tmp_path / "run.pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(text))
    writer.start()
    try:
        with pytest.raises(InputFileError, match=message):
            reader(fifo)
    finally:
        if writer.is_alive():  # the reader gave up before the writer could open the pipe
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(10)


def test_library_scores_beyond_float_range_are_infinite_as_the_readers_read_them(tmp_path: Path) -> None:
    """A Python integer score past float range (10**400) was an OverflowError traceback from the writers and
    evaluate_run; the readers take a 400-digit score as infinity."""
    run = {"q1": {"a": 10**400, "b": 1.0, "c": -10**400}}
    assert ranked_hits(run["q1"]) == [("a", float("inf")), ("b", 1.0), ("c", float("-inf"))]
    write_trec_run(run, tmp_path / "run.trec")
    assert read_run(tmp_path / "run.trec") == {"q1": {"a": float("inf"), "b": 1.0, "c": float("-inf")}}


@pytest.mark.parametrize("call", [
    lambda: read_run(5), lambda: read_trec_run(None), lambda: read_qrels(["qrels.tsv"]),
    lambda: write_run({"q": {"d": 1.0}}, 5), lambda: write_trec_run({"q": {"d": 1.0}}, b"run.trec"),
])
def test_a_path_of_the_wrong_kind_is_named_in_one_line(call) -> None:
    """pathlib's TypeError traceback ("expected str, bytes or os.PathLike object, not int") named no argument."""
    with pytest.raises(RetrieverError, match=r"^path must be a file's path \(str or Path\), not "):
        call()


@pytest.mark.parametrize("hits", [5, 0.5, True, None, 0, "", b""])
def test_hits_that_are_no_collection_are_named_not_a_type_error(tmp_path, hits):
    """A query's hits given as a number (a count or a score where the hits belong) were a TypeError traceback ("'int'
    object is not iterable") from evaluate_run and the writers. None, 0 or empty text, being false, were taken by
    evaluate_run as a query without hits and scored 0 (the writers refused None and 0, and wrote "" as no hits)."""
    from retriever.metrics import evaluate_run

    for call in (lambda: evaluate_run({"q": hits}, {"q": {"d1": 1}}, ["ndcg@10"]),
                 lambda: write_run({"q": hits}, tmp_path / "r.trec")):
        with pytest.raises(RetrieverError, match=r"^the hits of query 'q' must be a mapping of document id to score, "
                                                 rf"or \(id, score\) pairs, not {type(hits).__name__} "):
            call()
    assert not (tmp_path / "r.trec").exists()


def test_a_run_and_qrels_given_each_other_say_they_may_be_swapped(tmp_path):
    """`evaluate --run qrels.txt --qrels run.trec` said only 'expected 6 whitespace-separated columns, found 4' (3 for
    BEIR qrels with their header) and 'expected 3 or 4 columns, found 6', with no word that the files are each other's;
    JSON ones said "missing 'qid' or 'hits' list" or took field names for query ids (probe round 18)."""
    qrels, beir, run = tmp_path / "qrels.txt", tmp_path / "qrels.tsv", tmp_path / "run.trec"
    qrels.write_text("q1 0 d1 1\n")
    beir.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    run.write_text("q1 Q0 d1 1 0.5 x\n")
    flat_qrels, flat_run, jsonl_run = tmp_path / "q.jsonl", tmp_path / "flat.jsonl", tmp_path / "run.jsonl"
    flat_qrels.write_text('{"query_id": "q1", "doc_id": "d1", "relevance": 1}\n')  # 'missing 'qid' or 'hits' list'
    flat_run.write_text('{"query_id": "q1", "doc_id": "d1", "score": 0.5}\n')  # "query 'query_id' is a string"
    jsonl_run.write_text('{"qid": "q1", "hits": [{"id": "d1", "score": 0.5}]}\n')
    for path, read, found in ((qrels, read_run, ":1: expected 6 whitespace-separated columns, found 4: "),
                              (beir, read_run, ":1: expected 6 whitespace-separated columns, found 3: "),
                              (run, read_qrels, ":1: expected 3 or 4 columns, found 6: "),
                              (flat_qrels, read_run, ": its first line is a judgment"),
                              (flat_run, read_qrels, ":1: the line is a run's"),
                              (jsonl_run, read_qrels, ":1: the line is a run's")):
        with pytest.raises(InputFileError) as caught:
            read(path)
        message = str(caught.value)
        assert message.startswith(f"{path}{found}") and message.endswith(
            "; if the run and qrels files are swapped (--run, --qrels), give each the other"), message


def test_a_run_of_ids_a_run_file_cannot_hold_as_given_is_refused_and_bytes_are_decoded(tmp_path):
    """write_run wrote a None document id as 'None', bytes as "b'd1'" and a float query id (pandas' int column
    holding a NaN) as '3.0': ids no qrels hold, written without a word; ids of numpy integers and strings are text."""
    import numpy as np

    path = tmp_path / "r.trec"
    write_run({np.int64(3): {b"d1": 1.0, np.str_("d2"): 0.5, np.int32(7): 0.25}}, path)
    assert read_run(path) == {"3": {"d1": 1.0, "d2": 0.5, "7": 0.25}}
    for run, problem in [({"q1": {None: 1.0}}, "document id None of query 'q1' is NoneType"),
                         ({3.0: {"d1": 1.0}}, "query id 3.0 is float"),
                         ({"q1": {1.5: 1.0}}, "document id 1.5 of query 'q1' is float"),
                         ({"q1": {True: 1.0}}, "document id True of query 'q1' is bool"),
                         ({"q1": {b"\xff": 1.0}}, "document id b'\\\\xff' of query 'q1' is bytes that are not UTF-8")]:
        for fmt in ("trec", "jsonl"):
            with pytest.raises(RetrieverError, match=f"^{problem}"):
                write_run(run, tmp_path / "bad", fmt=fmt)
    assert not (tmp_path / "bad").exists()


def test_a_whole_trec_run_without_a_hit_is_refused_and_a_batch_of_one_is_not(tmp_path, capsys):
    """write_run and write_trec_run (search -o, evaluate --save-run) wrote an empty file for a run in which no query
    got a hit, which read_run refuses as empty; a batch printed on its own (``whole=False``) may hold none. Each
    names the file it does not write: write_run(run, path) named none, though write_trec_run did."""
    path = tmp_path / "r.trec"
    for call, named in ((lambda: write_trec_run({"q1": {}}, path), f" {path}"),
                        (lambda: write_run({"q1": {}, "q2": []}, path), f" {path}"),
                        (lambda: write_run({}, None), "")):
        with pytest.raises(RetrieverError, match=rf"^cannot write run{re.escape(named)}: (its 1 query got no hit|none "
                                                 r"of its 2 queries got a hit|it holds no query), so a TREC run file "
                                                 r"would hold no line"):
            call()
    assert not list(tmp_path.iterdir()) and capsys.readouterr().out == ""
    write_run({"q1": {}}, None, whole=False)
    write_run({"q1": {}, "q2": {"d1": 1.0}}, tmp_path / "r.trec")
    assert read_run(tmp_path / "r.trec") == {"q2": {"d1": 1.0}} and capsys.readouterr().out == ""
