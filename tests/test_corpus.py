from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retriever.corpus import BeirDataset, Fields, ReadStats, iter_documents, read_queries
from retriever.errors import InputFileError, RetrieverError


def read_all(path, **kwargs):
    return list(iter_documents(path, **kwargs))


def test_beir_folder_reads_documents_and_queries(tiny_beir):
    docs = read_all(tiny_beir)
    assert [d.id for d in docs][:3] == ["d1", "d2", "d3"]
    assert docs[0].title == "Cats"
    queries = read_queries(tiny_beir)
    assert queries[0].answers == ("flower",)
    assert BeirDataset.open(tiny_beir).qrels_path("test").name == "test.tsv"
    with pytest.raises(RetrieverError, match="no qrels for split 'dev'"):
        BeirDataset.open(tiny_beir).qrels_path("dev")


@pytest.mark.parametrize("split", ["./test", "../qrels/test", "sub\\test", ".."])
def test_a_split_that_is_a_path_is_refused(tiny_beir, split):
    """``./test`` would reach qrels/test.tsv under another name, past the refusal of tuning on test."""
    with pytest.raises(RetrieverError, match="a split is the name of a file in qrels/"):
        BeirDataset.open(tiny_beir).qrels_path(split)


def test_jsonl_with_custom_fields(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"pid": 7, "body": "hello", "head": "t"}\n', encoding="utf-8")
    [doc] = read_all(path, fields=Fields(id="pid", text="body", title="head"))
    assert (doc.id, doc.text, doc.title) == ("7", "hello", "t")


def test_a_named_title_field_no_record_holds_is_refused_while_the_default_may_be_absent(tmp_path):
    """A misspelt --title-field dropped every title silently; a title held by some records only is read."""
    jsonl, parquet = tmp_path / "c.jsonl", tmp_path / "c.parquet"
    jsonl.write_text('{"_id": "a", "text": "x", "title": "T"}\n{"_id": "b", "text": "y", "head": "H"}\n')
    pq.write_table(pa.table({"_id": ["a"], "text": ["x"], "title": ["T"]}), parquet)
    for path in (jsonl, parquet):
        with pytest.raises(InputFileError, match=r"c\.\w+: no title (field|column) 'heading'.*--title-field"):
            read_all(path, fields=Fields(title="heading"))
    assert [d.title for d in read_all(jsonl, fields=Fields(title="head"))] == ["", "H"]
    assert [d.title for d in read_all(jsonl)] == ["T", ""]
    jsonl.write_text('{"_id": "a", "text": "x"}\n')
    assert [d.title for d in read_all(jsonl)] == [""]
    assert [q.id for q in read_queries(jsonl, fields=Fields(title="heading"))] == ["a"]  # a query has no title


@pytest.mark.parametrize("value", ["3.0", "1.5", "-0.0", "1e3"])
def test_jsonl_float_ids_are_refused(tmp_path, value):
    """README: an id is a string or an integer; 3.0 used to become the id "3.0", which no qrels "3" matches."""
    for name, reader in (("c.jsonl", read_all), ("q.jsonl", read_queries)):
        path = tmp_path / name
        path.write_text(f'{{"_id": {value}, "text": "x"}}\n', encoding="utf-8")
        with pytest.raises(InputFileError, match=rf"{name.replace('.', '[.]')}:1: id field '_id' must be a string or "
                                                 r"an integer, got .*; write ids as JSON strings or integers"):
            reader(path)


