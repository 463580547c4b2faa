"""Relevance judgments (qrels) on disk; their numbers are read as trec_eval reads them (``retriever.trec_numbers``).

Qrels are read from BEIR TSV or TREC qrels, because public benchmarks ship both; ``retriever.runs`` re-exports
``read_qrels``. Every malformed line is reported as ``file:line: problem; what to do``.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from retriever.errors import InputFileError, RetrieverError, given_path
from retriever.files import carriage_return_error, check_is_file, decoded_lines
from retriever.json_shapes import (BEIR_JUDGMENT_KEYS, array_file_error, is_beir_judgment, json_kind, opens_json,
                                   record_error)
from retriever.run_json import FLAT_KEYS, SWAPPED_HINT, first_line_json, flat_keys, flat_lines, json_id, json_mappings
from retriever.texts import columns, id_problem
from retriever.trec_numbers import GRADE_RANGE, checked_grade, parse_relevance

Qrels = dict[str, dict[str, int]]
"""qid -> docid -> graded relevance (trec_eval: >= 1 is relevant, 0 judged non-relevant)."""
REPORTED_SPLIT = "test"  # the split results are reported on: no tuning or training may see it

# The grade column's name in a header; a first line is a header only if it says so.
_HEADER_SCORE_NAMES = {"score", "relevance", "rel", "label", "grade", "judgment", "judgement"}
LAYOUT_HINT = ("qrels lines are 'query-id corpus-id grade' (BEIR) or 'qid iter docid grade' (TREC), "
               "columns separated by tabs or spaces")


def _columns(path: Path, lineno: int, text: str) -> list[str]:
    """A line's columns: split at tabs when that gives 3 or 4 (so an id holding a space is named as such), else
    at any whitespace, as trec_eval reads qrels. A column of whitespace alone between tabs is refused as an empty one
    is, named as what it holds: 'q1<TAB> <TAB>d1<TAB>1' was said to hold "two tabs in a row"."""
    fields = text.split("\t")
    cols = [c.strip() for c in fields]
    if len(cols) not in (3, 4):
        cols = columns(text)
    elif "" in cols:  # 'q1<TAB>d1<TAB><TAB>1' was "bad query or document id: empty id", of a line holding both
        at = cols.index("")
        blank = f"holds only whitespace ({fields[at]!r} between tabs)" if fields[at] else "is empty (two tabs in a row)"
        raise InputFileError(path, lineno, f"column {at + 1} of {len(cols)} {blank}",
                             f"remove the extra tab; {LAYOUT_HINT}")
    if len(cols) not in (3, 4):
        if "\r" in text:
            raise carriage_return_error(path, lineno)
        if len(cols) == 6 and cols[1] == "Q0":  # the one thing 'Q0' stands for
            raise InputFileError(path, lineno, "expected 3 or 4 columns, found 6: the line is a TREC run line ('qid "
                                 "Q0 docid rank score tag'), not a judgment", SWAPPED_HINT)
        raise InputFileError(path, lineno, f"expected 3 or 4 columns, found {len(cols)}", LAYOUT_HINT)
    return cols


# What a run's and qrels' values are, for ``by_query``'s refusal.
_VALUES = {"a run": "hits ({document id: score}, or (id, score) pairs), as Searcher.run returns",
           "qrels": "{document id: grade}, as read_qrels returns"}


def by_query(value: object, what: str) -> Mapping:
    """``value``, ``what`` ("a run" or "qrels"), refused in one line when it is no mapping of query id to hits or
    grades: a list of Searcher.search results was an AttributeError traceback from ``.items()``. A run streamed batch
    by batch (``partial_runs.StreamedRun``) is read through ``items()`` alone, as a mapping is."""
    if not isinstance(value, Mapping) and not (what == "a run" and callable(getattr(value, "items", None))):
        raise RetrieverError(f"{what} must be a mapping of query id to {_VALUES[what]}, not a "
                             f"{type(value).__name__}")
    return value


def int_grades(qrels: Qrels) -> Qrels:
    """Library qrels (``evaluate_run``'s) with every grade an int (``checked_grade``); plain ints, as ``read_qrels``
    gives, are taken as they are."""
    for qid, docs in qrels.items():
        if not isinstance(docs, Mapping):
            raise RetrieverError(f"the judgments of query {qid!r} must be a mapping of document id to grade")
    low, high = GRADE_RANGE
    if all(type(grade) is int and low <= grade <= high for docs in qrels.values() for grade in docs.values()):
        return qrels
    return {qid: {doc: checked_grade(grade, doc, qid) for doc, grade in docs.items()} for qid, docs in qrels.items()}


def relevant_documents(qrels: Qrels) -> list[str]:
    """The documents judged relevant (grade above 0) to any query, once each, in qrels order: what an index or a dev
    corpus must hold for the metrics on these qrels to mean anything."""
    return list(dict.fromkeys(doc for docs in qrels.values() for doc, grade in docs.items() if grade > 0))


def file_path(path: object) -> Path:
    """A run or qrels file's path as a Path; another kind is refused in one line (pathlib's TypeError named no
    argument)."""
    return given_path(path, "path", "a file's path (str or Path)")


def read_qrels(path: str | Path) -> Qrels:
    """Read BEIR TSV (``query-id corpus-id score``, header optional) or TREC qrels (``qid iter docid rel``).

    The format is decided per line by its number of columns, separated by tabs or spaces (ids cannot hold
    whitespace, so the split is unambiguous). A first line whose last column is a grade's name (``score``,
    ``rel``, ...) is the header; any other non-numeric grade is an error. Grades stay ints; negative grades are
    kept (trec_eval treats them as unjudged). An identical repeated judgment is tolerated, a conflicting one is
    an error. A file whose first non-blank line opens a JSON object (``json_shapes.opens_json``) is JSON qrels
    (``_json_qrels``).
    """
    path = file_path(path)
    check_is_file(path)
    lines = decoded_lines(path)
    first = next(lines, None)
    if first is not None and opens_json(first[1]):
        if first[1].lstrip().startswith("["):  # read as columns: "expected 3 or 4, found 6"
            raise array_file_error(path, first[1])
        return _json_qrels(path, itertools.chain([first], lines))
    qrels: Qrels = {}
    header = None
    for position, (lineno, text) in enumerate(itertools.chain([first] if first else [], lines)):
        cols = _columns(path, lineno, text.strip())
        if position == 0 and cols[-1].lower() in _HEADER_SCORE_NAMES:
            header = cols
            continue  # header; any other non-number is reported below, not swallowed
        if cols == header:  # 'relevance 'score' is not an integer' named no cause
            raise InputFileError(path, lineno, f"the line repeats the header of line {first[0]} (files joined with "
                                 "their headers?)", "remove it, or join them without their headers (tail -n +2 FILE)")
        qid, docid, rel_text = cols[0], cols[-2], cols[-1]
        for value in (qid, docid):
            problem = id_problem(value)
            if problem is not None:
                raise InputFileError(path, lineno, f"bad query or document id: {problem}",
                                     "ids must be one token without whitespace")
        rel = parse_relevance(path, lineno, rel_text, position == 0)
        docs = qrels.setdefault(qid, {})
        if docs.setdefault(docid, rel) != rel:
            raise _conflict(path, lineno, qid, docid, rel, docs[docid])
    if not qrels:
        raise InputFileError(path, None, "qrels file is empty", LAYOUT_HINT)
    return qrels


def first_line_where(path: Path, wanted: Callable[[list[str]], bool]) -> str:
    """"line N" of the first line of ``path`` whose columns are ``wanted``, read again for an error message, so the
    readers hold no line number per record; "an earlier line" for a file that cannot be read twice: a pipe read again
    was a StopIteration traceback, and a named pipe waited for a writer forever."""
    try:
        if path.is_file():
            return next((f"line {number}" for number, text in decoded_lines(path) if wanted(columns(text))),
                        "an earlier line")
    except (OSError, RetrieverError):
        pass
    return "an earlier line"


def _conflict(path: Path, lineno: int, qid: str, docid: str, rel: int, first_rel: int) -> InputFileError:
    """A judgment repeated with another grade; its first line is found again only now, as no line number is held
    per judgment (a dict of them doubled the memory of large qrels)."""
    first = first_line_where(path, lambda cols: cols[:1] == [qid] and len(cols) in (3, 4) and cols[-2] == docid)
    return InputFileError(path, lineno, f"document {docid!r} for query {qid!r} judged {rel} here but {first_rel} on "
                                        f"{first}", "keep one judgment per (query, document)")


_JSON_HINT = 'JSON qrels map each query id to an object of document id to grade, {"q1": {"d1": 1}}'


def _json_qrels(path: Path, lines: Iterable[tuple[int, str]]) -> Qrels:
    """Qrels kept as pytrec_eval and ranx take them, JSON objects ``{query id: {doc id: grade}}`` (json.dump'd, or
    one a line: ``run_json.json_mappings``), or one judgment a line as ir_datasets names its fields
    (``{"query_id", "doc_id", "relevance"}``) or MTEB's hub copies of BEIR do (``{"query-id", "corpus-id",
    "score"}``); ids checked as in qrels lines and grades as in library qrels
    (``checked_grade``: ``1.0`` is 1, within a C int)."""
    lines = iter(lines)
    first = next(lines)
    record, first_json = first_line_json(first[1])  # parsed once, for its kind and its reader
    if isinstance(record, dict) and ("hits" in record or flat_keys(record) is not None):  # its keys read as query ids
        raise InputFileError(path, first[0], "the line is a run's (a query's hits, or a hit with its score), not "
                             "judgments", SWAPPED_HINT)
    found = record_error(path, record, "judgments (qrels)")
    if found is not None:  # "the judgments of query '_id' are a string"
        raise found
    keys = _flat_keys(record)
    lines = itertools.chain([first], lines)
    qrels = _mapped_qrels(path, lines, first_json) if keys is None else _flat_qrels(path, lines, keys, first_json)
    if not qrels:
        raise InputFileError(path, None, "qrels file is empty", LAYOUT_HINT)
    return qrels


def _mapped_qrels(path: Path, lines: Iterable[tuple[int, str]], first_json: object) -> Qrels:
    """Qrels of JSON objects ``{query id: {doc id: grade}}`` (``first_json``: the first line's, as ``json_records``
    takes it)."""
    qrels: Qrels = {}
    for lineno, qid, docs in json_mappings(path, lines, _JSON_HINT, "judgments", first_json):
        if not isinstance(docs, dict):
            raise InputFileError(path, lineno, f"the judgments of query {qid!r} are {json_kind(docs)}, not an object "
                                 "of document id to grade", _JSON_HINT)
        judged = qrels[qid] = {}
        for key, grade in docs.items():  # keys ' d1' and 'd1' are one id once trimmed (``json_id``)
            doc = json_id(key, path, lineno, "document id")
            grade = checked_grade(grade, doc, qid, path, lineno)
            _judge(judged, doc, grade, path, lineno, qid, "earlier in the object")
    return qrels


def _flat_keys(record: object) -> tuple[str, str, str] | None:
    """The (query, document, grade) keys of qrels of one ``{"query_id", "doc_id", "relevance"}`` (or qid/docid)
    judgment per line, or of MTEB's ``{"query-id", "corpus-id", "score"}`` (``BEIR_JUDGMENT_KEYS``), judged from the
    first line's ``record``; None for a mapping. Read as one, the field names were taken for query ids."""
    if is_beir_judgment(record):
        return BEIR_JUDGMENT_KEYS
    if not isinstance(record, dict) or "relevance" not in record:
        return None
    keys = next((keys for keys in FLAT_KEYS if set(keys) <= set(record)), None)
    return None if keys is None else (*keys, "relevance")


