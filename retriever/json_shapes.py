"""JSON files of another shape than the one a reader takes, named with how to convert them: a message that only said
which key was missing sent the user to a flag that could not help."""
from __future__ import annotations

import json
import re
from pathlib import Path

from retriever.errors import InputFileError


def id_mapping_error(path: Path, id_key: str = "_id", text_key: str = "text", spread: bool = False,
                     records: bool = False) -> InputFileError:
    """A file holding one JSON object of id to text (BEIR's queries dict saved with ``json.dump``), with the command
    that writes it as JSONL: it was told to pass --id-field, or was malformed JSON at column 2. ``spread``: the
    object is indented over several lines, so only its first line, ``{``, was seen. ``records``: it maps ids to
    records (BEIR's corpus dict, ``{id: {"title", "text"}}``)."""
    if records:
        convert = ("python -c \"import json, sys; [print(json.dumps({'%s': i, **r})) for i, r in "
                   "json.load(open(sys.argv[1])).items()]\" FILE > corpus.jsonl" % id_key)
        return InputFileError(path, None, f"the file is one JSON object mapping ids to records ({{id: {{\"title\": "
                              f"..., \"{text_key}\": ...}}, ...}}, as BEIR's loader keeps a corpus)", f"write one "
                              f"{{\"{id_key}\": ..., \"{text_key}\": ...}} object per line, e.g. {convert}")
    convert = ("python -c \"import json, sys; [print(json.dumps({'%s': i, '%s': t})) for i, t in "
               "json.load(open(sys.argv[1])).items()]\" FILE > queries.jsonl" % (id_key, text_key))
    if spread:
        problem, condition = "the file is one JSON object over several lines, not JSONL (one object per line)", "if "
    else:
        problem, condition = "the file is one JSON object mapping ids to texts", ""
    mapping = "{id: text, ...}, as BEIR's loader keeps queries"
    return InputFileError(path, None, problem if spread else f"{problem} ({mapping})",
                          f"{condition and f'if it maps ids to texts ({mapping}), '}write one "
                          f"{{\"{id_key}\": ..., \"{text_key}\": ...}} object per line, e.g. {convert}")


def json_array_error(path: Path, records: int | None = None, one_line: bool = False) -> InputFileError:
    """A file holding one JSON array of records (``json.dump(records, f)``, indented or not) where JSONL is read, with
    the command that writes it one record a line: line 1 was "not a JSON object (it holds an array)", or malformed JSON
    at column 2 when indented. ``records``: how many, when the whole array was on line 1 and parsed; ``one_line``:
    it is on line 1, told from its first bytes (``file_kinds.long_json_array``), not parsed."""
    shape = f"of {records} records" if records is not None else "on one line" if one_line else "over several lines"
    convert = ("python -c \"import json, sys; [print(json.dumps(r)) for r in json.load(open(sys.argv[1]))]\" "
               "FILE > FILE.jsonl")
    return InputFileError(path, None, f"the file is one JSON array {shape}, not JSONL (one object per line)",
                          f"write one record per line, e.g. {convert}")


_OPENS = re.compile(r"\s*[\[{]")
# A first token that is a query id opening with a bracket ('[q1]', '{q1}'): more than the bracket, and no quote,
# colon, comma or bracket after it, which a JSON line's first token holds ('{"q1":', "{'q1':", '[{', '[1,', '{').
_BRACKETED_ID = re.compile(r"\s*[\[{][^\s\"':,\[{]+(?:\s|$)")


def opens_json(first_line: str) -> bool:
    """Whether a run or qrels file whose first non-blank line is ``first_line`` is JSON: it opens with { or [ and its
    first token is no id in brackets (``_BRACKETED_ID``), or the line parses as JSON all the same ('[1 , 2]'). trec_eval
    reads an id as any token, so '[q1] Q0 d1 1 0.5 t' or '{q1} 0 d1 1' is TREC, and a wrong such line gets the TREC
    reader's column or grade message; a Python dict ({'q1': ...}) goes to the JSON reader, to be named invalid JSON.
    Told from the first token, not the line's columns: a run saved on one line is the whole file, and JSON whose
    first line split as TREC columns ('{"q1": {"d1": 1' over lines) was read as TREC."""
    if _OPENS.match(first_line) is None:
        return False
    if _BRACKETED_ID.match(first_line) is None:
        return True
    try:
        json.loads(first_line)  # fails at the id's first character for a TREC line
    except (ValueError, RecursionError):
        return False
    return True


