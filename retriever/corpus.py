"""Streaming readers for corpora and queries: BEIR folders, JSONL, TSV and Parquet.

Every reader yields one record at a time so a 10M-line corpus never sits in memory, and
every malformed line stops the run with ``file:line: what is wrong; what to do``.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow.parquet as pq

from retriever.beir_dataset import BEIR_FILES, BeirDataset, check_output_outside_qrels
from retriever.corpus_records import DEFAULT_TITLE, TITLE_WINDOW, Fields, as_answers, jsonl_records
from retriever.errors import InputFileError, RetrieverError
from retriever.file_kinds import compressed_copy, file_kind_error, long_json_array
from retriever.files import decoded_lines
from retriever.parquet_records import parquet_records
from retriever.texts import check_text, id_problem, is_blank
from retriever.tsv_records import CSV_HINT, check_tsv_fields, judgments_error, tsv_records
from retriever.wording import counted

FORMATS = ("auto", "beir", "jsonl", "tsv", "parquet")

# The BEIR folder lives in retriever.beir_dataset; its names stay importable from here, where callers read them.
__all__ = ["BEIR_FILES", "FORMATS", "BeirDataset", "Document", "Query", "ReadStats", "check_first_record",
           "check_output_outside_qrels", "check_rereadable", "count_records", "detect_format", "iter_documents",
           "iter_queries", "read_queries", "resolve_corpus_path", "resolve_queries_path"]


@dataclass(frozen=True)
class Document:
    """A passage: ``encode_passages`` encodes ``title`` and ``text`` joined by a space; runs name it by ``id``."""

    id: str
    text: str
    title: str = ""


@dataclass(frozen=True)
class Query:
    """A query read from a file; ``answers`` are the answer strings some collections give (answer recall)."""

    id: str
    text: str
    answers: tuple[str, ...] = ()


@dataclass
class ReadStats:
    """Counts gathered while streaming, reported once reading is done."""

    records: int = 0
    empty_texts: int = 0
    empty_examples: list[str] = field(default_factory=list)

    def summary(self, kind: str = "document") -> str:
        text = counted(self.records, kind)
        if self.empty_texts:
            shown = ", ".join(self.empty_examples)
            text += f"; {self.empty_texts} with empty text (e.g. {shown})"
        return text


def _file_in_folder(path: str | Path, filename: str) -> Path:
    """A BEIR folder stands for its ``filename``; a file stands for itself."""
    path = Path(path)
    if path.is_dir():
        inside = path / filename
        if not inside.is_file():
            raise compressed_copy(path, filename) or RetrieverError(f"{path}: folder has no {filename}; pass a BEIR "
                                                                    "folder or a file")
        return inside
    if not path.exists():
        raise RetrieverError(f"{path}: no such file or folder")
    return path


def resolve_corpus_path(path: str | Path) -> Path:
    return _file_in_folder(path, "corpus.jsonl")


def resolve_queries_path(path: str | Path) -> Path:
    return _file_in_folder(path, "queries.jsonl")


def detect_format(path: Path, fmt: str = "auto") -> str:
    if fmt not in FORMATS:
        raise RetrieverError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    suffix = path.suffix.lower()
    named_parquet = fmt == "parquet" or (fmt in ("auto", "beir") and suffix in (".parquet", ".pq"))
    foreign = None if named_parquet else file_kind_error(path)  # compressed, UTF-16, Parquet: the reader says less
    if foreign is not None:
        raise foreign
    if fmt not in ("auto", "beir"):
        return fmt
    if suffix in (".jsonl", ".json", ".ndjson"):  # a FIFO named so too (its first line is checked as it is read)
        return "jsonl"
    if suffix in (".tsv", ".txt", ".tab"):
        return "tsv"
    if path.exists() and not path.is_file():  # /dev/stdin, <(...): no name to tell by, and no bytes to peek at
        raise RetrieverError(f"{path}: a pipe or device has no file name to tell its format by; pass --format jsonl "
                             "or tsv")
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix == ".csv":  # "pass --format tsv" led to a second refusal, of its commas
        raise RetrieverError(f"{path}: a CSV file by its name, which no reader here takes (JSONL, TSV or Parquet); "
                             f"{CSV_HINT} (tab-separated columns under a .csv name: pass --format tsv)")
    raise RetrieverError(f"{path}: cannot tell the format from the extension; pass --format jsonl, tsv or parquet")


# What a record's number counts, by format: a Parquet file has rows, not lines.
_PLACE = {"jsonl": "line", "tsv": "line", "parquet": "row"}


def _records(path: Path, fmt: str, fields: Fields):
    """(the format, its records); the format's ``_PLACE`` names the records' numbers in messages."""
    fmt = detect_format(path, fmt)
    if fmt == "jsonl":
        return fmt, jsonl_records(path, fields)
    if fmt == "tsv":
        check_tsv_fields(path, fields)
        return fmt, tsv_records(path)
    return fmt, parquet_records(path, fields)


def _checked(records, path: Path, stats: ReadStats, kind: str, unique_ids: bool = True, place: str = "line"):
    """Reject empty ids, duplicate ids (unless ``unique_ids`` is False) and an empty file; count empty texts.
    ``place``: what a record's number counts (``_PLACE``)."""
    seen: dict[str, int] = {}
    for number, record_id, text, title, raw in records:
        problem = id_problem(record_id)
        if problem is not None:
            raise InputFileError(path, number, f"bad {kind} id: {problem}", "ids must be one non-empty token")
        if not (text.isascii() and title.isascii()):  # ASCII is valid text: the usual record skips two calls
            check_text(text, f"{path}:{number}")
            check_text(title, f"{path}:{number}", "the title")
        if unique_ids:
            if record_id in seen:
                raise InputFileError(path, number, f"duplicate id {record_id!r} (first seen on {place} {seen[record_id]})",
                                     "ids must be unique")
            seen[record_id] = number
        stats.records += 1
        if is_blank(text) and is_blank(title):
            stats.empty_texts += 1
            if len(stats.empty_examples) < 3:
                stats.empty_examples.append(record_id)
        yield number, record_id, text, title, raw
    if stats.records == 0:
        plural = "queries" if kind == "query" else f"{kind}s"
        if not path.is_file():  # a pipe: `build` and `index` read the corpus twice, the second time drained
            raise InputFileError(path, None, f"no {plural} came through this stream (a pipe can be read only "
                                 "once, and `build` or `index` reads the corpus more than once)",
                                 "save it to a file and pass that")
        raise InputFileError(path, None, f"the file holds no {plural}", "check that this is the right file")