def test_integer_and_string_ids_and_number_texts_still_read(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": 3, "text": 1.5, "title": 2}\n{"_id": " b ", "text": "x"}\n', encoding="utf-8")
    assert [(d.id, d.text, d.title) for d in read_all(path)] == [("3", "1.5", "2"), ("b", "x", "")]


def test_empty_texts_are_counted(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "a", "text": ""}\n{"_id": "b", "text": "x"}\n', encoding="utf-8")
    stats = ReadStats()
    assert len(read_all(path, stats=stats)) == 2
    assert stats.empty_texts == 1 and "a" in stats.summary()


def test_texts_of_only_characters_the_tokenizer_drops_are_counted_empty(tmp_path):
    """A zero-width space, a control character or a private-use character alone is encoded as [CLS][SEP], as an
    empty text is: `encode` said `2 documents had empty text` of 3 such documents, as queries now say (is_blank)."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "a", "text": "\\u200b"}\n{"_id": "b", "text": "\\u0001", "title": "\\ue000"}\n'
                    '{"_id": "c", "text": " "}\n{"_id": "d", "text": "\\u200b", "title": "Cats"}\n', encoding="utf-8")
    stats = ReadStats()
    assert len(read_all(path, stats=stats)) == 4
    assert stats.empty_texts == 3 and stats.empty_examples == ["a", "b", "c"]


def test_reading_streams(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "a", "text": "x"}\n{broken\n', encoding="utf-8")
    stream = iter_documents(path)
    assert next(stream).id == "a"  # the first document arrives before the bad line is read
    with pytest.raises(InputFileError):
        next(stream)


BAD_CORPORA = {
    "malformed JSON": (b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', r"c\.jsonl:2: malformed JSON"),
    "duplicate id": (b'{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n',
                     r"c\.jsonl:2: duplicate id 'a' \(first seen on line 1\)"),
    "missing text": (b'{"_id": "a", "text": "x"}\n{"_id": "b", "body": "y"}\n', r"c\.jsonl:2: missing text field 'text'"),
    "invalid UTF-8": (b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "caf\xe9"}\n', r"c\.jsonl:2: invalid UTF-8"),
    "empty file": (b"", r"c\.jsonl: the file holds no documents"),
    "not an object": (b'["a", "x"]\n', r'c\.jsonl:1: line is not a JSON object \(it holds an array\); each line must be '
                                       r'one JSON object'),
    "a key given twice": (b'{"_id": "a", "text": "x", "m": {"k": 1, "k": 2}}\n{"_id": "b", "text": "y", "text": "z"}\n',
                          r"c\.jsonl:2: the key 'text' is given 2 times; give each key once"),
}


BAD_TSVS = {
    "wrong column count": (b"a\tx\nb\n", r"c\.tsv:2: expected 2 or 3 tab-separated columns"),
    "the header fixes the column count": (b"id\ttitle\ttext\na\tonly two\n",
                                          r"c\.tsv:2: expected 3 tab-separated columns \(id, title, text\), found 2"),
    "cr-only line endings": (b"a\tx\rb\ty\rc\tz\r", r"c\.tsv:1: the line holds a carriage return \(CR\): the file "
                                                  r"has CR-only line endings.*convert the line endings to LF"),
}


BAD_FILES = {**{("c.jsonl", case): bad for case, bad in BAD_CORPORA.items()},
             **{("c.tsv", case): bad for case, bad in BAD_TSVS.items()}}


@pytest.mark.parametrize("name, case", sorted(BAD_FILES))
def test_bad_corpus_names_file_and_line(tmp_path, name, case):
    content, pattern = BAD_FILES[name, case]
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputFileError, match=pattern):
        read_all(path)


SHARED = {  # name: (documents, queries, {split: judged queries}), as the shared copies hold them
    "scifact": (5183, 1109, {"test": 300, "train": 809}),
    "cranfield": (1400, 225, {"test": 225}),
    "medline": (1033, 30, {"test": 30}),
}


@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_benchmark_collections_read_whole(name):
    """The benchmark collections (../shared/datasets) read without a complaint, and their qrels name only
    documents and queries they hold; skipped, saying so, where they are absent."""
    from fixtures_corpora import shared_dataset
    from retriever.runs import read_qrels

    dataset = BeirDataset.open(shared_dataset(name))
    documents, queries, judged = SHARED[name]
    stats = ReadStats()
    ids = {document.id for document in iter_documents(dataset.root, stats=stats)}
    query_ids = {query.id for query in read_queries(dataset.queries_path)}
    assert (len(ids), stats.records, len(query_ids)) == (documents, documents, queries)
    for split, count in judged.items():
        qrels = read_qrels(dataset.qrels_path(split))
        assert len(qrels) == count and set(qrels) <= query_ids
        assert {doc for grades in qrels.values() for doc in grades} <= ids


@pytest.mark.parametrize("fmt", ["auto", "jsonl"])
def test_a_compressed_corpus_is_refused_saying_how_to_unpack_it(tmp_path, fmt):
    """Read as text a gzip file was 'invalid UTF-8; re-encode the file as UTF-8', and without --format 'pass
    --format jsonl', which led to that."""
    import gzip

    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"_id": "a", "text": "x"}\n'))
    with pytest.raises(InputFileError, match=r"corpus.jsonl.gz: the file is gzip-compressed.*gunzip -k corpus"):
        read_all(path, fmt=fmt)


