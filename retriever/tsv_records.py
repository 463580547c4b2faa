"""TSV corpus and queries lines: columns placed by position (id, text[, title]) or named by a header, in any order.

``retriever.corpus`` streams whole files through these; every problem is ``file:line: what is wrong; what to do``.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from retriever.corpus_records import Fields
from retriever.errors import InputFileError
from retriever.files import carriage_return_error, decoded_lines
from retriever.json_shapes import JUDGMENTS_HINT
from retriever.texts import trimmed_id

TSV_ID_NAMES = ("id", "_id", "docid", "doc_id", "pid", "qid", "query_id", "query-id")
TSV_TEXT_NAMES = ("text", "passage", "contents", "query")
_TSV_FIELDS = {**{name: "id" for name in TSV_ID_NAMES}, **{name: "text" for name in TSV_TEXT_NAMES}, "title": "title"}
_TSV_POSITIONS = {"id": 0, "text": 1, "title": 2}  # a file without a header
_FROM_CSV = ("python -c \"import csv, json, sys; [print(json.dumps(r)) for r in "
             "csv.DictReader(open(sys.argv[1], newline=''))]\"")
CSV_HINT = (f"convert a CSV file to JSONL, keyed by its header, e.g. {_FROM_CSV} FILE > FILE.jsonl, and pass "
            "--id-field/--text-field as its header names them")
_TSV_HEADER_HINT = (f"name the columns id ({', '.join(TSV_ID_NAMES[1:])}), text ({', '.join(TSV_TEXT_NAMES[1:])}) "
                    "and optionally title, in any order, or drop the header and write id, text[, title]")


def judgments_error(path: Path, number: int, columns: list[str]) -> InputFileError | None:
    """A line of qrels or of a TREC run read as a corpus or queries record, named with the flag that takes it: a
    qrels file given as --queries was told it had too many columns, an unknown header column, or a title (its
    grade). Space-separated lines count only with TREC's ``0`` or ``Q0`` column, as words of a query are spaced."""
    cells = [cell.strip() for cell in columns] if len(columns) > 1 else columns[0].split()
    graded = bool(cells) and cells[-1].isascii() and cells[-1].lstrip("-").isdigit()
    if "corpus-id" in (cell.lower() for cell in cells):
        kind = "BEIR qrels' header (query-id, corpus-id, score)"
    elif len(cells) == 6 and cells[1].upper() == "Q0":
        kind = "a TREC run (qid Q0 docid rank score tag)"
    elif len(cells) == 4 and graded and (cells[1] == "0" or len(columns) == 4 and cells[1].isdigit()):
        kind = "TREC qrels (query id, iteration, document id, grade)"
    elif len(columns) == 3 and graded and not any(" " in cell for cell in cells):
        kind = "BEIR qrels (query id, document id, grade)"
    else:
        return None
    return InputFileError(path, number, f"the line reads as {kind}, not a record", JUDGMENTS_HINT)


def check_tsv_fields(path: Path, fields: Fields) -> None:
    """Refuse field flags on a TSV file: its columns are placed, or named by its header, so the flags were ignored
    (the first column read as the id whatever --id-field said)."""
    named = [f"--{name}-field {getattr(fields, name)}" for name in ("id", "text", "title")
             if getattr(fields, name) != getattr(Fields(), name)]
    if named:
        raise InputFileError(path, None, f"the field flags ({', '.join(named)}) name JSONL keys or Parquet columns, "
                             "and a TSV file's columns are id, text[, title] in that order or named by its header "
                             "(id, text, title)", "drop the flags, or rename the header's columns")