def iter_documents(path: str | Path, fmt: str = "auto", fields: Fields = Fields(),
                   stats: ReadStats | None = None, unique_ids: bool = True) -> Iterator[Document]:
    """Stream validated documents from a corpus file or BEIR folder.

    The duplicate-id check holds every id in memory; ``unique_ids=False`` leaves it to a caller that
    checks in bounded memory (the on-disk build's external id sort, ``retriever.id_order``).
    """
    corpus = resolve_corpus_path(path)
    stats = stats if stats is not None else ReadStats()
    fmt, records = _records(corpus, fmt, fields)
    for _, doc_id, text, title, _ in _checked(records, corpus, stats, "document", unique_ids, _PLACE[fmt]):
        yield Document(id=doc_id, text=text, title=title)


def check_first_record(path: str | Path, fmt: str, fields: Fields) -> None:
    """Read a corpus file's first record, so fields the flags name wrongly (a Pyserini corpus's ``id``/``contents``
    under the default ``_id``/``text``) are refused before the model loads and Ray starts, which take seconds; a
    named title field, and the text's key where the first records are titles alone, the records they must show up
    in (``TITLE_WINDOW``). A pipe is left to the encoding, which reads it once."""
    corpus = resolve_corpus_path(path)
    if corpus.is_file():
        documents = iter_documents(corpus, fmt, fields)
        titled = not fields.title_named
        for count, document in enumerate(documents, start=1):  # to the first title and text: a record may be
            titled = titled or bool(document.title)  # megabytes
            if (titled and document.text) or count == TITLE_WINDOW:
                break
        documents.close()


def check_rereadable(path: str | Path) -> None:
    """Refuse a pipe, FIFO or device as the corpus of a command that reads it more than once (`build`, `index`),
    before any work: the second read of a FIFO waited for ever, and a drained pipe read as empty after encoding."""
    corpus = resolve_corpus_path(path)
    if not corpus.is_file():
        raise InputFileError(corpus, None, "is a pipe or a device, not a file, and `build` and `index` read the "
                             "corpus more than once", "save it to a file and pass that")


def count_records(path: Path, fmt: str = "auto") -> int | None:
    """How many records a corpus or queries file holds, by a pass that parses no JSON: a progress bar's total.

    None when the file cannot be read (the reader then reports what is wrong with it) or is a stream (a pipe,
    ``/dev/stdin``): it can be read only once, and that read is the reader's.
    """
    if not path.is_file():
        return None
    fmt = detect_format(path, fmt)
    if fmt == "parquet":
        try:
            return pq.ParquetFile(path).metadata.num_rows
        except Exception:  # pyarrow raises several types for a broken file
            return None
    if fmt == "tsv":
        return sum(1 for _ in tsv_records(path))
    return None if long_json_array(path) else sum(1 for _ in decoded_lines(path))  # its one line would be held


# Where a query's title is, and what holds it, by format: a title is refused, not dropped.
_QUERY_TITLE = {"tsv": ("its TSV title column", "column"), "jsonl": ("its 'title' key", "key"),
                "parquet": ("its 'title' column", "column")}


def iter_queries(path: str | Path, fmt: str = "auto", fields: Fields = Fields(),
                 stats: ReadStats | None = None) -> Iterator[Query]:
    """Stream validated queries; SQuAD-style ``metadata.answers`` are kept for answer recall."""
    queries_path = resolve_queries_path(path)
    stats = stats if stats is not None else ReadStats()
    fmt, records = _records(queries_path, fmt, replace(fields, title=DEFAULT_TITLE))  # a query has no title to look for
    where, part = _QUERY_TITLE[fmt]
    for number, query_id, text, title, raw in _checked(records, queries_path, stats, "query", place=_PLACE[fmt]):
        if title.strip():  # dropped, it lost a TREC topic's keyword query; a qrels file's grade is named so
            raise (fmt == "tsv" and judgments_error(queries_path, number, [query_id, text, title])) or InputFileError(
                queries_path, number, f"the query has a title ({where}), and a query is its text alone",
                f"put the whole query in the text {part} (e.g. title and description joined by a space), or drop the "
                f"title {part}")
        yield Query(id=query_id, text=text, answers=as_answers(raw, queries_path, number))


def read_queries(path: str | Path, fmt: str = "auto", fields: Fields = Fields()) -> list[Query]:
    return list(iter_queries(path, fmt, fields))
