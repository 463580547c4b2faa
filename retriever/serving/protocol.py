"""Limits on receiving each request that uvicorn's httptools protocol does not have: time and head size.

- **Time.** uvicorn's ``timeout_keep_alive`` only runs between a finished response and the next
  request's first byte, so a client that connects and sends half a header (or trickles one byte a
  second) holds its connection, and the server's file descriptors, for ever: a few hundred such
  connections make a cheap denial of service (Slowloris). Any connection that has not delivered a
  whole request (headers and body) within ``request_timeout`` seconds of connecting or of starting
  that request is closed. Responses are never cut short: the clock stops once the request is in.
- **Head size.** httptools buffers a request line and headers of any length, so a few connections
  sending headers of hundreds of megabytes would exhaust memory before the app sees a byte. A head
  (request line plus headers) over ``max_head_bytes`` gets a JSON 431 and the connection is closed.
- **Malformed requests** get uvicorn's 400, as JSON like every other error here, once the requests
  pipelined before them are answered.
- **HEAD** is answered wherever GET is (``HeadAsGet``), as HTTP requires and health checkers expect;
  a 405's ``Allow`` names every method of the path (``allowed_methods``).
"""
from __future__ import annotations

import asyncio
import json
import logging

from starlette.routing import Match
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)
MAX_HEAD_BYTES = 32 * 1024


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol plus a deadline and a size cap for receiving each request."""

    request_timeout: float = 10.0
    max_head_bytes: int = MAX_HEAD_BYTES

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._head_bytes: int | None = 0  # bytes of the head being received; None once it is in
        self._pending_400: str | None = None  # a malformed request's refusal, waiting for earlier responses
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._head_bytes is not None:
            self._head_bytes += len(data)
        super().data_received(data)
        # Checked after parsing, so a chunk that completes a small head and carries a body is let
        # through; the parser holds at most the cap plus one chunk of an oversized head.
        if self._head_bytes is not None and self._head_bytes > self.max_head_bytes:
            self._head_bytes = None
            self._refuse(431, f"the request line and headers are over {self.max_head_bytes} bytes, "
                              "the server's --max-head-bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._head_bytes = 0
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """Refused once the requests before it are answered: pipelined after a good request, the 400 and close
        used to cut that request's response off (uvicorn's own behaviour)."""
        self._pending_400 = f"malformed HTTP request ({msg.rstrip('.').lower()})"
        if self.cycle is None or self.cycle.response_complete:
            self._refuse(400, self._pending_400)
        else:
            self.flow.pause_reading()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        pending = self._pending_400
        if pending and (self.cycle is None or self.cycle.response_complete):
            self._refuse(400, pending)

    def _refuse(self, status: int, message: str) -> None:
        if self.transport.is_closing():
            return
        body = json.dumps({"error": message}).encode()
        reason = {400: b"Bad Request", 431: b"Request Header Fields Too Large"}[status]
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (status, reason, len(body), body))
        self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.debug("closed a connection that sent no complete request within %ss", self.request_timeout)
            self.transport.close()


class HeadAsGet:
    """ASGI middleware: the app routes a HEAD as a GET; uvicorn, whose scope still says HEAD, sends the
    reply's headers (its length included) without the body."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            scope = {**scope, "method": "GET"}
        await self.app(scope, receive, send)


def allowed_methods(routes: list, scope: dict) -> str:
    """The ``Allow`` of a 405: every method some route takes at this path. Starlette names only the first
    route's, so a DELETE or OPTIONS on /search said ``allow: GET`` though POST is served there too; HEAD is
    added wherever GET is, as ``HeadAsGet`` answers it."""
    methods = _route_methods(routes, scope)
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


def _route_methods(routes: list, scope: dict) -> set[str]:
    methods: set[str] = set()
    for route in routes:
        if route.matches(scope)[0] == Match.NONE:
            continue
        methods |= set(getattr(route, "methods", None) or ())
        included = getattr(route, "original_router", route)  # FastAPI wraps an included router (no prefix here)
        methods |= _route_methods(getattr(included, "routes", None) or [], scope)
    return methods


def guarded_protocol(request_timeout: float, max_head_bytes: int = MAX_HEAD_BYTES) -> type[GuardedHttpProtocol]:
    """The protocol class to pass as ``uvicorn.Config(http=...)``, with its limits set."""
    if request_timeout <= 0 or max_head_bytes <= 0:
        raise ValueError("the request timeout and the head size limit must be positive")
    return type("GuardedHttpProtocol", (GuardedHttpProtocol,),
                {"request_timeout": float(request_timeout), "max_head_bytes": int(max_head_bytes)})
