"""TSV corpus lines: columns placed by position or named by a header in any order."""
from __future__ import annotations

import pytest

from retriever.corpus import iter_documents, read_queries
from retriever.errors import InputFileError


def read_all(path, **kwargs):
    return list(iter_documents(path, **kwargs))


def test_tsv_with_and_without_title_and_header(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text("id\ttext\ttitle\na\tfirst text\tA\nb\tsecond text\n", encoding="utf-8")
    docs = read_all(path)
    assert [(d.id, d.text, d.title) for d in docs] == [("a", "first text", "A"), ("b", "second text", "")]


@pytest.mark.parametrize("header", ["id\ttitle\ttext", "_id\ttitle\ttext", "title\ttext\tdocid", "TEXT\tID\tTitle"])
def test_tsv_header_maps_columns_by_name(tmp_path, header):
    """A header used to be skipped and the columns read by position, so id/title/text swapped title and text."""
    order = [name.lower().lstrip("_").replace("docid", "id") for name in header.split("\t")]
    values = {"id": "a", "title": "The Title", "text": "the body"}
    path = tmp_path / "c.tsv"
    path.write_text(header + "\n" + "\t".join(values[name] for name in order) + "\n", encoding="utf-8")
    assert [(d.id, d.title, d.text) for d in read_all(path)] == [("a", "The Title", "the body")]


@pytest.mark.parametrize("header, problem", [
    ("id\tbody\ttitle", "header column 2 'body' is not a column this reader knows"),
    ("id\ttitle", "header names no text column"),
    ("title\ttext", "header names no id column"),
    ("id\ttext\tpassage", "header column 3 'passage' is a second text column"),
])
def test_tsv_header_with_unknown_or_missing_columns_is_refused(tmp_path, header, problem):
    path = tmp_path / "c.tsv"
    path.write_text(header + "\na\tx\tT\n", encoding="utf-8")
    with pytest.raises(InputFileError, match=rf"c\.tsv:1: {problem}; name the columns id"):
        read_all(path)


def test_tsv_with_crlf_line_endings_reads(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_bytes(b"a\tx\r\nb\ty\r\n")  # CRLF is fine; CR alone is refused (BAD_TSVS)
    assert [d.id for d in read_all(path)] == ["a", "b"]


@pytest.mark.parametrize("name, fmt", [("corpus.tsv", "auto"), ("corpus.jsonl", "tsv")])
def test_a_jsonl_file_read_as_tsv_says_to_read_it_as_jsonl_not_to_add_tabs(tmp_path, name, fmt):
    """JSONL named .tsv (or read with --format tsv) was 'expected 2 or 3 tab-separated columns (id, text[, title]),
    found 1; separate the columns with one tab': advice that would break the file (probe round 18)."""
    path = tmp_path / name
    path.write_text('{"_id": "a", "text": "x"}\n', encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_all(path, fmt=fmt)
    assert str(caught.value) == (f"{path}:1: the line is JSON, and the file is read as TSV (by its .tsv, .txt or .tab "
                                 "name, or --format tsv); pass --format jsonl, or name the file .jsonl")


def test_a_csv_file_read_as_tsv_says_how_to_convert_it(tmp_path, monkeypatch, capsys):
    """A CSV corpus passed with --format tsv (its .csv name tells no format) was 'expected 2 or 3 tab-separated columns
    (id, text[, title]), found 1; separate the columns with one tab', which breaks texts holding commas or quotes; the
    conversion it names gives a JSONL file the reader takes (probe round 18)."""
    import shlex
    import sys

    from retriever.corpus_records import Fields

    path = tmp_path / "c.csv"
    path.write_text('id,text\n1,"hello, world"\n2,"a ""quoted"" word"\n', encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_all(path, fmt="tsv")
    message = str(caught.value)
    assert message.startswith(f"{path}:1: the line holds commas and no tab, as a CSV line does"), message
    program = shlex.split(message.split("e.g. ")[1].split(" FILE")[0])[2]  # python -c PROGRAM
    monkeypatch.setattr(sys, "argv", ["-c", str(path)])
    exec(program, {})
    converted = tmp_path / "c.jsonl"
    converted.write_text(capsys.readouterr().out, encoding="utf-8")
    assert [(d.id, d.text) for d in read_all(converted, fields=Fields(id="id"))] == [
        ("1", "hello, world"), ("2", 'a "quoted" word')]


@pytest.mark.parametrize("text, problem", [
    ("q1\t0\td1\t1\nq2\t0\td2\t1\n", "the line reads as TREC qrels (query id, iteration, document id, grade)"),
    ("q1 0 d1 1\n", "the line reads as TREC qrels (query id, iteration, document id, grade)"),
    ("query-id\tcorpus-id\tscore\nq1\td1\t1\n", "the line reads as BEIR qrels' header (query-id, corpus-id, score)"),
    ("q1 Q0 d1 1 0.5 bm25\n", "the line reads as a TREC run (qid Q0 docid rank score tag)"),
    ("q1\td1\t1\nq2\td2\t2\n", "the line reads as BEIR qrels (query id, document id, grade)")])
def test_qrels_or_a_run_given_as_queries_is_named_with_the_flag_that_takes_it(tmp_path, text, problem):
    """A qrels file passed as --queries was told its line had 4 columns, an unknown header column, or (3 columns, no
    header) that its third column was a title: it now says what the file is and which flag takes it."""
    path = tmp_path / "test.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as caught:
        read_queries(path)
    assert str(caught.value).startswith(f"{path}:1: {problem}, not a record"), str(caught.value)
    assert "evaluate --qrels" in str(caught.value) or "evaluate --run" in str(caught.value)


@pytest.mark.parametrize("text", ["q1\td1\t1\nq1\td2\t1\n", "q1\td1\t1\nq2\td2\t0\n"])
def test_headerless_beir_qrels_given_as_the_corpus_are_named_so(tmp_path, text):
    """They were read as documents (text 'd1', title '1'): refused only by a repeated query id ('duplicate id'), and
    qrels judging one document a query (MS MARCO's) were encoded as a corpus of ids."""
    path = tmp_path / "test.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError, match=rf"^{path}:1: the line reads as BEIR qrels \(query id, document id, "
                                             r"grade\), not a record; qrels are read by evaluate --qrels"):
        read_all(path)
    path.write_text("d1\tDrosophila wings\t1998\nd2\tbees\t2001\n", encoding="utf-8")  # a year as the title stands
    assert [(d.text, d.title) for d in read_all(path)] == [("Drosophila wings", "1998"), ("bees", "2001")]
