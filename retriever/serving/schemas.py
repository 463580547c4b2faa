"""The API's request and response shapes, for validation and the OpenAPI schema.

Responses are serialised with ``json.dumps`` rather than through pydantic: the response models
only document the shapes at ``/docs``.
"""
from __future__ import annotations

from typing import Literal

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator

from retriever.searching import DEFAULT_K  # `--max-hits` is at least this, so a request without k always fits

# An index name (``served.valid_index_name``): one path segment, percent-encoded in a URL when it is not ASCII.
NAME_RULE = "1-64 letters or digits (of any script), '_' or '-'"
MAX_K = 1000
Mode = Literal["dense", "bm25", "hybrid"]


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queries: list[str] = Field(min_length=1, description="Query texts, searched in one batch.")
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K, strict=True,
                   description=f"Hits per query (a JSON integer; null or absent: {DEFAULT_K}).")
    mode: Mode | None = Field(None, description="dense, bm25 or hybrid. [default (null or absent): the server's --mode]")

    @model_validator(mode="before")
    @classmethod
    def null_is_absent(cls, body: object) -> object:
        """An optional field given as null takes its default, as if left out: `"mode": null` did while `"k": null` was
        a 400, and a client serialising its unset options (Python's None) sends nulls."""
        if not isinstance(body, dict):
            return body
        optional = {name for name, field in cls.model_fields.items() if not field.is_required()}
        return {key: value for key, value in body.items() if value is not None or key not in optional}

CUT_AT_TOKENS = ("null, or the tokens the query was cut to when it was longer than the index's query_max_length "
                 "(GET /indexes): only that beginning of it was encoded (bm25 reads all of it).")
NOTE = ("Present only when the query found no hits and the reason is known: why (e.g. BM25 matched no term of it), "
        "as `retriever search` prints it.")


class HitModel(BaseModel):
    rank: int
    id: str
    score: float
    title: str
    text: str


class SearchResponse(BaseModel):
    index: str
    query: str
    cut_at_tokens: int | None = Field(description=CUT_AT_TOKENS)
    k: int
    mode: str
    note: str | None = Field(None, description=NOTE)
    took_ms: float
    hits: list[HitModel]


class QueryResult(BaseModel):
    query: str
    cut_at_tokens: int | None = Field(description=CUT_AT_TOKENS)
    note: str | None = Field(None, description=NOTE)
    hits: list[HitModel]


class BatchSearchResponse(BaseModel):
    index: str
    k: int
    mode: str
    took_ms: float
    results: list[QueryResult]


class ErrorModel(BaseModel):
    error: str


ERRORS = {status: {"model": ErrorModel} for status in (400, 404, 413, 415, 500, 501, 503)}
# No pattern: OpenAPI tools read one as a JavaScript regex without the u flag \p{L} needs (Swagger UI's "Try it out"
# refused every name); a name not served is a 404 naming those that are.
NAME_PARAM = Path(description=f"Index name, as given to `--index NAME=PATH`: {NAME_RULE}, percent-encoded when not "
                              "ASCII. GET /indexes lists them.")
Q_PARAM = Query(description="The query text.")
K_PARAM = Query(DEFAULT_K, ge=1, le=MAX_K, description="Hits to return.")
MODE_PARAM = Query(None, description="dense, bm25 or hybrid. [default: the server's --mode]")
POST_BODY = {"requestBody": {"required": True,
                             "content": {"application/json": {"schema": SearchBody.model_json_schema()}}}}
