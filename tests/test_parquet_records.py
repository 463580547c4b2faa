"""Parquet corpus and queries files: columns by name, typed values as the JSONL reader takes them."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retriever.corpus import iter_documents, read_queries
from retriever.errors import InputFileError


def read_all(path, **kwargs):
    return list(iter_documents(path, **kwargs))


def test_parquet_float_ids_are_refused_and_int_ids_read(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"_id": pa.array([1.0, 2.0], pa.float64()), "text": ["a", "b"]}), path)
    with pytest.raises(InputFileError, match=r"c\.parquet:1: id field '_id' must be a string or an integer, got 1\.0; "
                                             "store ids as a string or integer column"):
        read_all(path)
    pq.write_table(pa.table({"_id": pa.array([1, 2], pa.int64()), "text": ["a", "b"], "title": [0.5, None]}), path)
    assert [(d.id, d.title) for d in read_all(path)] == [("1", "0.5"), ("2", "")]


@pytest.mark.parametrize("table, message", [
    ({"_id": ["a"], "text": [["x"]]}, r"c\.parquet:1: field 'text' must be a string, got list; store it as a string column"),
    ({"_id": ["a", None], "text": ["x", "y"]}, r"c\.parquet:2: null id \(field '_id'\); every record needs an id"),
    ({"_id": ["a", "a"], "text": ["x", "y"]},  # a Parquet file has rows, not lines: "first seen on line 1" misled
     r"c\.parquet:2: duplicate id 'a' \(first seen on row 1\); ids must be unique"),
])
def test_parquet_errors_give_parquet_advice(tmp_path, table, message):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table(table), path)
    with pytest.raises(InputFileError, match=message):
        read_all(path)


def test_parquet(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"_id": ["x", "y"], "text": ["one", "two"], "title": ["T", None]}), path)
    assert [(d.id, d.title) for d in read_all(path)] == [("x", "T"), ("y", "")]


def test_parquet_missing_column(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"_id": ["x"], "body": ["one"]}), path)
    with pytest.raises(InputFileError, match="missing column 'text'"):
        read_all(path)


def test_a_parquet_corpus_of_binary_columns_is_decoded_as_utf8_and_bytes_that_are_not_named_by_row(tmp_path):
    """Texts, titles and ids stored as Parquet binary (pandas' bytes objects, some exporters' default) were refused,
    "must be a string, got bytes", where JSONL and TSV bytes are decoded as UTF-8 (leftover of probe round 17)."""
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"_id": pa.array([b"a", b"b"]), "text": pa.array([b"hello", "caf\u00e9".encode()]),
                             "title": pa.array([b"T", None], pa.large_binary())}), path)
    assert [(d.id, d.text, d.title) for d in read_all(path)] == [("a", "hello", "T"), ("b", "caf\u00e9", "")]
    pq.write_table(pa.table({"_id": pa.array([b"q1"]), "text": pa.array([b"honey"], pa.large_binary())}), path)
    assert [(q.id, q.text) for q in read_queries(path)] == [("q1", "honey")]
    pq.write_table(pa.table({"_id": pa.array([b"a"]).dictionary_encode(), "text": pa.array([b"x"], pa.binary_view())}),
                   path)  # pandas' categorical of bytes, and the view type
    assert [(d.id, d.text) for d in read_all(path)] == [("a", "x")]
    pq.write_table(pa.table({"_id": ["a", "b"], "text": pa.array([b"x", b"caf\xe9"])}), path)
    with pytest.raises(InputFileError, match=r"c\.parquet:2: field 'text' holds invalid UTF-8 at byte 3 of its value; "
                                             r"re-encode the column as UTF-8 text"):
        read_all(path)