def _flat_qrels(path: Path, lines: Iterable[tuple[int, str]], keys: tuple[str, str, str], first_json: object) -> Qrels:
    """Qrels of one JSON judgment per line under ``keys`` (query, document, grade); other keys (an iteration) are
    ignored, as the iteration column of TREC qrels is. A repeated judgment is taken as the TSV reader takes it."""
    q, d, graded = keys
    hint = f'each line of flat JSON qrels is one judgment, {{"{q}": ..., "{d}": ..., "{graded}": ...}}'
    qrels: Qrels = {}
    for lineno, qid, doc, relevance in flat_lines(path, lines, (q, d), graded, "flat qrels", hint, first_json):
        grade = checked_grade(relevance, doc, qid, path, lineno)
        _judge(qrels.setdefault(qid, {}), doc, grade, path, lineno, qid, "on an earlier line")
    return qrels


def _judge(judged: dict[str, int], doc: str, grade: int, path: Path, lineno: int | None, qid: str,
           earlier: str) -> None:
    """A JSON judgment added to its query's; one repeated with the same grade is taken, as the TSV reader takes it,
    and one with another grade refused (``earlier``: where the first one was)."""
    if judged.setdefault(doc, grade) != grade:
        raise InputFileError(path, lineno, f"document {doc!r} for query {qid!r} judged {grade} here but "
                             f"{judged[doc]} {earlier}", "keep one judgment per (query, document)")


def is_reported_split(qrels: Path, split: str) -> bool:
    """Whether ``qrels`` (the split's file, as ``BeirDataset.qrels_path`` found it) is the test split's, by name or as
    another name of its file."""
    test = qrels.parent / f"{REPORTED_SPLIT}.tsv"
    return split == REPORTED_SPLIT or (test.is_file() and qrels.is_file() and qrels.samefile(test))
