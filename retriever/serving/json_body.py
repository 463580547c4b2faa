"""A POST body read and checked as JSON, before any of it reaches a batch (``inputs`` holds the limits, the other
checks and ``ApiError``, which everything here raises):

- ``MAX_JSON_DEPTH``: nesting of the body, checked before ``json.loads`` recurses (a body of 5,000
  nested lists would otherwise hit Python's recursion limit); not a flag, since a valid body is
  two levels deep.
- A POST body is JSON sent as ``application/json`` or a type with the ``+json`` suffix (``application/vnd.api+json``,
  RFC 6839); another media type is a 415 saying which are taken.
- A POST body with a ``Content-Encoding`` (gzip, br) is a 415: it is not decompressed, and read as JSON it
  was "malformed JSON: 'utf-8' codec can't decode byte 0x8b".
- A POST body declared in a charset other than UTF-8 (``; charset=iso-8859-1``) is a 415: JSON is UTF-8 (RFC
  8259), and the charset went unread, so a latin-1 é was "malformed JSON: can't decode byte 0xe9". A second
  Content-Type line is a 400: it went unread, charset and all.
- A POST body in UTF-16 or UTF-32 (by its byte order mark or the zero bytes its first characters hold) is a 415
  asking for UTF-8, whatever its Content-Type says: ``json.loads`` guessed the encoding and searched. A UTF-8 byte
  order mark is skipped, as RFC 8259 lets a parser do.
- A POST body with a ``Transfer-Encoding`` other than chunked (``gzip, chunked``) is a 501, as HTTP asks of a
  server that does not implement a coding: the parser undoes the chunks and passed the gzip bytes on as the body.
- A JSON object with a key given twice (``{"k": 3, "k": 2}``) is a 400, as a repeated
  GET parameter is; so is an integer of over ``MAX_INT_DIGITS`` digits.
"""
from __future__ import annotations

import json
import re

import numpy as np
from fastapi import Request
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from retriever.files import RepeatedKeyError, unique_keys
from retriever.serving.inputs import ApiError, Limits, check_hits, check_post_query_string, check_query
from retriever.serving.problems import clipped, validation_message
from retriever.serving.schemas import SearchBody

MAX_JSON_DEPTH = 32
MAX_INT_DIGITS = 100  # k is at most 1000; a longer number is a mistake or an attack
UTF_8 = ("utf-8", "utf8", "us-ascii")  # charsets a JSON body may be declared in: UTF-8 and its ASCII subset
# application/json, or a type with RFC 6839's +json suffix (application/vnd.api+json), which was a 415 (RFC 6838 names)
JSON_TYPE = re.compile(r"application/(?:[a-z0-9][a-z0-9!#$&^_.+-]*\+)?json")
# A string literal, or an unterminated one running to the end of the body. Possessive loops and the
# end-of-body branch mean every opening quote matches, so no scan restarts: linear in the body size.
# (The plain '"(?:[^"\\]|\\.)*"' rescans to the end from every quote of an unterminated string,
# and a 24 KB body of \" pairs stalled the event loop for seconds.)
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_OPENERS = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSERS = np.frombuffer(b"]}", dtype=np.uint8)


def json_depth(raw: bytes) -> int:
    """How deeply arrays and objects nest in ``raw``, without recursing (string contents are skipped)."""
    structure = np.frombuffer(_JSON_STRING.sub(b"", raw), dtype=np.uint8)
    steps = np.isin(structure, _OPENERS).astype(np.int32) - np.isin(structure, _CLOSERS)
    return int(np.cumsum(steps).max(initial=0))


