"""One corpus or queries record from one JSON line, ids and texts as strings (TSV: ``tsv_records``, Parquet:
``parquet_records``).

``retriever.corpus`` streams whole files through these; every problem is ``file:line: what is wrong; what to do``.
"""
from __future__ import annotations

import json
import math
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from retriever.errors import InputFileError, RetrieverError
from retriever.file_kinds import long_json_array
from retriever.files import carriage_return_error, decoded_lines, json_limit_problem, mid_file_bom_error, repeated_key
from retriever.json_shapes import (JUDGMENTS_HINT, id_mapping_error, is_id_mapping, json_array_error, json_kind,
                                   judgments_kind)
from retriever.texts import id_problem, is_blank, trimmed_id


@dataclass(frozen=True)
class Fields:
    """Which JSONL keys / Parquet columns hold the id, text and title. A title is read where a record has one, but
    a title key other than the default must be in the data: a misspelt one dropped every title silently."""

    id: str = "_id"
    text: str = "text"
    title: str = "title"

    def __post_init__(self) -> None:
        for other, flag in ((self.text, "--text-field"), (self.title, "--title-field")):
            if self.id == other:  # the id would be encoded as the passage's words, or its title, silently
                raise RetrieverError(f"--id-field and {flag} both name {other!r}; a record's id and its "
                                     f"{flag[2:-6]} are read from different keys: name each one's own")
        if self.text == self.title and self.title_named:  # each passage would be its text twice
            raise RetrieverError(f"--text-field and --title-field both name {self.text!r}; a record's text and its "
                                 "title are read from different keys: name each one's own, or leave --title-field out")

    @property
    def title_named(self) -> bool:
        return self.title != DEFAULT_TITLE

    @property
    def reads_title(self) -> bool:
        """Whether a title is read: not when --text-field names the default title key (a collection of titles
        alone), which made every passage its text twice, "Paris Paris", and every query a titled one."""
        return self.title != self.text


DEFAULT_TITLE = Fields.title
TITLE_HINT = "check the name (keys are case-sensitive), or leave --title-field out to read titles where present"
# Records a named --title-field must show up in (its key, even null): a misspelt one was found only after the whole
# corpus was read and encoded.
TITLE_WINDOW = 1000

# How to fix a value of the wrong type, in each format's own terms: (texts, ids).
_HINTS = {"jsonl": ("write it as a JSON string", "write ids as JSON strings or integers"),
          "parquet": ("store it as a string column", "store ids as a string or integer column")}


class MissingFieldError(InputFileError):
    """A JSONL record without the key its id or text is read from; ``beir_keys`` gives it a collection's hint."""


BEIR_KEYS = "a BEIR collection keys its records '_id' and 'text' (and 'title')"


@contextmanager
def beir_keys(keyed: str = BEIR_KEYS) -> Iterator[None]:
    """Reading a file with BEIR's keys (a collection's corpus.jsonl or queries.jsonl, a --tuning-queries-file): a
    missing key is not met by --id-field or --text-field, which evaluate and mine lack, train takes only with
    --corpus, and build applies to the corpus. ``keyed``: what the hint says keys the file so."""
    try:
        yield
    except MissingFieldError as error:
        raise InputFileError(error.path, error.line, error.problem, f"{keyed}, which no flag renames here; rename "
                             "the keys in the file") from None


def _shown(value: object) -> str:
    """A wrong value as the message names it: numbers as written, anything else by its type."""
    if value is None:
        return "null"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)[:40]
    return type(value).__name__


