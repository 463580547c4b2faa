"""Reading and checking what a client sends, before any of it reaches a batch; the limits on what it may ask for.

Everything here raises ``ApiError`` with the status and message the client gets. The limits
(``Limits``; each has a ``retriever serve`` flag) and why they exist:

- ``max_body_bytes``: a POST body is read up to this size, else 413.
- ``max_queries``, ``max_query_chars``: the encoding work one request may ask for, else 400.
- ``max_hits``: queries x k per request. Every hit carries its document's title and text, so a
  small request for 256 x 1000 hits would make a response hundreds of megabytes long; over the
  cap is a 400 before any work is done.
- ``max_response_bytes``: the JSON a request may get back, checked while it is written (see
  ``output``), so documents longer than expected cannot blow the first cap up; over it is a 400.
- A POST body's JSON: its media type, charset, codings, nesting and numbers (``json_body``).
- GET parameters are read strictly (``check_query_string``): a % not followed by two hex digits, bytes that are not
  UTF-8 once %-decoded, a parameter given twice, a parameter GET does not take, or a k that is not plain
  digits are a 400, where the framework would search for U+FFFD, take the last value, drop
  ``K=1`` or ``fusion=convex`` unread (POST refuses extra fields too), or read ``k=1_0`` as 10. A POST
  with parameters in its address (``POST /search?k=1``) is a 400 naming them: they were dropped unread; so
  are parameters given to GET /info or /indexes, which take none. GET /health lets any be (a liveness check must not
  fail on a checker's cache-buster), as the search page and the API docs (/ /docs /redoc /openapi.json) do.
- Queries the tokenizer cannot take (lone surrogates, which JSON's ``\\ud800`` escapes allow) are
  a 400 here rather than an exception inside a batch shared with other clients.
"""
from __future__ import annotations

import re
from collections import Counter
from urllib.parse import parse_qsl
from dataclasses import dataclass

from retriever.choices import MAX_BODY_BYTES, MAX_QUERIES, MAX_QUERY_CHARS
from retriever.errors import RetrieverError
from retriever.serving.problems import MAX_PROBLEMS, clipped, where_it_goes
from retriever.serving.schemas import DEFAULT_K
from retriever.texts import is_blank, text_problem
from retriever.wording import counted

GET_PARAMETERS = ("q", "k", "mode")  # GET /search's; the index is in the path (/indexes/NAME/search)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})[^&]{0,2}")


@dataclass(frozen=True)
class Limits:
    """Request limits, so one client cannot make the server encode megabytes of text."""

    max_query_chars: int = MAX_QUERY_CHARS
    max_body_bytes: int = MAX_BODY_BYTES
    max_queries: int = MAX_QUERIES
    max_hits: int = MAX_QUERIES * DEFAULT_K  # so the most queries a request may send fit without a k
    max_response_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_hits < DEFAULT_K:  # else a request without k would be refused whatever it asks
            raise RetrieverError(f"--max-hits is {self.max_hits}; it must be at least {DEFAULT_K}, the k of a "
                                 "request that gives none")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def check_query(text: str, limits: Limits) -> str:
    if is_blank(text):
        raise ApiError(400, "the query is empty (nothing but whitespace or invisible characters)")
    if len(text) > limits.max_query_chars:
        raise ApiError(400, f"the query is {len(text)} characters; the limit is {limits.max_query_chars}")
    problem = text_problem(text)
    if problem is not None:
        raise ApiError(400, f"the query has {problem}, which is not valid Unicode text; "
                            "remove it or replace it with U+FFFD")
    return text


def check_query_string(raw: bytes, path: str = "/search") -> None:
    """Refuse what the framework would otherwise guess at in a GET query string to ``path`` (module docstring)."""
    text = raw.decode("latin-1")
    bad = _BAD_ESCAPE.search(text)
    if bad:  # parse_qsl keeps it as it is: q=%zz searched for "%zz"
        raise ApiError(400, f"the query string holds {bad.group()!r}, which is not a percent-escape (% and two hex "
                            "digits); write a literal % as %25")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise ApiError(400, "the query string is not UTF-8 once %-decoded; percent-encode the query's "
                            "UTF-8 bytes") from None
    counts = Counter(name for name, _ in pairs)
    for name, count in counts.items():
        if count > 1:
            raise ApiError(400, f"the parameter {clipped(name)!r} is given {count} times; give it once")
        if name not in GET_PARAMETERS:
            raise ApiError(400, f"unknown parameter {clipped(name)!r}; GET {clipped(path)} takes only "
                                f"{', '.join(GET_PARAMETERS)}{where_it_goes(name)}")


def check_k_digits(raw: bytes) -> None:
    """After the framework read k as an integer: one it took that is not plain digits (``k=1_0``, ``k=+5``)."""
    k = dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True)).get("k")
    if k is not None and not re.fullmatch(r"[0-9]+", k):
        raise ApiError(400, f"k must be a whole number written in digits, not {clipped(k)!r}")


def check_post_query_string(raw: bytes) -> None:
    """POST reads its parameters from the body alone; ones in the address (``POST /search?k=1``) were dropped
    unread, and the default k or mode answered."""
    names = _parameter_names(raw)
    if names:
        raise ApiError(400, f"POST takes its parameters in the JSON body, not in the address: move {names} into the "
                            "body (queries, k, mode)")


def check_no_parameters(path: str, raw: bytes) -> None:
    """GET /info and /indexes take no parameters; ones given were dropped unread (``/info?index=b``, the
    page's own form, answered the default index's manifest)."""
    names = _parameter_names(raw)
    if names:
        raise ApiError(400, f"GET {path} takes no parameters, and was given {names}; another index's manifest is at "
                            "/indexes/NAME/info, its search at /indexes/NAME/search")


def _parameter_names(raw: bytes) -> str:
    """The names in a query string, each once, quoted (the first ``MAX_PROBLEMS``); empty if it has none."""
    names = dict.fromkeys(name for name, _ in parse_qsl(raw.decode("latin-1"), keep_blank_values=True))
    return ", ".join(repr(clipped(name)) for name in list(names)[:MAX_PROBLEMS])


def check_hits(queries: int, k: int, limits: Limits) -> None:
    if queries * k > limits.max_hits:
        raise ApiError(400, f"{counted(queries, 'query')} x k={k} asks for {queries * k} hits; the limit is "
                            f"{limits.max_hits} per request: send fewer queries or a smaller k")
