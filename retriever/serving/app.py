"""The HTTP API: top-k search over one or more loaded indexes, with a search page at ``/``.

Routes (``NAME`` is an index name; the unnamed routes use the default index):

    GET  /                              the search page (``/?q=...&k=...&index=NAME`` runs a search)
    GET  /health                        liveness plus batching counters per index
    GET  /indexes                       names, sizes and encoders of the served indexes
    GET  /info, /indexes/NAME/info      one index's manifest
    GET  /search?q=...&k=10             one query        (also /indexes/NAME/search)
    POST /search {"queries": [...], "k": 10}  several   (also /indexes/NAME/search)

Every error is JSON ``{"error": message}``: 400 for bad input (empty or over-long query, k
outside 1..1000, malformed JSON, wrong fields; FastAPI's own 422 validation errors are turned
into 400 too), 404 unknown index or route, 405 wrong method, 413 body over the limit, 415 a
POST that is not ``application/json``, 503 when too many requests are queued, and a bare
500 message (never a traceback) for bugs. Responses are serialised with ``json.dumps`` rather
than through pydantic: the models below only document the shapes in the OpenAPI schema.
"""
from __future__ import annotations

import json
import re
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from retriever.errors import RetrieverError
from retriever.searching import Hit, Searcher
from retriever.serving.batcher import Closed, MicroBatcher, Overloaded
from retriever.serving.page import page_html

NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_K = 1000
SUMMARY_KEYS = ("model", "pooling", "normalize", "query_max_length", "query_prefix", "dim")


def valid_index_name(name: str) -> bool:
    """Names end up in URLs and log lines only, never in paths, but stay boring on purpose."""
    return re.fullmatch(NAME_PATTERN, name) is not None


@dataclass(frozen=True)
class Limits:
    """Request limits, so one client cannot make the server encode megabytes of text."""

    max_query_chars: int = 1000
    max_body_bytes: int = 256 * 1024
    max_queries: int = 256


@dataclass(frozen=True)
class BatchSettings:
    """How the micro-batchers group concurrent queries (see ``retriever.serving.batcher``)."""

    max_batch: int = 32
    max_wait_ms: float = 2.0
    max_pending: int = 4096
    workers: int = 1
    warm_up: bool = True


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queries: list[str] = Field(min_length=1, description="Query texts, searched in one batch.")
    k: int = Field(10, ge=1, le=MAX_K, description="Hits per query.")


class HitModel(BaseModel):
    rank: int
    id: str
    score: float
    title: str
    text: str


class SearchResponse(BaseModel):
    index: str
    query: str
    k: int
    took_ms: float
    hits: list[HitModel]


class QueryResult(BaseModel):
    query: str
    hits: list[HitModel]


class BatchSearchResponse(BaseModel):
    index: str
    k: int
    took_ms: float
    results: list[QueryResult]


class ErrorModel(BaseModel):
    error: str


ERRORS = {status: {"model": ErrorModel} for status in (400, 404, 413, 415, 503)}
NAME_PARAM = Path(description="Index name, as given to `--index NAME=PATH`.", pattern=NAME_PATTERN)
Q_PARAM = Query(description="The query text.")
K_PARAM = Query(10, ge=1, le=MAX_K, description="Hits to return.")
POST_BODY = {"requestBody": {"required": True,
                             "content": {"application/json": {"schema": SearchBody.model_json_schema()}}}}


def json_response(payload: dict, status: int = 200) -> Response:
    return Response(json.dumps(payload, ensure_ascii=False), status_code=status, media_type="application/json")


def _error(status: int, message: str, headers: dict | None = None) -> Response:
    response = json_response({"error": message}, status)
    response.headers.update(headers or {})
    return response


def _validation_message(errors: list[dict]) -> str:
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("query", "path", "body"))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid")))
    return "; ".join(parts) or "invalid request"


def _summary(name: str, searcher: Searcher) -> dict:
    manifest = searcher.manifest
    encoder = manifest.get("encoder", {})
    return {"name": name, "documents": int(searcher.index.ntotal),
            "index_type": manifest.get("index", {}).get("type"),
            "encoder": {key: encoder.get(key) for key in SUMMARY_KEYS}}


def _hits_json(hits: list[Hit]) -> list[dict]:
    return [hit.to_json() for hit in hits]


