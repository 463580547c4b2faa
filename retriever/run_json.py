"""Runs in JSON: JSONL (one ``{"qid", "hits"}`` object per query, as ``retriever search --run-format jsonl`` writes),
or one JSON object mapping query ids to ``{document id: score}``, as BEIR's ``EvaluateRetrieval`` returns a run and
ranx and pytrec_eval take one, saved with ``json.dump`` (or one such object per line), or a flat run of one
``{"query_id", "doc_id", "score"}`` (or qid/docid) hit per line. ``read_json_run`` tells them apart."""
from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

from retriever.errors import InputFileError
from retriever.files import RepeatedKeyError, json_limit_problem, mid_file_bom_error, unique_keys
from retriever.json_shapes import array_file_error, is_beir_judgment, json_kind, record_error
from retriever.texts import id_problem, trimmed_id

SWAPPED_HINT = "if the run and qrels files are swapped (--run, --qrels), give each the other"
_MAPPING_HINT = "a JSON run maps each query id to an object of document id to score, {\"q1\": {\"d1\": 0.5}}"
# What to do about a value past Python's JSON reader (``files.json_limit_problem``): a run's or qrels' values are
# numbers and ids, nested two or three deep.
_LIMIT_HINT = ("a run or qrels file nests ids and numbers two or three levels deep: flatten it, and write a long "
               "number in exponent form (1e300)")


def json_id(value: object, path: Path, lineno: int | None, what: str) -> str:
    """A JSON id (run or qrels) as a string: a string (``trimmed_id``, as the corpus readers take it) or an integer,
    never a float, list or object turned into text."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputFileError(path, lineno, f"{what} {json.dumps(value)[:40]} is not a string",
                             "write ids as JSON strings")
    text = trimmed_id(value) if isinstance(value, str) else str(value)
    problem = id_problem(text)
    if problem is not None:
        raise InputFileError(path, lineno, f"bad {what}: {problem}", "ids must be one non-empty token")
    return text


def float_or_infinity(value: object) -> float:
    """A number as a float; an integer beyond float range is +-inf, as C's atof reads "1e400" (float() raises)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _jsonl_score(value: object, path: Path, lineno: int | None, what: str, shape_hint: str) -> float:
    """A JSON score as a float; an integer beyond float range is +-inf, as the TREC reader (and C's atof) read
    "1e400", rather than an OverflowError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputFileError(path, lineno, f"{what} {json.dumps(value)[:40]} is not a number", shape_hint)
    score = float_or_infinity(value)
    if math.isnan(score):
        raise InputFileError(path, lineno, f"{what} is NaN", "fix the system that produced this run")
    return score


def json_line(path: Path, lineno: int, text: str, shape_hint: str) -> object:
    """A run line's JSON; a key given twice in any object (``"id"`` or ``"score"`` of a hit, ``"qid"``) is refused,
    since ``json.loads`` keeps the last value silently and the hit would be scored as another document."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except RepeatedKeyError as error:
        raise InputFileError(path, lineno, str(error),
                             "give each key once; a parser would keep one of the values and drop the others") from None
    except json.JSONDecodeError as e:
        if text.startswith("\ufeff"):  # json said "Unexpected UTF-8 BOM (decode using utf-8-sig)", naming no cause
            raise mid_file_bom_error(path, lineno) from None
        raise InputFileError(path, lineno, f"invalid JSON ({e.msg})", shape_hint) from None
    except (RecursionError, ValueError) as error:  # deep nesting, or an integer past Python's digit limit
        raise InputFileError(path, lineno, json_limit_problem(error), _LIMIT_HINT) from None


UNPARSED = object()  # a first line its reader parses itself (``first_line_json``)