async def read_json(request: Request, limits: Limits) -> object:
    """The body parsed as JSON, refusing other media types and bodies over the size limit."""
    types = request.headers.getlist("content-type")
    if len(types) > 1:  # `.get` read the first line alone: a charset or type on a second went unread
        raise ApiError(400, f"the body has {len(types)} Content-Type headers ({', '.join(map(clipped, types))}); "
                            "send one: Content-Type: application/json")
    media_type, *parameters = request.headers.get("content-type", "").lower().split(";")
    if not JSON_TYPE.fullmatch(media_type.strip()):  # curl -d labels its body application/x-www-form-urlencoded
        sent = f"as {clipped(media_type.strip())}" if media_type.strip() else "without a Content-Type"
        raise ApiError(415, f"the body is sent {sent}; send JSON with the header Content-Type: application/json (curl "
                            "-H 'Content-Type: application/json'), or a JSON type of the form application/NAME+json")
    charset = dict(_parameter(p) for p in parameters).get("charset", "utf-8")
    if not charset:  # "charset ;" said nothing
        raise ApiError(415, "the body's Content-Type has an empty charset; the server reads JSON as UTF-8 alone (RFC "
                            "8259): send it as UTF-8 with charset=utf-8 or none")
    if charset not in UTF_8:  # it was not read: a latin-1 é was "malformed JSON: can't decode byte 0xe9"
        raise ApiError(415, f"the body is sent as charset {charset}; the server reads JSON as UTF-8 alone (RFC 8259): "
                            "send it as UTF-8")
    content = _codings(request, "content-encoding")  # every line: `.get` read the first alone, often "identity"
    if any(coding != "identity" for coding in content):  # a gzip body read as text: "can't decode byte 0x8b"
        raise ApiError(415, f"the body is sent with content-encoding {', '.join(content)}, which the server does not "
                            "undo; send it uncompressed")
    transfer = _codings(request, "transfer-encoding")
    if any(coding != "chunked" for coding in transfer):  # the parser undoes the chunks alone and passed the rest on
        raise ApiError(501, f"the body is sent with transfer-encoding {', '.join(transfer)}, of which the server "
                            "undoes only chunked; send it chunked alone or with a Content-Length")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise ApiError(413, f"the body is {declared} bytes; the limit is {limits.max_body_bytes}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise ApiError(413, f"the body is over the limit of {limits.max_body_bytes} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # e.g. closed for sending too slowly (see ``protocol``); nobody reads the reply
        raise ApiError(400, "the client disconnected before sending the whole body") from None
    raw = b"".join(chunks)
    if not raw.strip():  # "malformed JSON: Expecting value: line 1 column 1 (char 0)" said nothing of the cause
        raise ApiError(400, 'the body is empty; send a JSON object such as {"queries": ["..."]}, with a Content-Length '
                            "or chunked (a body without either is not read)")
    check_utf_8(raw)
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise ApiError(400, f"the JSON nests {depth} levels deep; the limit is {MAX_JSON_DEPTH}")
    try:
        return json.loads(raw, object_pairs_hook=unique_keys, parse_int=_small_int, parse_constant=_no_constant)
    except RepeatedKeyError as error:  # json.loads keeps the last of {"k": 3, "k": 2} unsaid, where a GET parameter
        # given twice is refused (which one the client meant is a guess either way)
        raise ApiError(400, f"the key {clipped(error.key)!r} is given {error.count} times in one JSON object; give it "
                            "once") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(400, f"malformed JSON: {error}") from None


def check_utf_8(raw: bytes) -> None:
    """Refuse a body in UTF-16 or UTF-32, which ``json.loads`` would decode by guessing (module docstring)."""
    encoding = json.detect_encoding(raw)  # the BOM, else where the first four bytes hold zeros
    if encoding not in ("utf-8", "utf-8-sig"):
        named = encoding.upper().replace("-LE", " little-endian").replace("-BE", " big-endian")
        raise ApiError(415, f"the body is {named} (by its byte order mark or zero bytes); the server reads JSON as "
                            "UTF-8 alone (RFC 8259): send it as UTF-8")


def _parameter(text: str) -> tuple[str, str]:
    """A media type parameter ``name=value`` (the value maybe quoted) as the pair."""
    name, _, value = text.partition("=")
    return name.strip(), value.strip().strip('"')


def _codings(request: Request, header: str) -> list[str]:
    """The codings a header lists, lower-cased, over every line of it."""
    return [coding.strip().lower() for line in request.headers.getlist(header) for coding in line.split(",")
            if coding.strip()]


def _small_int(digits: str) -> int:
    """A JSON integer; one longer than any valid field is refused before Python's 4,300-digit conversion limit,
    whose message tells the client to call ``sys.set_int_max_str_digits``."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ApiError(400, f"a number in the body has {len(digits.lstrip('-'))} digits; the limit is "
                            f"{MAX_INT_DIGITS}")
    return int(digits)


def _no_constant(token: str) -> float:
    """NaN, Infinity or -Infinity, which ``json.loads`` takes though they are not JSON (RFC 8259): ``{"k": NaN}`` was
    parsed and refused only as "not a valid integer", a body other parsers refuse whole."""
    raise ApiError(400, f"malformed JSON: {token} is not JSON (it has no NaN or Infinity); send a number in digits")


async def read_search_body(request: Request, limits: Limits) -> SearchBody:
    """A POST /search body, validated: fields, query count and each query."""
    check_post_query_string(request.scope.get("query_string", b""))
    try:
        body = SearchBody.model_validate(await read_json(request, limits))
    except ValidationError as error:
        raise ApiError(400, validation_message(error.errors())) from None
    if len(body.queries) > limits.max_queries:
        raise ApiError(400, f"{len(body.queries)} queries in one request; the limit is {limits.max_queries}")
    check_hits(len(body.queries), body.k, limits)
    for number, query in enumerate(body.queries):
        try:
            check_query(query, limits)
        except ApiError as error:  # named by its place, as pydantic's errors name theirs ("queries.1: ...")
            raise ApiError(error.status, f"queries.{number}: {error.message}") from None
    return body
