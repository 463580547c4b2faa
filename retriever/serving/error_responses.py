"""The API's error responses: every error a request meets becomes JSON ``{"error": message}`` with its status (the
list is in ``app``'s docstring), held apart from the routes so either can change alone."""
from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from retriever.errors import IndexDamaged, RetrieverError
from retriever.serving.batch_errors import Closed, Overloaded
from retriever.serving.cors import cross_origin_headers
from retriever.serving.inputs import ApiError
from retriever.serving.problems import sent_path, validation_message
from retriever.serving.routing import allowed_methods, not_found

RETRY_AFTER = "1"  # seconds: the queue drains a batch at a time, so a second is a long wait already


def json_response(payload: dict, status: int = 200) -> Response:
    return Response(json.dumps(payload, ensure_ascii=False), status_code=status, media_type="application/json")


def _error(status: int, message: str, headers: dict | None = None) -> Response:
    response = json_response({"error": message}, status)
    response.headers.update(headers or {})
    return response


def add_error_handlers(app: FastAPI) -> None:
    """Every error becomes JSON ``{"error": message}`` with the status ``app``'s docstring lists."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> Response:
        # A body over the limit is not read: closing spares reading (and the client sending) the rest of it
        return _error(error.status, error.message, {"connection": "close"} if error.status == 413 else None)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> Response:
        return _error(400, validation_message(error.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        headers = dict(getattr(error, "headers", None) or {})
        if error.status_code == 405:  # a bare "Method Not Allowed" named neither
            headers["allow"] = allowed_methods(request.app.router.routes, request.scope)
            return _error(405, f"{sent_path(request.scope)} takes {headers['allow']}, not {request.method}", headers)
        if error.status_code == 404:
            return _error(404, not_found(request.app.router.routes, request.scope))
        return _error(error.status_code, str(error.detail), headers)

    @app.exception_handler(Overloaded)
    @app.exception_handler(Closed)
    async def busy(request: Request, error: RetrieverError) -> Response:
        return _error(503, str(error), {"retry-after": RETRY_AFTER})  # without it a client guessed at "shortly"

    @app.exception_handler(RetrieverError)
    async def refused(request: Request, error: RetrieverError) -> Response:
        return _error(500 if isinstance(error, IndexDamaged) else 400, str(error))

    @app.exception_handler(Exception)
    async def bug(request: Request, error: Exception) -> Response:
        return _error(500, "internal server error",  # sent around CrossOrigin: its headers are added here
                      cross_origin_headers(request.app.state.origins, request.headers.get("origin")))