def first_line_json(text: str) -> tuple[object, object]:
    """A run's first line parsed once, for telling its kind and for its reader: (its JSON, None if it is none; the same
    for the reader, or ``UNPARSED`` when the reader must parse it again to name its fault). A key given twice is
    refused by the reader (``json_line``), so the kind is then told from ``json.loads``' value, which keeps the last."""
    for hook in (unique_keys, None):
        try:
            record = json.loads(text, object_pairs_hook=hook)
            return record, record if hook else UNPARSED
        except RepeatedKeyError:
            continue
        except (json.JSONDecodeError, RecursionError, ValueError):  # the reader it goes to names the line's fault
            break
    return None, UNPARSED


def json_records(path: Path, lines: Iterable[tuple[int, str]], hint: str,
                 first_json: object = UNPARSED) -> Iterator[tuple[int, object]]:
    """(line number, JSON) of each line (``json_line``), the first taken as ``first_json`` when it was parsed already
    (``first_line_json``): for a run dumped on one line that is the whole run, which was parsed twice."""
    for lineno, text in lines:
        if first_json is UNPARSED:
            yield lineno, json_line(path, lineno, text, hint)
        else:
            parsed, first_json = first_json, UNPARSED
            yield lineno, parsed


def jsonl_run_lines(path: Path, lines: Iterable[tuple[int, str]],
                    first_json: object = UNPARSED) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    first_line: dict[str, int] = {}
    shape_hint = 'each line must be {"qid": ..., "hits": [{"id": ..., "score": ...}, ...]}'
    for lineno, record in json_records(path, lines, shape_hint, first_json):
        if isinstance(record, list):
            raise InputFileError(path, lineno, "a JSON array, not an object", "a JSONL run holds one object per "
                                 'line, {"qid": ..., "hits": [{"id": ..., "score": ...}, ...]}; write each query so')
        if not isinstance(record, dict) or "qid" not in record or not isinstance(record.get("hits"), list):
            raise InputFileError(path, lineno, "missing 'qid' or 'hits' list", shape_hint)
        qid = json_id(record["qid"], path, lineno, "qid")
        if qid in first_line:
            raise InputFileError(path, lineno, f"query {qid!r} already appeared on line {first_line[qid]}",
                                 "put all hits of a query on one line")
        first_line[qid] = lineno
        hits: dict[str, float] = {}
        for i, hit in enumerate(record["hits"], start=1):
            if not isinstance(hit, dict) or "id" not in hit or "score" not in hit:
                raise InputFileError(path, lineno, f"hit {i} lacks 'id' or 'score'", shape_hint)
            docid = json_id(hit["id"], path, lineno, f"hit {i} id")
            score = _jsonl_score(hit["score"], path, lineno, f"hit {i} score", shape_hint)
            if docid in hits:
                raise InputFileError(path, lineno, f"document {docid!r} appears twice for query {qid!r}",
                                     "keep one hit per document")
            hits[docid] = score
        run[qid] = hits
    if not run:
        raise InputFileError(path, None, "run file is empty", "check that retrieval produced output")
    return run


def is_run_mapping(first_line: str, record: object) -> bool:
    """Whether a run whose first non-blank line is ``first_line`` (``record`` as JSON, None if it is none) is one
    JSON object of query ids (indented, the line is ``{`` alone, or no whole object, ``{"q1": {"d1": 1},``, as
    ``json_mappings`` tells it; on one line, an object without ``qid`` or ``hits`` whose values are all objects), not
    JSONL. A JSONL line cut short names ``hits``, and stays JSONL for its reader to name the line."""
    if first_line.strip() == "{" or (record is None and first_line.startswith("{") and '"hits"' not in first_line
                                     and not first_line.rstrip().endswith("}")):
        return True
    return (isinstance(record, dict) and bool(record) and not {"qid", "hits"} & set(record)
            and all(isinstance(hits, dict) for hits in record.values()))