def as_text(value: object, path: Path, number: int | None, name: str, fmt: str = "jsonl") -> str:
    """A text or title as a string: null is empty and a number is written out, but a list or object is refused,
    not dumped into the text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    raise InputFileError(path, number, f"field {name!r} must be a string, got {_shown(value)}", _HINTS[fmt][0])


def as_id(value: object, path: Path, number: int | None, name: str, fmt: str = "jsonl") -> str:
    """An id as a string: only a string or an integer, since a float's text ("3.0") never matches the "3" that
    qrels and run files hold, and NaN or a list is no id at all."""
    if isinstance(value, str):
        return trimmed_id(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None:
        raise InputFileError(path, number, f"null id (field {name!r})",
                             "every record needs an id: fill it in or drop the record")
    raise InputFileError(path, number, f"id field {name!r} must be a string or an integer, got {_shown(value)}",
                         _HINTS[fmt][1])


def as_token_id(value: object, path: Path, number: int | None, name: str) -> str:
    """``as_id`` that also refuses what no run or qrels file can hold (empty, whitespace): the ids training reads
    name queries and documents that runs and judgments name."""
    text = as_id(value, path, number, name)
    problem = id_problem(text)
    if problem is not None:
        raise InputFileError(path, number, f"bad id in field {name!r}: {problem}", "ids must be one non-empty token")
    return text


def as_answers(record: dict, path: Path, number: int) -> tuple[str, ...]:
    """A query's SQuAD-style ``metadata.answers``: a string or a list of them (numbers written out); null is none.
    An object (SQuAD's own ``{"text": [...], "answer_start": [...]}``) was read as its keys, and a number raised."""
    metadata = record.get("metadata")
    answers = metadata.get("answers") if isinstance(metadata, dict) else None
    if answers is None:
        return ()
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list):
        raise InputFileError(path, number, f"metadata.answers must be a list of strings, got "
                             f"{json_kind(answers)}", 'write it as ["answer", ...]')
    return tuple(as_text(answer, path, number, "metadata.answers") for answer in answers)


class _ObjectParser(threading.local):
    """One JSON decoder per thread, kept: ``json.loads`` with a hook builds a decoder per call, a third of a short
    line's parse. ``pairs``: the (key, value) pairs of the last object parsed, the line's own when it is an object
    (inner objects close first)."""

    def __init__(self) -> None:
        self.pairs: list = []
        self.decode = json.JSONDecoder(object_pairs_hook=self._keep).decode

    def _keep(self, pairs: list) -> dict:
        self.pairs = pairs
        return dict(pairs)


_PARSER = _ObjectParser()


def parse_json_object(line: str, path: Path, number: int, first: bool = False, formats: bool = False) -> dict:
    """One JSONL line as a dict, or an error naming file:line. A key given twice is refused: JSON parsers
    keep one of the values (Python the last, others the first), so the record would be read silently. ``first``: the
    file's first non-blank line, where a JSON array or indented object shows the file is JSON, not JSONL, and tabs
    a TSV file; ``formats``: a corpus or queries file, which might have been read as TSV or be a map of ids to
    texts, so the message says how to read or convert it."""
    hint = 'each line must be one JSON object, {"key": value, ...}'
    try:
        record = _PARSER.decode(line)
    except json.JSONDecodeError as error:
        if "\r" in line:  # CR-only line endings: the whole file reads as one line
            raise carriage_return_error(path, number) from None
        if line.startswith("\ufeff"):  # the reader drops a BOM only at the file's start
            raise mid_file_bom_error(path, number) from None
        spread = first and line.strip().startswith("{") and line.rstrip()[-1] in "{[:,"  # {, or {"q1": "text",
        if spread and formats:  # one JSON object over several lines: an id-to-text one is the likely kind
            raise id_mapping_error(path, spread=True) from None
        if spread:  # a training file: its own records, indented (no id-to-text map)
            raise InputFileError(path, None, "the file is one JSON object over several lines, not JSONL (one object "
                                 "per line)", "write each record as one JSON object on a line of its own") from None
        if first and line.lstrip().startswith("["):  # an array over several lines: no JSONL line is an array
            raise json_array_error(path) from None
        if formats and first and "\t" in line and not line.lstrip().startswith("{"):  # not "write JSON objects"
            raise InputFileError(path, number, "the line holds tabs and no JSON object, as a TSV line does, and the "
                                 "file is read as JSONL (by its .jsonl or .json name, or --format jsonl)",
                                 "if it is TSV, pass --format tsv or name the file .tsv") from None
        where = error.msg.removesuffix(" at")  # Python's "Invalid control character at" read "… at at column 21"
        raise InputFileError(path, number, f"malformed JSON ({where} at column {error.colno})", hint) from None
    except (RecursionError, ValueError) as error:  # deep nesting, or an integer past Python's digit limit
        raise InputFileError(path, number, json_limit_problem(error), "flatten the record, and write long numbers "
                             "as JSON strings") from None
    if first and isinstance(record, list) and record and all(isinstance(item, dict) for item in record):
        raise json_array_error(path, len(record))
    if not isinstance(record, dict):
        raise InputFileError(path, number, f"line is not a JSON object (it holds {json_kind(record)})", hint)
    if len(record) != len(_PARSER.pairs):  # fewer keys than pairs: one was given twice, and the pairs say which
        key, count = repeated_key(_PARSER.pairs)
        raise InputFileError(path, number, f"the key {key!r} is given {count} times",
                             "give each key once; a parser would keep one of the values and drop the others")
    return record


