"""A time limit on receiving each request, which uvicorn does not have.

uvicorn's ``timeout_keep_alive`` only runs between a finished response and the next request's
first byte, so a client that connects and sends half a header (or trickles one byte a second)
holds its connection, and the server's file descriptors, for ever: a few hundred such
connections make a cheap denial of service (Slowloris). This protocol closes any connection
that has not delivered a whole request (headers and body) within ``request_timeout`` seconds of
connecting or of starting that request. Responses are never cut short: the clock stops once the
request is in.
"""
from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)


class RequestDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol plus a deadline for receiving each request."""

    request_timeout: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

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


def request_deadline_protocol(seconds: float) -> type[RequestDeadlineProtocol]:
    """The protocol class to pass as ``uvicorn.Config(http=...)``, with its deadline set."""
    if seconds <= 0:
        raise ValueError("the request timeout must be positive")
    return type("RequestDeadlineProtocol", (RequestDeadlineProtocol,), {"request_timeout": float(seconds)})
