"""The HTTP API: top-k search over one or more loaded indexes, with a search page at ``/``.

Routes (``NAME`` is an index name; the unnamed routes use the default index):

    GET  /                              the search page (``/?q=...&k=...&index=NAME`` runs a search)
    GET  /health                        liveness plus batching counters per index
    GET  /indexes                       names, sizes and encoders of the served indexes
    GET  /info, /indexes/NAME/info      one index's manifest
    GET  /search?q=...&k=10&mode=hybrid one query        (also /indexes/NAME/search)
    POST /search {"queries": [...], "k": 10, "mode": "bm25"}  several   (also /indexes/NAME/search)
    GET  /docs, /redoc, /openapi.json   the API docs, their scripts served from /docs/assets (no CDN)

``mode`` is dense, bm25 or hybrid (default: the server's ``--mode``); bm25/hybrid on an index
without a BM25 part is a 400 saying how to add one.

Every error is JSON ``{"error": message}``: 400 for bad input (empty or over-long query, k
outside 1..1000, malformed JSON, wrong fields; FastAPI's own 422 validation errors are turned
into 400 too; a query with a lone surrogate; more than ``max_hits`` queries x k; a response over
``max_response_bytes``; JSON nested too deep; a query the encoder fails on, which fails only
its own request; an index name or GET query string that is not UTF-8, a query string that repeats a
parameter or has a k that is not digits; a mode the index lacks; an HTTP/1.1 request without exactly one Host header, or one whose Host is no host and port), 404 unknown index or route (naming the routes; a trailing slash is not redirected:
the 404 names the path without it), 405 wrong method (HEAD is answered as GET), 413 body over the limit (closing the connection), 415 a POST that is not ``application/json`` (or ``application/NAME+json``), is declared in a
charset other than UTF-8 or is compressed (``Content-Encoding``), 431 a request head over
``--max-head-bytes``, 501 a POST body in a transfer coding other than chunked, 503 when too many
requests or queries are queued, a request waited in the queue over ``max_queue_seconds`` (or a forced stop dropped it), 505 a request line of an HTTP version other than 1.0 and 1.1 (closing the connection),
500 with its one-line message for damage to a served index's files (the server's fault, which a retry will not
mend: a damaged BM25 part fails the bm25/hybrid requests alone), and a bare 500 message (never a traceback) for bugs. Request shapes are in ``schemas``, input
checks and limits in ``inputs`` (a POST body's JSON in ``json_body``), the handlers turning errors into these responses in
``error_responses``; CORS headers, off unless origins are allowed, in ``cors``.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool

from retriever.errors import RetrieverError
from retriever.searching import Searcher
from retriever.serving.cors import CrossOrigin, checked_origins
from retriever.serving.error_responses import add_error_handlers, json_response
from retriever.serving.inputs import (Limits, check_hits, check_k_digits, check_no_parameters, check_query,
                                      check_query_string)
from retriever.serving.json_body import read_search_body
from retriever.serving.malformed import HostChecked
from retriever.serving.output import bounded, hits_list, list_object
from retriever.serving.problems import sent_path
from retriever.serving.page import page_html
from retriever.serving.served import BatchSettings, ServedIndexes, requested_name, summary, valid_index_name
from retriever.serving.routing import HeadAsGet, ServerOptions
from retriever.serving.stopping import AnsweredAtStop, quiet_cancelled_requests
from retriever.serving.schemas import (ERRORS, K_PARAM, MODE_PARAM, NAME_PARAM, NAME_RULE, POST_BODY, Q_PARAM,
                                       BatchSearchResponse, Mode, SearchResponse)
from retriever.unknown_words import no_hits_reason

INLINE_HITS = 100
DOCS_ASSETS = "/docs/assets"  # Swagger UI's and ReDoc's scripts and styles, as the package fastapi-offline ships them


async def _bounded_response(pieces: Iterable[bytes], hits: int, limits: Limits) -> Response:
    """The JSON ``pieces`` (a generator: the hits are turned into JSON there) joined within
    ``limits.max_response_bytes``; many hits are written in a worker thread, so /health and small
    requests are answered meanwhile, while a few are not worth the thread hand-off."""
    if hits <= INLINE_HITS:
        return Response(bounded(pieces, limits), media_type="application/json")
    return Response(await run_in_threadpool(bounded, pieces, limits), media_type="application/json")


def _took_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def create_app(searchers: dict[str, Searcher], limits: Limits | None = None,
               batching: BatchSettings | None = None, default: str | None = None,
               origins: Iterable[str] = ()) -> FastAPI:
    """An app serving already-loaded searchers; each gets a micro-batcher while the app runs. Pages on ``origins``
    (``*``: any) may call it from a browser (``cors``)."""
    origins = checked_origins(origins)
    if not searchers:
        raise RetrieverError("nothing to serve: give at least one index")
    bad = [name for name in searchers if not valid_index_name(name)]
    if bad:
        raise RetrieverError(f"invalid index name {bad[0]!r}: use {NAME_RULE}")
    default = default or next(iter(searchers))
    if default not in searchers:
        raise RetrieverError(f"the default index {default!r} is not among the served indexes")
    served = ServedIndexes(searchers, default, limits or Limits(), batching or BatchSettings())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        served.start()
        try:
            yield
        except asyncio.CancelledError:  # a forced stop (``stopping``): starlette logged a traceback of it
            pass
        finally:
            served.stop()

    # /docs and /redoc with Swagger UI's and ReDoc's files served from DOCS_ASSETS, not a CDN: they were blank offline
    app = FastAPIOffline(static_url=DOCS_ASSETS, title="retriever", version="1", lifespan=lifespan, responses=ERRORS,
                         redirect_slashes=False,
                         description="Top-k search (dense, bm25 or hybrid, as each index allows) over the indexes this "
                                     "server loaded. Errors are JSON `{\"error\": message}`: bad input is a 4xx (400; "
                                     "413, 415 or 431 for a body or head over its limit or of the wrong kind), the "
                                     "server's fault a 5xx.")
    app.state.served, app.state.origins = served, origins
    quiet_cancelled_requests()  # a forced stop's dropped requests: one line, not a traceback each
    app.add_middleware(AnsweredAtStop)  # innermost, so the CORS headers are added to its 503
    app.add_middleware(HeadAsGet)
    app.add_middleware(ServerOptions)
    app.add_middleware(HostChecked)
    if origins:
        app.add_middleware(CrossOrigin, origins=origins)
    add_error_handlers(app)
    app.include_router(router)
    return app


router = APIRouter()


def _served(request: Request) -> ServedIndexes:
    return request.app.state.served


def _unparameterised(request: Request) -> ServedIndexes:
    """The served indexes, for a route that takes no parameters (refusing any given, which it would not read)."""
    check_no_parameters(sent_path(request.scope), request.scope.get("query_string", b""))
    return _served(request)


async def strict_query_string(request: Request) -> None:
    """``check_query_string`` as the GET searches' dependency, run before the framework reads q and k: `?query=cat` (q
    misnamed) said only "q: Field required", `?k=5&k=` "k: Input should be a valid integer"."""
    check_query_string(request.scope.get("query_string", b""), sent_path(request.scope))


async def search_one(request: Request, name: str, q: str, k: int, mode: str | None) -> Response:
    started = time.perf_counter()
    served = _served(request)
    check_k_digits(request.scope.get("query_string", b""))
    served.check_mode(name, mode)
    check_hits(1, k, served.limits)
    cut_at: list = []
    [hits] = await served.batcher(name).search([check_query(q, served.limits)], k, mode, cut_at)
    mode = mode or served.searchers[name].mode
    head = {"index": name, "query": q, "cut_at_tokens": cut_at[0], "k": k, "mode": mode,
            **_notes(served.searchers[name], [q], [hits], mode)[0], "took_ms": _took_ms(started)}
    return await _bounded_response(hits_list(head, hits), len(hits), served.limits)


async def search_many(served: ServedIndexes, name: str, request: Request) -> Response:
    started = time.perf_counter()
    batcher = served.batcher(name)
    body = await read_search_body(request, served.limits)
    served.check_mode(name, body.mode)
    cut_at: list = []
    results = await batcher.search(body.queries, body.k, body.mode, cut_at, listed=True)
    mode = body.mode or served.searchers[name].mode
    head = {"index": name, "k": body.k, "mode": mode, "took_ms": _took_ms(started)}
    notes = _notes(served.searchers[name], body.queries, results, mode)
    pieces = list_object(head, "results", (hits_list({"query": q, "cut_at_tokens": cut, **note}, hits)
                                           for q, cut, note, hits in zip(body.queries, cut_at, notes, results)))
    return await _bounded_response(pieces, sum(len(hits) for hits in results), served.limits)


def _notes(searcher: Searcher, queries: list[str], results: list[list], mode: str) -> list[dict]:
    """Per query, ``{"note": why}`` where it found no hits and ``no_hits_reason`` knows why (the reason the CLI
    prints), else nothing: a 200 with ``hits: []`` said no word of it."""
    empty = [number for number, hits in enumerate(results) if not hits]
    reasons = dict(zip(empty, no_hits_reason(searcher, [queries[n] for n in empty], mode)))
    return [{"note": reasons[n]} if reasons.get(n) else {} for n in range(len(queries))]


def info(served: ServedIndexes, name: str) -> Response:
    searcher = served.searcher(name)
    return json_response({**summary(name, searcher), "manifest": searcher.manifest})


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def page() -> HTMLResponse:
    return HTMLResponse(page_html())


@router.get("/health", summary="Liveness and batching counters")
async def health(request: Request) -> Response:
    """Parameters are let be: a liveness check must not fail on a checker's cache-buster (``?_=1700000000``), and
    ``no-store`` tells caches on the way not to answer for the server."""
    served = _served(request)
    response = json_response({"status": "ok", "default": served.default,
                              "indexes": {name: b.stats.to_json() for name, b in served.batchers.items()}})
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get("/indexes", summary="The served indexes")
async def indexes(request: Request) -> Response:
    served = _unparameterised(request)
    return json_response({"default": served.default,
                          "indexes": [summary(n, s) for n, s in served.searchers.items()]})


@router.get("/info", summary="The default index's manifest")
async def default_info(request: Request) -> Response:
    served = _unparameterised(request)
    return info(served, served.default)


@router.get("/indexes/{name}/info", summary="One index's manifest")
async def named_info(request: Request, name: str = NAME_PARAM) -> Response:
    return info(_unparameterised(request), requested_name(request.scope, name))


@router.get("/search", summary="Search the default index", responses={200: {"model": SearchResponse}},
            dependencies=[Depends(strict_query_string)])
async def default_search_get(request: Request, q: str = Q_PARAM, k: int = K_PARAM,
                             mode: Mode | None = MODE_PARAM) -> Response:
    return await search_one(request, _served(request).default, q, k, mode)


@router.post("/search", summary="Search the default index for several queries",
             responses={200: {"model": BatchSearchResponse}}, openapi_extra=POST_BODY)
async def default_search_post(request: Request) -> Response:
    served = _served(request)
    return await search_many(served, served.default, request)


@router.get("/indexes/{name}/search", summary="Search one index", responses={200: {"model": SearchResponse}},
            dependencies=[Depends(strict_query_string)])
async def named_search_get(request: Request, name: str = NAME_PARAM, q: str = Q_PARAM, k: int = K_PARAM,
                           mode: Mode | None = MODE_PARAM) -> Response:
    return await search_one(request, requested_name(request.scope, name), q, k, mode)


@router.post("/indexes/{name}/search", summary="Search one index for several queries",
             responses={200: {"model": BatchSearchResponse}}, openapi_extra=POST_BODY)
async def named_search_post(request: Request, name: str = NAME_PARAM) -> Response:
    return await search_many(_served(request), requested_name(request.scope, name), request)