def test_a_piped_corpus_is_read_once_not_drained_by_the_progress_count(tmp_path):
    """The progress bar's counting pass read a pipe to its end, and the reader then said it held no documents."""
    import os
    import threading

    from retriever.corpus import count_records

    read_end, write_end = os.pipe()
    feed = threading.Thread(target=lambda: (os.write(write_end, b'{"_id": "a", "text": "x"}\n{"_id": "b", '
                                                                b'"text": "y"}\n'), os.close(write_end)))
    feed.start()
    path = f"/dev/fd/{read_end}"
    try:
        assert count_records(Path(path), "jsonl") is None
        assert [d.id for d in read_all(path, fmt="jsonl")] == ["a", "b"]
        with pytest.raises(InputFileError, match="no documents came through this stream.*save it to a file"):
            read_all(path, fmt="jsonl")  # what `build` meets when it reads the corpus again
    finally:
        feed.join()
        os.close(read_end)


def test_a_parquet_column_named_twice_is_refused(tmp_path):
    """Two `text` columns: the batch's dict kept the last one silently."""
    path = tmp_path / "c.parquet"
    table = pa.Table.from_arrays([pa.array(["a"]), pa.array(["x"]), pa.array(["y"])], names=["_id", "text", "text"])
    pq.write_table(table, path)
    with pytest.raises(InputFileError, match=r"c\.parquet: the column 'text' is there 2 times; give each column"):
        read_all(path)


@pytest.mark.parametrize("answers, expected", [
    ("null", ()), ('"Paris"', ("Paris",)), ('["Paris", 1945, null]', ("Paris", "1945", "")),
    ('{"text": ["Paris"], "answer_start": [3]}', "metadata.answers must be a list of strings, got an object"),
    ("5", "metadata.answers must be a list of strings, got a number"),
    ('[["Paris"]]', "field 'metadata.answers' must be a string, got list"),
])
def test_query_answers_of_any_json_kind_are_read_or_refused_by_line(tmp_path, answers, expected):
    """null raised a TypeError traceback; SQuAD's own answers object was read as its keys ('text', 'answer_start')."""
    path = tmp_path / "q.jsonl"
    path.write_text('{"_id": "q0", "text": "where"}\n{"_id": "q1", "text": "where", "metadata": {"answers": '
                    + answers + "}}\n")
    if isinstance(expected, tuple):
        assert [q.answers for q in read_queries(path)] == [(), expected]
    else:
        with pytest.raises(InputFileError, match=rf"q\.jsonl:2: {re.escape(expected)}"):
            read_queries(path)


def test_jsonl_errors_name_cr_line_endings_and_read_well(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"_id": "a", "text": "x"}\r{"_id": "b", "text": "y"}\r')
    with pytest.raises(InputFileError, match=r"c\.jsonl:1: the line holds a carriage return \(CR\)"):
        read_all(path)
    path.write_bytes(b'{"_id": "a", "text": "x\x00y"}\n')
    with pytest.raises(InputFileError, match=r"c\.jsonl:1: malformed JSON \(Invalid control character at column 24\)"):
        read_all(path)