def json_mapping(path: Path, lines: Iterable[tuple[int, str]], hint: str) -> dict:
    """The JSON object a whole file holds (a run's or qrels' mapping), keys given twice refused; a parse error names
    its line (blank lines kept in place for the count)."""
    text, at = [], 1
    for lineno, line in lines:
        text.append("\n" * (lineno - at) + line)
        at = lineno
    try:
        value = json.loads("".join(text), object_pairs_hook=unique_keys)
    except RepeatedKeyError as error:
        raise InputFileError(path, None, str(error), "give each key once") from None
    except json.JSONDecodeError as error:
        if error.msg == "Extra data" and error.doc[error.pos] == "{":  # {…}{…}: not one mapping for the file
            raise InputFileError(path, error.lineno, "a second JSON object starts here: the file holds several JSON "
                                 "objects over several lines (pretty-printed JSONL, as jq writes without -c)",
                                 "write one per line (jq -c . FILE)") from None
        raise InputFileError(path, error.lineno, f"invalid JSON ({error.msg})", hint) from None
    except (RecursionError, ValueError) as error:  # a traceback otherwise, as in ``json_line``
        raise InputFileError(path, None, json_limit_problem(error), _LIMIT_HINT) from None
    if not isinstance(value, dict):
        raise InputFileError(path, None, "not a JSON object", hint)
    return value


def json_mappings(path: Path, lines: Iterable[tuple[int, str]], hint: str, what: str = "hits",
                  first_json: object = UNPARSED) -> Iterator[tuple[int | None, str, object]]:
    """(line, query id, its value) of a file of JSON objects keyed by query id, a run's or qrels': one object over the
    file when its first line is no whole object (``{`` alone, as indented, or one ending in ``,``), else one a line (a
    dict per query, dumped line by line, was "invalid JSON (Extra data)"). A query in two of them is refused
    (``what``: what it maps to, for the message); ``first_json``: the first line's JSON if parsed already."""
    lines = iter(lines)
    first = next(lines)
    if not first[1].rstrip().endswith("}"):
        mappings = [(None, json_mapping(path, itertools.chain([first], lines), hint))]
    else:
        mappings = json_records(path, itertools.chain([first], lines), hint, first_json)
    first_line: dict[str, int | None] = {}
    for lineno, mapping in mappings:
        if not isinstance(mapping, dict):
            raise InputFileError(path, lineno, f"{json_kind(mapping)}, not an object", hint)
        for qid, value in mapping.items():
            qid = json_id(qid, path, lineno, "query id")
            if qid in first_line:
                raise InputFileError(path, lineno, f"query {qid!r} already appeared on line {first_line[qid]}",
                                     f"put all {what} of a query in one object")
            first_line[qid] = lineno
            yield lineno, qid, value


def mapping_run(path: Path, lines: Iterable[tuple[int, str]],
                first_json: object = UNPARSED) -> dict[str, dict[str, float]]:
    """A run read from JSON objects of ``{query id: {document id: score}}`` (``json_mappings``), each id and score
    checked as the JSONL reader checks them."""
    run = {qid: _mapping_hits(path, lineno, qid, hits)
           for lineno, qid, hits in json_mappings(path, lines, _MAPPING_HINT, first_json=first_json)}
    if not run:
        raise InputFileError(path, None, "run file is empty", "check that retrieval produced output")
    return run


def _mapping_hits(path: Path, lineno: int | None, qid: str, hits: object) -> dict[str, float]:
    """One query's ``{document id: score}`` of a JSON run mapping, checked."""
    if not isinstance(hits, dict):
        raise InputFileError(path, lineno, f"the hits of query {qid!r} are {json_kind(hits)}, not an object of "
                             "document id to score", _MAPPING_HINT)
    checked = {}
    for key, score in hits.items():
        docid = json_id(key, path, lineno, "document id")
        what = f"the score of document {docid!r} for query {qid!r}"
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise InputFileError(path, lineno, f"{what} is {json.dumps(score)[:40]}, not a number", _MAPPING_HINT)
        if docid in checked:  # keys ' d1' and 'd1': one id once trimmed, and the later score replaced the first
            raise InputFileError(path, lineno, f"document {docid!r} appears twice for query {qid!r}",
                                 "keep one hit per document")
        checked[docid] = _jsonl_score(score, path, lineno, what, _MAPPING_HINT)
    return checked


FLAT_KEYS = (("query_id", "doc_id"), ("qid", "docid"))  # a flat run's (query, document) keys, one hit per line


