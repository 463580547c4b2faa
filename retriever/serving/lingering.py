"""Closing a connection while its client is still sending: after the response, not before it is read.

A response that closes the connection before its request's body is all in (a 413 refusing a body over the limit
unread) was followed by ``transport.close()`` at once. The bytes of the body still arriving then meet a closed
socket, and the kernel answers them with a reset, which can reach the client before it has read the response: it
sees "connection reset" and never the 413 (as a test saw on a loaded machine); so did the protocol's own 431 and
400 (``close_lingering``), sent while a client's oversized head or malformed body is still coming. Servers close such connections
lingering (nginx's ``lingering_close``): they shut their sending side, so the client sees the response end, and
read and drop what still comes until the client closes or a timeout (the protocol's request deadline) passes.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable


class LingeringTransport:
    """The transport one request's response is written to (``GuardedHttpProtocol`` hands it to uvicorn's cycle):
    its ``close``, while ``receiving()`` says that request's body is still coming, shuts the sending side and calls
    ``linger()``, after which the protocol drops what it receives; otherwise it closes as usual."""

    def __init__(self, transport: asyncio.Transport, receiving: Callable[[], bool], linger: Callable[[], None]) -> None:
        self._transport, self._receiving, self._linger = transport, receiving, linger

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    def close(self) -> None:
        if self._receiving():
            close_lingering(self._transport, self._linger)
        else:
            self._transport.close()


def close_lingering(transport: asyncio.Transport, linger: Callable[[], None]) -> None:
    """Shut the sending side once the response is sent, so the client reads it whole and then its end, and call
    ``linger()``, after which the protocol drops what it receives; a transport that cannot half-close closes."""
    if not transport.is_closing() and transport.can_write_eof():
        linger()
        transport.write_eof()
    else:
        transport.close()