def test_a_corpus_read_twice_must_be_a_file(tmp_path):
    """`build FIFO` (and `index --corpus FIFO`) waited for ever on the second read; `build <(...)` encoded
    everything, then found the pipe drained."""
    from retriever.corpus import check_rereadable

    fifo = tmp_path / "corpus.jsonl"
    os.mkfifo(fifo)
    read_end, write_end = os.pipe()
    try:
        for path in (fifo, Path(f"/dev/fd/{read_end}")):
            with pytest.raises(InputFileError, match="is a pipe or a device, not a file, and `build` and `index`"):
                check_rereadable(path)
    finally:
        os.close(read_end), os.close(write_end)
    fifo.unlink()
    fifo.write_text('{"_id": "a", "text": "x"}\n')
    check_rereadable(fifo)
    check_rereadable(tmp_path)  # a BEIR folder stands for its corpus.jsonl


@pytest.mark.parametrize("name, line", [("q.jsonl", '{"_id": "q1", "text": "ice"}\n'), ("q.tsv", "q1\tice\n")])
def test_a_named_fifo_is_read_in_the_format_its_name_tells(tmp_path, name, line):
    """`search --queries q.jsonl` (or `encode c.tsv`) where the file is a named pipe was refused: "a pipe or device has
    no file name to tell its format by", of a name that tells it, which it was read by before (probe round 20). A pipe
    without such a name (/dev/stdin, <(...)) still needs --format."""
    import threading

    fifo = tmp_path / name
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(line,), daemon=True)
    writer.start()
    assert [(query.id, query.text) for query in read_queries(fifo)] == [("q1", "ice")]
    writer.join(10)
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(RetrieverError, match="a pipe or device has no file name to tell its format by; pass "
                                                 "--format jsonl or tsv"):
            read_queries(Path(f"/dev/fd/{read_end}"))
    finally:
        os.close(read_end), os.close(write_end)


@pytest.mark.parametrize("text, line", [("q1\tice\nq2\tzzzz\thoney\n", 2), ("id\ttitle\ttext\nq1\thoney\tzzzz\n", 2)])
def test_a_tsv_query_with_a_title_column_is_refused_not_dropped(tmp_path, text, line):
    """A query has no title, and a TSV's third column (or a header's `title`) was dropped without a word: a TREC
    topic converted to `id title text` was searched by its description alone, its title, the keyword query,
    lost (probe round 13)."""
    path = tmp_path / "queries.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as error:
        read_queries(path)
    assert str(error.value).startswith(f"{path}:{line}: the query has a title")
    path.write_text("q1\tice\t\nq2\thoney\n", encoding="utf-8")  # an empty third column loses nothing
    assert [q.text for q in read_queries(path)] == ["ice", "honey"]


@pytest.mark.parametrize("name", ["topics.txt", "topics.tsv"])
def test_a_trec_topics_file_is_named_as_such_not_as_a_tsv_missing_tabs(tmp_path, name):
    """A TREC topics file (`<top> <num> … <title> …`) read as TSV said "expected 2 or 3 tab-separated columns …;
    separate the columns with one tab", sending the user to add tabs to SGML (probe round 13)."""
    path = tmp_path / name
    path.write_text("<top>\n<num> Number: 301\n<title> International Organized Crime\n</top>\n", encoding="utf-8")
    with pytest.raises(InputFileError) as error:
        read_queries(path)
    message = str(error.value)
    assert message.startswith(f"{path}:1: the line is an SGML/XML tag ('<top>')") and "TREC topics" in message
    assert "JSONL" in message and "separate the columns" not in message


@pytest.mark.parametrize("fields, named", [(Fields(id="pid"), "--id-field pid"),
                                           (Fields(text="body", title="head"), "--text-field body, --title-field head")])
