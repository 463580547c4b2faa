"""Reading and checking what a client sends, before any of it reaches a batch.

Everything here raises ``ApiError`` with the status and message the client gets.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from fastapi import Request
from pydantic import ValidationError

from retriever.serving.schemas import SearchBody


@dataclass(frozen=True)
class Limits:
    """Request limits, so one client cannot make the server encode megabytes of text."""

    max_query_chars: int = 1000
    max_body_bytes: int = 256 * 1024
    max_queries: int = 256


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def validation_message(errors: list[dict]) -> str:
    """Pydantic's error list as one line: ``field: problem; ...``."""
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("query", "path", "body"))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid")))
    return "; ".join(parts) or "invalid request"


def check_query(text: str, limits: Limits) -> str:
    if not text.strip():
        raise ApiError(400, "the query is empty")
    if len(text) > limits.max_query_chars:
        raise ApiError(400, f"the query is {len(text)} characters; the limit is {limits.max_query_chars}")
    return text


async def read_json(request: Request, limits: Limits) -> object:
    """The body parsed as JSON, refusing other media types and bodies over the size limit."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(415, "send the body as application/json")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise ApiError(413, f"the body is {declared} bytes; the limit is {limits.max_body_bytes}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_body_bytes:
            raise ApiError(413, f"the body is over the limit of {limits.max_body_bytes} bytes")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(400, f"malformed JSON: {error}") from None


async def read_search_body(request: Request, limits: Limits) -> SearchBody:
    """A POST /search body, validated: fields, query count and each query."""
    try:
        body = SearchBody.model_validate(await read_json(request, limits))
    except ValidationError as error:
        raise ApiError(400, validation_message(error.errors())) from None
    if len(body.queries) > limits.max_queries:
        raise ApiError(400, f"{len(body.queries)} queries in one request; the limit is {limits.max_queries}")
    for query in body.queries:
        check_query(query, limits)
    return body