def tsv_records(path: Path) -> Iterator[tuple[int, str, str, str, dict]]:
    """(line, id, text, title, {}) per line. Columns are found by a header's names when the first line is one
    (in any order), else by position: id, text[, title]."""
    layout: dict[str, int] | None = None
    header: tuple[int, str] | None = None
    for number, line in decoded_lines(path):
        if "\r" in line:
            raise carriage_return_error(path, number)
        columns = line.split("\t")
        if layout is None:
            layout = _tsv_header(columns, path, number)
            if layout is not None:
                header = (number, line)
                continue
            layout = _TSV_POSITIONS
            if len(columns) == 3 and (judged := judgments_error(path, number, columns)):  # id, document id, grade
                raise judged  # as a corpus it was read as documents 'd1' titled '1', refused only by a repeated id
        elif header is not None and line == header[1]:  # read as a record 'id', whose text was 'text'
            raise InputFileError(path, number, f"the line repeats the header of line {header[0]} (files joined "
                                               "with their headers?)", "remove it, or join them without their "
                                               "headers (tail -n +2 FILE)")
        yield (number, *_tsv_fields(columns, layout, path, number), {})


def _tsv_header(columns: list[str], path: Path, number: int) -> dict[str, int] | None:
    """Where each field sits when ``columns`` (the first line) is a header: its first column names an id, or two
    of its columns name fields. A header naming a column this reader does not know, or lacking the id or the
    text, is refused: reading such a file by position could swap title and text without a word."""
    names = [column.strip().lower() for column in columns]
    if names[0] not in TSV_ID_NAMES and sum(name in _TSV_FIELDS for name in names) < 2:
        return None
    layout: dict[str, int] = {}
    for position, name in enumerate(names):
        field = _TSV_FIELDS.get(name)
        if field is None or field in layout:
            what = "is not a column this reader knows" if field is None else f"is a second {field} column"
            raise judgments_error(path, number, columns) or InputFileError(
                path, number, f"header column {position + 1} {columns[position][:40]!r} {what}", _TSV_HEADER_HINT)
        layout[field] = position
    for field in ("id", "text"):
        if field not in layout:
            raise InputFileError(path, number, f"header names no {field} column", _TSV_HEADER_HINT)
    return layout


def _tsv_fields(columns: list[str], layout: dict[str, int], path: Path, number: int) -> tuple[str, str, str]:
    """(id, text, title) of one line; a title in the last column may be left off."""
    width = len(layout)
    title_last = layout.get("title") == width - 1
    if len(columns) == 1 and columns[0].lstrip().startswith("<"):  # "add tabs" would be no help to SGML
        raise InputFileError(path, number, f"the line is an SGML/XML tag ({columns[0].strip()[:20]!r}), as in TREC "
                             "topics and document files, which no reader here parses", 'write each record as JSONL '
                             '{"_id": ..., "text": ...} (a topic\'s title as its text) or as TSV id<TAB>text')
    if len(columns) == 1 and columns[0].lstrip().startswith(("{", "[")):  # nor would adding tabs help JSON
        raise InputFileError(path, number, "the line is JSON, and the file is read as TSV (by its .tsv, .txt or .tab "
                             "name, or --format tsv)", "pass --format jsonl, or name the file .jsonl")
    if len(columns) == 1 and "," in columns[0]:  # "add tabs" would break texts holding commas or quotes
        raise InputFileError(path, number, "the line holds commas and no tab, as a CSV line does, and TSV columns are "
                             "tab-separated", CSV_HINT)
    if len(columns) != width and not (title_last and len(columns) == width - 1):
        order = sorted(layout, key=layout.__getitem__)
        shown = ", ".join(order[:-1]) + "[, title]" if title_last else ", ".join(order)
        expected = f"{width - 1} or {width}" if title_last else str(width)
        raise judgments_error(path, number, columns) or InputFileError(
            path, number, f"expected {expected} tab-separated columns ({shown}), found {len(columns)}",
            "tabs inside text must be replaced by spaces" if len(columns) > width else
            "separate the columns with one tab")
    title = columns[layout["title"]] if layout.get("title", width) < len(columns) else ""
    return trimmed_id(columns[layout["id"]]), columns[layout["text"]], title