def create_app(searchers: dict[str, Searcher], limits: Limits | None = None,
               batching: BatchSettings | None = None, default: str | None = None) -> FastAPI:
    """An app serving already-loaded searchers; each gets a micro-batcher while the app runs."""
    if not searchers:
        raise RetrieverError("nothing to serve: give at least one index")
    bad = [name for name in searchers if not valid_index_name(name)]
    if bad:
        raise RetrieverError(f"invalid index name {bad[0]!r}: use 1-64 letters, digits, '_' or '-'")
    default = default or next(iter(searchers))
    if default not in searchers:
        raise RetrieverError(f"the default index {default!r} is not among the served indexes")
    limits = limits or Limits()
    batching = batching or BatchSettings()
    batchers: dict[str, MicroBatcher] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for name, searcher in searchers.items():
            batchers[name] = MicroBatcher(searcher, batching.max_batch, batching.max_wait_ms,
                                          batching.max_pending, name=name, workers=batching.workers)
            if batching.warm_up:
                batchers[name].warm_up()
        try:
            yield
        finally:
            for batcher in batchers.values():
                batcher.close()
            batchers.clear()

    app = FastAPI(title="retriever", version="1", lifespan=lifespan, responses=ERRORS,
                  description="Dense top-k search over the indexes this server loaded. "
                              "Errors are JSON `{\"error\": message}`; bad input is a 400.")
    app.state.batchers = batchers
    app.state.searchers = searchers
    app.state.limits = limits
    app.state.default_index = default

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> Response:
        return _error(error.status, error.message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> Response:
        return _error(400, _validation_message(error.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        return _error(error.status_code, str(error.detail), getattr(error, "headers", None))

    @app.exception_handler(Overloaded)
    @app.exception_handler(Closed)
    async def busy(request: Request, error: RetrieverError) -> Response:
        return _error(503, str(error))

    @app.exception_handler(RetrieverError)
    async def refused(request: Request, error: RetrieverError) -> Response:
        return _error(400, str(error))

    @app.exception_handler(Exception)
    async def bug(request: Request, error: Exception) -> Response:
        return _error(500, "internal server error")

    def searcher_for(name: str) -> Searcher:
        if name not in searchers:
            raise ApiError(404, f"no index named {name!r}; served: {', '.join(searchers)}")
        return searchers[name]

    def batcher_for(name: str) -> MicroBatcher:
        searcher_for(name)
        if name not in batchers:
            raise ApiError(503, "the server is starting or stopping")
        return batchers[name]

    def check_query(text: str) -> str:
        if not text.strip():
            raise ApiError(400, "the query is empty")
        if len(text) > limits.max_query_chars:
            raise ApiError(400, f"the query is {len(text)} characters; the limit is {limits.max_query_chars}")
        return text

    async def read_json(request: Request) -> object:
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

    async def search_one(name: str, q: str, k: int) -> Response:
        started = time.perf_counter()
        [hits] = await batcher_for(name).search([check_query(q)], k)
        return json_response({"index": name, "query": q, "k": k,
                              "took_ms": round((time.perf_counter() - started) * 1000, 3), "hits": _hits_json(hits)})

    async def search_many(name: str, request: Request) -> Response:
        started = time.perf_counter()
        batcher = batcher_for(name)
        try:
            body = SearchBody.model_validate(await read_json(request))
        except ValidationError as error:
            raise ApiError(400, _validation_message(error.errors())) from None
        if len(body.queries) > limits.max_queries:
            raise ApiError(400, f"{len(body.queries)} queries in one request; the limit is {limits.max_queries}")
        results = await batcher.search([check_query(q) for q in body.queries], body.k)
        return json_response({"index": name, "k": body.k,
                              "took_ms": round((time.perf_counter() - started) * 1000, 3),
                              "results": [{"query": q, "hits": _hits_json(h)} for q, h in zip(body.queries, results)]})

    def info(name: str) -> Response:
        searcher = searcher_for(name)
        return json_response({**_summary(name, searcher), "manifest": searcher.manifest})

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(page_html())

    @app.get("/health", summary="Liveness and batching counters")
    async def health() -> Response:
        return json_response({"status": "ok", "default": default,
                              "indexes": {name: b.stats.to_json() for name, b in batchers.items()}})

    @app.get("/indexes", summary="The served indexes")
    async def indexes() -> Response:
        return json_response({"default": default, "indexes": [_summary(n, s) for n, s in searchers.items()]})

    @app.get("/info", summary="The default index's manifest")
    async def default_info() -> Response:
        return info(default)

    @app.get("/indexes/{name}/info", summary="One index's manifest")
    async def named_info(name: str = NAME_PARAM) -> Response:
        return info(name)

    @app.get("/search", summary="Search the default index", responses={200: {"model": SearchResponse}})
    async def default_search_get(q: str = Q_PARAM, k: int = K_PARAM) -> Response:
        return await search_one(default, q, k)

    @app.post("/search", summary="Search the default index for several queries",
              responses={200: {"model": BatchSearchResponse}}, openapi_extra=POST_BODY)
    async def default_search_post(request: Request) -> Response:
        return await search_many(default, request)

    @app.get("/indexes/{name}/search", summary="Search one index", responses={200: {"model": SearchResponse}})
    async def named_search_get(name: str = NAME_PARAM, q: str = Q_PARAM, k: int = K_PARAM) -> Response:
        return await search_one(name, q, k)

    @app.post("/indexes/{name}/search", summary="Search one index for several queries",
              responses={200: {"model": BatchSearchResponse}}, openapi_extra=POST_BODY)
    async def named_search_post(request: Request, name: str = NAME_PARAM) -> Response:
        return await search_many(name, request)

    return app