def json_object_lines(path: Path, formats: bool = False) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSONL file (``parse_json_object``, ``formats`` passed on); its
    first non-blank line, however many blank ones come before it, is the one a JSON file's shape is told by."""
    for position, (number, line) in enumerate(decoded_lines(path)):
        yield number, parse_json_object(line, path, number, position == 0, formats)


def missing_field(fields: Fields, present: Collection[str]) -> tuple[str, str] | None:
    """("id" or "text", its key) of the first of the two fields a record's keys or a table's columns lack, or None."""
    return next(((name, key) for name, key in (("id", fields.id), ("text", fields.text)) if key not in present), None)


def listed_names(names: Collection[str]) -> str:
    """The keys or columns a record or table holds instead, sorted, ten at most: a wide table's were all named."""
    shown = sorted(names)
    return ", ".join(shown[:10]) + (", ..." if len(shown) > 10 else "") or "none"


def _titled_without_text(record: dict, fields: Fields) -> bool:
    """A record with a title and no text key, which BEIR's loader keeps (its text empty): a page whose body is
    empty, searched and encoded by its title."""
    title = record.get(fields.title) if fields.reads_title else None
    return fields.text not in record and isinstance(title, str) and not is_blank(title)


def _no_text_key(path: Path, number: int, fields: Fields, keys: Collection[str], where: str) -> MissingFieldError:
    """A file none of whose first records has the text key, only titles: the text lives under another key, or it
    is a collection of titles alone."""
    return MissingFieldError(path, number, f"no text field {fields.text!r} in {where} (the first one's keys: "
                             f"{listed_names(keys)})", "pass --text-field if the text lives under another key, or "
                             f"--text-field {fields.title} for a collection of titles alone")


def jsonl_records(path: Path, fields: Fields) -> Iterator[tuple[int, str, str, str, dict]]:
    """(line, id, text, title, the record) per JSON object line; a titled record may lack the text key (its text
    is then empty), if one of the first ``TITLE_WINDOW`` records has it."""
    if long_json_array(path):  # before the line reader holds a gigabyte line
        raise json_array_error(path, one_line=True)
    titled, texted, first_keys, number = not fields.title_named, False, (), 0
    for position, (number, record) in enumerate(json_object_lines(path, formats=True)):
        missing = None if fields.id in record and fields.text in record else missing_field(fields, record)
        if missing == ("text", fields.text) and _titled_without_text(record, fields):
            missing = None
        if missing is not None and is_id_mapping(record, position == 0, fields.id, fields.text):
            records = not isinstance(next(iter(record.values())), str)  # {id: {"title", "text"}}, not {id: text}
            raise id_mapping_error(path, fields.id, fields.text, records=records)
        if missing and missing[0] == "id" and position == 0 and judgments_kind(record):  # not "pass --id-field"
            raise InputFileError(path, number, f"the line reads as {judgments_kind(record)}, not a record",
                                 JUDGMENTS_HINT)
        if missing is not None:  # its keys tell the flag's value (a Pyserini corpus: id, contents)
            name, field = missing
            raise MissingFieldError(path, number, f"missing {name} field {field!r} (its keys: {listed_names(record)})",
                                    f"pass --{name}-field if the {name} lives under another key")
        doc_id = as_id(record[fields.id], path, number, fields.id)
        text = as_text(record.get(fields.text), path, number, fields.text)
        title = as_text(record.get(fields.title), path, number, fields.title) if fields.reads_title else ""
        titled, texted = titled or fields.title in record, texted or fields.text in record
        first_keys = first_keys or tuple(record)
        if not titled and position + 1 == TITLE_WINDOW:
            raise InputFileError(path, number, f"no title field {fields.title!r} in the first {TITLE_WINDOW:,} "
                                 "records", f"{TITLE_HINT} (if titles begin later, give the key, null, in an "
                                 "earlier record)")
        if not texted and position + 1 == TITLE_WINDOW:
            raise _no_text_key(path, number, fields, first_keys, f"the first {TITLE_WINDOW:,} records")
        yield number, doc_id, text, title, record
    if not titled and number:
        raise InputFileError(path, None, f"no title field {fields.title!r} in any record", TITLE_HINT)
    if not texted and number:
        raise _no_text_key(path, None, fields, first_keys, "any record")