def test_field_flags_on_a_tsv_file_are_refused_not_ignored(tmp_path, fields, named):
    """A TSV's columns are placed or named by its header, so `encode c.tsv --id-field pid` read the first column
    whatever the flag said (and a later run without the flag was refused as a corpus read another way)."""
    corpus = tmp_path / "c.tsv"
    corpus.write_text("id\ttext\n1\tsome text\n", encoding="utf-8")
    with pytest.raises(RetrieverError) as raised:
        list(iter_documents(corpus, fields=fields))
    assert str(raised.value) == (
        f"{corpus}: the field flags ({named}) name JSONL keys or Parquet columns, and a TSV file's columns are id, "
        "text[, title] in that order or named by its header (id, text, title); drop the flags, or rename the "
        "header's columns")
    assert [d.id for d in iter_documents(corpus, fields=Fields())] == ["1"]


def test_read_stats_count_one_document_in_the_singular():
    """Pre-training logged "c.jsonl: 1 documents"."""
    from retriever.corpus import ReadStats

    assert ReadStats(records=1).summary() == "1 document"
    assert ReadStats(records=2, empty_texts=1, empty_examples=["d2"]).summary() == "2 documents; 1 with empty text (e.g. d2)"


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl"])
def test_a_beir_folder_holding_its_file_compressed_says_to_decompress_it(tiny_beir, name):
    """A collection as the Hugging Face hub shares it (corpus.jsonl.gz, queries.jsonl.gz) was 'missing corpus.jsonl;
    not a BEIR folder', without a word of the copy beside it (probe round 16)."""
    import gzip

    packed = tiny_beir / f"{name}.gz"
    packed.write_bytes(gzip.compress((tiny_beir / name).read_bytes()))
    (tiny_beir / name).unlink()
    expected = (f"{tiny_beir}: holds {name}.gz, gzip-compressed, not {name}; decompress it (gunzip -k {packed}) so "
                f"{name} is there")
    with pytest.raises(RetrieverError) as caught:
        BeirDataset.open(tiny_beir)
    assert str(caught.value) == expected
    if name == "corpus.jsonl":
        with pytest.raises(RetrieverError) as caught:
            next(iter_documents(tiny_beir))
        assert str(caught.value) == expected


def test_qrels_beside_the_corpus_rather_than_in_qrels_are_pointed_to(tiny_beir):
    """A collection put together from the Hugging Face hub's two repositories (BeIR/NAME and BeIR/NAME-qrels) holds
    test.tsv beside corpus.jsonl; it was 'no qrels for split 'test' (available: none)' (probe round 16)."""
    (tiny_beir / "qrels" / "test.tsv").rename(tiny_beir / "test.tsv")
    (tiny_beir / "qrels").rmdir()
    with pytest.raises(RetrieverError) as caught:
        BeirDataset.open(tiny_beir).qrels_path("test")
    assert str(caught.value) == (f"{tiny_beir}: no qrels for split 'test' (available: none); its test.tsv is beside "
                                 "corpus.jsonl, and a BEIR collection keeps it in qrels/: move it there "
                                 f"(mkdir -p {tiny_beir}/qrels && mv {tiny_beir}/test.tsv {tiny_beir}/qrels/)")


def test_a_split_kept_as_mteb_json_qrels_is_pointed_to_with_its_conversion(tiny_beir):
    """MTEB's hub copy of a BEIR collection keeps qrels/test.jsonl of {"query-id", "corpus-id", "score"}; evaluate,
    mine and the fusion tuning said 'no qrels for split 'test' (available: none)' of a folder holding it (probe round
    20). The conversion the message gives makes the split's TSV, read as the JSON file is read."""
    import shlex
    import subprocess

    from retriever.qrels import read_qrels

    judgments = tiny_beir / "qrels" / "test.jsonl"
    judgments.write_text("".join(json.dumps({"query-id": q, "corpus-id": d, "score": float(g)}) + "\n"
                                 for q, docs in read_qrels(tiny_beir / "qrels" / "test.tsv").items()
                                 for d, g in docs.items()))
    (tiny_beir / "qrels" / "test.tsv").unlink()
    with pytest.raises(RetrieverError) as caught:
        BeirDataset.open(tiny_beir).qrels_path("test")
    message = str(caught.value)
    assert message.startswith(f"{tiny_beir}: no qrels for split 'test' (available: none); its qrels/test.jsonl holds "
                              "the split as JSON judgments, as MTEB's copies keep it, and a split is read from "
                              "qrels/test.tsv: convert it (python3 -c "), message
    assert message.endswith(f"), or score a run with --qrels {judgments}"), message
    conversion = message.split("convert it (", 1)[1].rsplit("), or score", 1)[0]
    subprocess.run(["sh", "-c", conversion.replace("python3 ", f"{shlex.quote(sys.executable)} ", 1)], check=True)
    assert read_qrels(BeirDataset.open(tiny_beir).qrels_path("test")) == read_qrels(judgments)


