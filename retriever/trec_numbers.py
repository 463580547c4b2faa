"""Numbers as trec_eval reads them in runs and qrels: scores as C's atof reads them, grades as atol reads them and a
C int keeps them. The run and qrels readers and library qrels (``evaluate_run``) check them here, so a number is
taken or refused alike wherever it comes from.
"""
from __future__ import annotations

import json
import math
import numbers
import re
from pathlib import Path

from retriever.errors import InputFileError, RetrieverError

# Plain ASCII decimal numbers, as C's atof reads them (trec_eval parses runs and qrels with atof/atol); Python's
# float() would also take "1_0" (ten) and other scripts' digits, which no other evaluator reads alike.
DECIMAL_NUMBER = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)",
                            re.IGNORECASE)
_INTEGER = re.compile(r"[+-]?[0-9]+")
GRADE_RANGE = (-2**31, 2**31 - 1)  # trec_eval keeps a grade in a C int


def _leading_integer(text: str) -> int | None:
    """What C's atol reads of a grade: its leading sign and digits (0 without any); None past 18 digits, far beyond a C
    int: int() of one over 4,300 digits was a ValueError traceback naming sys.set_int_max_str_digits."""
    match = _INTEGER.match(text)
    if match is None:
        return 0
    digits = match.group().lstrip("+-").lstrip("0") or "0"
    return None if len(digits) > 18 else int(digits) * (-1 if match.group().startswith("-") else 1)


def parse_relevance(path: Path, lineno: int, text: str, first: bool = False) -> int:
    """A grade: a plain integer, or an integral decimal ("1.0", from tools that write floats), within a C int."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    as_atol = _leading_integer(text)  # 1 of "1e1", 10 of "10e-1", 0 of ".3e1"
    if _INTEGER.fullmatch(text):
        grade = as_atol
    elif DECIMAL_NUMBER.fullmatch(text) and float(text).is_integer():
        grade = int(float(text))
    else:
        hint = "write grades as plain integers such as 0, 1, 2"
        if first:
            hint += "; a header line names its grade column, e.g. 'score' or 'rel'"
        raise InputFileError(path, lineno, f"relevance {shown!r} is not an integer", hint)
    if grade is None or not GRADE_RANGE[0] <= grade <= GRADE_RANGE[1]:
        raise InputFileError(path, lineno, f"relevance {shown!r} is beyond a 32-bit integer",
                             "trec_eval keeps grades in a C int; write grades such as 0, 1, 2")
    if as_atol != grade:  # '1e1' is 10, but trec_eval reads 1; '10e-1' is 1, but it reads 10
        read = as_atol if as_atol is not None else "a number beyond a C int"
        raise InputFileError(path, lineno, f"relevance {shown!r} is {grade}, but trec_eval reads it as {read} "
                             "(C's atol: the digits before the first other character)",
                             f"write it as {grade}, a plain integer, so every evaluator reads the same grade")
    return grade


def checked_grade(value: object, doc: object, qid: object, path: Path | None = None, lineno: int | None = None) -> int:
    """A grade as trec_eval keeps it, a C int: an integer, numpy's too, or an integral float (1.0, from pandas or a
    JSON file). Text was a TypeError traceback, and 0.5 gave gain to a document counted non-relevant. ``path``: the
    JSON qrels file it is read from (at ``lineno``), whose values the message shows as JSON writes them; else library
    qrels."""
    integral = not isinstance(value, bool) and (isinstance(value, numbers.Integral) or (
        isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer()))
    if integral and GRADE_RANGE[0] <= int(value) <= GRADE_RANGE[1]:  # 10**400 was an OverflowError in the nDCG gain
        return int(value)
    bits = int(value).bit_length() if integral else 0  # str() of one past Python's digit limit raises
    shown = (json.dumps(value) if path is not None else repr(value) if not integral
             else str(int(value)) if bits < 10_000 else f"a number of {bits} bits")
    what = f"the grade of document {doc!r} for query {qid!r} is {shown[:40]}"
    if integral:
        problem, hint = (f"{what}, beyond a 32-bit integer",
                         "trec_eval keeps grades in a C int; write grades such as 0, 1, 2")
    else:
        problem, hint = (f"{what}, not an integer", "write grades as integers such as 0, 1, 2, as trec_eval reads them "
                         "(0 judged non-relevant, 1 or more relevant)")
    if path is not None:
        raise InputFileError(path, lineno, problem, hint)
    raise RetrieverError(f"{problem}; {hint}")