def array_file_error(path: Path, first_line: str) -> InputFileError:
    """``json_array_error`` for a run or qrels file whose first non-blank line opens a JSON array, the one test of
    where it lies: on that line when the line closes it (ends with ``]``), else over several lines (``[`` alone, as
    indented, or ``[{...},``, a record a line), which qrels had called "on one line"."""
    return json_array_error(path, one_line=first_line.rstrip().endswith("]"))


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false"}


def json_kind(value: object) -> str:
    """What a JSON value is, for a message: "an array", "a string", ..."""
    return _JSON_KINDS.get(type(value), "an object" if isinstance(value, dict) else "null")


# Keys of one record in the formats users bring (BEIR, Pyserini, MS MARCO exports, ir_datasets), never ids of a map
RECORD_KEYS = frozenset({"_id", "id", "docid", "doc_id", "qid", "query_id", "text", "title", "contents", "body",
                         "query", "question", "passage"})


def is_id_mapping(record: dict, first: bool, id_key: str, text_key: str) -> bool:
    """Whether a first (non-blank) JSONL line lacking the id and text keys is rather one object of id to text, or to
    records holding ``text_key``; a record keyed as another tool keys its records (Pyserini's ``id``/``contents``)
    is one, not a map of its ids."""
    values = record.values()
    return (first and bool(record) and id_key not in record and text_key not in record and not RECORD_KEYS & set(record)
            and (all(isinstance(value, str) for value in values)
                 or all(isinstance(value, dict) and text_key in value for value in values)))


# BEIR's qrels columns (its TSV header), which MTEB's copies of BEIR collections on the hub write as one JSON judgment a
# line, qrels/SPLIT.jsonl: a grade under "score", so no run's hit
BEIR_JUDGMENT_KEYS = ("query-id", "corpus-id", "score")


def is_beir_judgment(record: object) -> bool:
    """Whether a JSON line is one judgment under ``BEIR_JUDGMENT_KEYS``."""
    return isinstance(record, dict) and set(BEIR_JUDGMENT_KEYS) <= set(record)


JUDGMENTS_HINT = ("qrels are read by evaluate --qrels, and a run by evaluate --run; give here the queries or corpus "
                  "(id<TAB>text lines, or a BEIR folder's queries.jsonl or corpus.jsonl)")


def _scores(value: object) -> bool:
    """Whether a JSON value is one query's {document id: grade or score}."""
    return isinstance(value, dict) and bool(value) and all(
        isinstance(score, (int, float)) and not isinstance(score, bool) for score in value.values())


def judgments_kind(record: dict) -> str | None:
    """What a first JSON line lacking a record's id or text key is when it is a run's or qrels' line (given as queries
    or a corpus, it was told to pass --id-field), else None."""
    keys, documents = set(record), {"doc_id", "docid"} & set(record)
    if "qid" in keys and isinstance(record.get("hits"), list):
        return "a JSONL run's line (a query's hits)"
    if (documents and "relevance" in keys) or is_beir_judgment(record):
        return "a judgment (qrels)"
    if documents and "score" in keys:
        return "a run's hit"
    if record and all(map(_scores, record.values())):
        return "JSON qrels or a run ({query id: {document id: grade or score}})"
    return None


TEXT_KEYS = ("text", "title", "contents", "body", "query", "question", "passage")  # what a record's text is under


def record_error(path: Path, record: object, what: str) -> InputFileError | None:
    """A corpus or queries record (a text under one of ``TEXT_KEYS``) as the first line of a run or qrels file, named:
    queries.jsonl given as --qrels was told "the judgments of query '_id' are a string". ``what``: what was read."""
    if (not isinstance(record, dict) or {"hits", "relevance", "score"} & set(record)
            or not any(isinstance(record.get(key), str) for key in TEXT_KEYS)):
        return None
    return InputFileError(path, None, f"its first line is a corpus or queries record, not {what}", "a queries file "
                          "goes to search --queries, a corpus to encode or build")
