"""Input files in UTF-16 or UTF-32 are named as such by every text reader (they were 'invalid UTF-8 at byte 0 of
the line; re-encode the file as UTF-8', or, without a byte-order mark, a malformed-JSON error at column 2)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from retriever.corpus import iter_documents, read_queries
from retriever.errors import InputFileError
from retriever.file_kinds import unmarked_encoding
from retriever.files import read_json
from retriever.runs import read_qrels, read_run
from retriever.training.data import load_jsonl_examples, read_negatives_file

JSONL = '{"_id": "d1", "text": "hello world"}\n{"_id": "d2", "text": "bye"}\n'

# (codec written, what the message names, the iconv source encoding it suggests)
ENCODINGS = [("utf-16", "UTF-16", "UTF-16"), ("utf-32", "UTF-32", "UTF-32"),
             ("utf-16-le", "UTF-16", "UTF-16LE"), ("utf-16-be", "UTF-16", "UTF-16BE"),
             ("utf-32-le", "UTF-32", "UTF-32LE"), ("utf-32-be", "UTF-32", "UTF-32BE")]


def expected(name: str, kind: str, iconv: str) -> str:
    return (rf"^.*{re.escape(name)}: the file is {kind} text \(.*(byte-order mark|NUL bytes).*\), not UTF-8; save it "
            rf"as UTF-8 \(e\.g\. iconv -f {iconv} -t UTF-8 {re.escape(name)} > ")


@pytest.mark.parametrize("codec, kind, iconv", ENCODINGS, ids=[codec for codec, _, _ in ENCODINGS])
@pytest.mark.parametrize("name, text, reader", [
    ("corpus.jsonl", JSONL, lambda path: list(iter_documents(path))),
    ("corpus.tsv", "id\ttext\nd1\thello\n", lambda path: list(iter_documents(path))),
    ("queries.jsonl", '{"_id": "q1", "text": "what"}\n', read_queries),
    ("test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n", read_qrels),
    ("run.trec", "q1 Q0 d1 1 1.5 bm25\n", read_run),
    ("train.jsonl", '{"query": "q", "positives": ["p"]}\n', load_jsonl_examples),
    ("negatives.jsonl", '{"query_id": "q1", "negatives": ["d1"]}\n', read_negatives_file),
    ("config.json", '{"hidden_size": 8}', read_json),
], ids=["corpus.jsonl", "corpus.tsv", "queries", "qrels", "run", "train", "negatives", "json"])
def test_a_utf16_or_utf32_file_is_named_with_the_command_that_converts_it(tmp_path: Path, codec, kind, iconv,
                                                                           name, text, reader) -> None:
    path = tmp_path / name
    path.write_bytes(text.encode(codec))
    with pytest.raises(InputFileError, match=expected(name, kind, iconv)):
        reader(path)


@pytest.mark.parametrize("head", [b'{"_id": "d1"}\n', b"PAR1\x15\x04\x15\x00\x15", b"a\x00b", b"\xef\xbb\xbfid\ttext",
                                  "q\u00e9\u4e2d".encode("utf-8"), b"\x00" * 3])
def test_utf8_text_parquet_and_short_starts_are_not_taken_for_utf16(head: bytes) -> None:
    assert unmarked_encoding(head) is None



@pytest.mark.parametrize("name, text, reader", [
    ("corpus.tsv", "BZh1\tthe first id starts as bzip2 does\n", lambda path: list(iter_documents(path))),
    ("test.tsv", "BZh91\td1\t1\n", read_qrels)], ids=["corpus", "qrels"])
def test_text_starting_with_bzip2s_letters_is_text(tmp_path: Path, name: str, text: str, reader) -> None:
    """A corpus whose first id was BZh1 was refused as 'bzip2-compressed'."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert len(reader(path)) == 1


def test_a_parquet_file_read_as_text_is_named_parquet(tmp_path: Path) -> None:
    """Parquet piped to `search --queries -` without --format, or named .jsonl, was 'invalid UTF-8 at byte 220 of the
    line; re-encode the file as UTF-8'; with --format parquet (or its own name) it still reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"_id": ["q1"], "text": ["honey"]})
    pq.write_table(table, tmp_path / "q.parquet")
    (tmp_path / "q.jsonl").write_bytes((tmp_path / "q.parquet").read_bytes())
    with pytest.raises(InputFileError, match=r"q\.jsonl: the file is Parquet, not JSONL or TSV text; pass --format "
                                             r"parquet \(or give it a \.parquet name\)"):
        read_queries(tmp_path / "q.jsonl")
    assert [q.id for q in read_queries(tmp_path / "q.jsonl", "parquet")] == ["q1"]
    assert [q.id for q in read_queries(tmp_path / "q.parquet")] == ["q1"]
    (tmp_path / "q.tsv").write_text("PAR1\tfour letters of text\n")  # text, whatever its first id
    assert [q.id for q in read_queries(tmp_path / "q.tsv")] == ["PAR1"]