@pytest.mark.parametrize("record", [{"_id": "q1", "title": "covid origin", "text": "what is the origin of covid"},
                                    {"_id": "q1", "title": 2020, "text": "what is the origin of covid"}])
def test_a_jsonl_or_parquet_query_with_a_title_is_refused_not_dropped(tmp_path, record):
    """As a TSV title column is refused, a JSONL or Parquet query's title was dropped without a word: a TREC topic
    saved as {"_id", "title", "text"} was searched by its description alone (probe round 17)."""
    jsonl, parquet = tmp_path / "queries.jsonl", tmp_path / "queries.parquet"
    jsonl.write_text(json.dumps({"_id": "q0", "text": "ice"}) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    pq.write_table(pa.table({"_id": ["q0", "q1"], "text": ["ice", "origin"], "title": ["", str(record["title"])]}),
                   parquet)
    for path, hint in ((jsonl, "drop the title key"), (parquet, "drop the title column")):
        with pytest.raises(InputFileError) as error:
            read_queries(path)
        assert str(error.value).startswith(f"{path}:2: the query has a title"), error.value
        assert hint in str(error.value)
    jsonl.write_text(json.dumps({"_id": "q1", "title": "", "text": "ice"}) + "\n", encoding="utf-8")
    assert [q.text for q in read_queries(jsonl)] == ["ice"]  # an empty title loses nothing


def test_reading_a_long_text_makes_no_copy_of_it_to_tell_whether_it_is_blank(tmp_path):
    """Each record's text and title were stripped (copied) to tell a blank one: a text line of a gigabyte cost another
    gigabyte at its read (probe round 17)."""
    import tracemalloc

    from retriever.corpus import _checked

    text = "  word" * 4_000_000 + " "  # 24 MB, spaces at both ends
    records = [(1, "d1", text, " " + text, {}), (2, "d2", " \u200b " * 50_000, "", {})]
    tracemalloc.start()
    try:
        stats = ReadStats()
        assert [record[1] for record in _checked(records, tmp_path / "c.jsonl", stats, "document")] == ["d1", "d2"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stats.empty_texts == 1 and stats.empty_examples == ["d2"]  # a zero-width space is blank
    assert peak < 1 << 20, peak


def test_a_csv_corpus_is_named_as_csv_with_how_to_convert_it(tmp_path):
    """`encode c.csv` said "cannot tell the format from the extension; pass --format jsonl, tsv or parquet", and
    --format tsv then refused its commas: two runs to learn that CSV is converted; a tab-separated .csv still reads."""
    path = tmp_path / "c.csv"
    path.write_text("id,text\na,x\n", encoding="utf-8")
    with pytest.raises(RetrieverError) as caught:
        list(iter_documents(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: a CSV file by its name, which no reader here takes (JSONL, TSV or Parquet); "
                              "convert a CSV file to JSONL, keyed by its header, e.g. python -c"), message
    assert message.endswith("(tab-separated columns under a .csv name: pass --format tsv)")
    path.write_text("a\tx\n", encoding="utf-8")
    assert [document.id for document in iter_documents(path, fmt="tsv")] == ["a"]