def flat_keys(record: object) -> tuple[str, str] | None:
    """The (query, document) keys of a flat run, one ``{"query_id", "doc_id", "score"}`` (or qid/docid) hit per
    line, judged from its first line's ``record``; None for another kind."""
    if not isinstance(record, dict) or "hits" in record or "score" not in record:
        return None
    return next((keys for keys in FLAT_KEYS if set(keys) <= set(record)), None)


def flat_lines(path: Path, lines: Iterable[tuple[int, str]], keys: tuple[str, str], value: str, kind: str,
               hint: str, first_json: object = UNPARSED) -> Iterator[tuple[int, str, str, object]]:
    """Each line of a flat run (``value`` "score") or of flat JSON qrels ("relevance") as (line number, query id,
    document id, its value, unchecked), a line lacking one refused naming the ``kind`` of line it is."""
    q, d = keys
    for lineno, record in json_records(path, lines, hint, first_json):
        if not isinstance(record, dict) or not {q, d, value} <= set(record):
            raise InputFileError(path, lineno, f"a {kind} line needs {q!r}, {d!r} and {value!r}", hint)
        yield lineno, json_id(record[q], path, lineno, q), json_id(record[d], path, lineno, d), record[value]


def flat_run_lines(path: Path, lines: Iterable[tuple[int, str]], keys: tuple[str, str],
                   first_json: object = UNPARSED) -> dict[str, dict[str, float]]:
    """A flat run: one hit per line under ``keys``, a query's hits on any lines; other keys (a rank) are ignored,
    as trec_eval ignores the rank column."""
    q, d = keys
    hint = f'each line of a flat run is one hit, {{"{q}": ..., "{d}": ..., "score": ...}}'
    run: dict[str, dict[str, float]] = {}
    for lineno, qid, docid, score in flat_lines(path, lines, keys, "score", "flat run", hint, first_json):
        hits = run.setdefault(qid, {})
        if docid in hits:
            raise InputFileError(path, lineno, f"document {docid!r} appears twice for query {qid!r}",
                                 "keep one hit per document")
        hits[docid] = _jsonl_score(score, path, lineno, "score", hint)
    return run


def read_json_run(path: Path, first_line: str, lines: Iterable[tuple[int, str]]) -> dict[str, dict[str, float]]:
    """A run whose first non-blank line starts with ``{`` or ``[``: flat (``flat_keys``), one JSON mapping
    (``is_run_mapping``), or JSONL of ``{"qid", "hits"}``. The first line is parsed once, for telling the kind and for
    its reader (``first_line_json``): for a run dumped on one line it is the whole run. One JSON array of records is
    named, as JSON qrels' is."""
    if first_line.startswith("["):  # "invalid JSON (Expecting value)" indented; a flat one was told to hold "qid"
        raise array_file_error(path, first_line)
    record, first_json = first_line_json(first_line)
    judgment = isinstance(record, dict) and "relevance" in record and "score" not in record
    if judgment or is_beir_judgment(record):  # "missing 'qid' or 'hits' list"
        raise InputFileError(path, None, "its first line is a judgment ({query, document, grade}), not a run's hits",
                             SWAPPED_HINT)
    found = record_error(path, record, "a run")
    if found is not None:  # "missing 'qid' or 'hits' list"
        raise found
    if record == {}:  # json.dump of a run of no query (a JSONL line lacking both keys when more lines follow)
        lines = iter(lines)
        head = list(itertools.islice(lines, 2))
        if len(head) == 1:  # was "missing 'qid' or 'hits' list", where "{\n}" was "run file is empty"
            raise InputFileError(path, None, "run file is empty (one JSON object of no query, {})",
                                 "check that retrieval produced output")
        lines = itertools.chain(head, lines)
    keys = flat_keys(record)
    if keys is not None:
        return flat_run_lines(path, lines, keys, first_json)
    reader = mapping_run if is_run_mapping(first_line, record) else jsonl_run_lines
    return reader(path, lines, first_json)
