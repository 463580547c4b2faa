"""Dropping a client that reads none of a response waiting for it, ``request_timeout`` seconds on.

A request of a few bytes may get megabytes back, which the server holds until they are read: uvicorn keeps such a
response, up to --max-response-bytes, for ever, so clients that never read would pin that memory for ever (and a
keep-alive timeout's close waits for it to be sent). ``GuardedHttpProtocol`` takes this watch from ``SlowReaderWatch``.
"""
from __future__ import annotations

import asyncio
import logging
import struct

log = logging.getLogger(__name__)
try:  # the bytes a socket's peer has not acknowledged (Linux's SIOCOUTQ)
    from fcntl import ioctl
    from termios import TIOCOUTQ
except ImportError:  # elsewhere only the transport's own buffer is watched
    ioctl, TIOCOUTQ = None, None


class SlowReaderWatch:
    """A mixin before uvicorn's protocol: while writing is paused (the transport holds more than it may buffer), a
    client that took in none of what was written for ``request_timeout`` seconds is disconnected."""

    request_timeout: float = 10.0
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._stall: asyncio.TimerHandle | None = None  # while the transport holds more than it may buffer
        super().connection_made(transport)  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._watch_reading(None)
        super().connection_lost(exc)  # type: ignore[misc]

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        self._watch_reading(self._unread() + 1)

    def resume_writing(self) -> None:
        self._watch_reading(None)
        super().resume_writing()  # type: ignore[misc]

    def _watch_reading(self, unread: int | None) -> None:
        """While a response waits for the client to read it, drop the client if it read none of it (``unread``
        bytes a timeout ago, ``None`` to stop watching)."""
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if unread is None or (self.transport.is_closing() and not self.transport.get_write_buffer_size()):
            return
        left = self._unread()
        if left >= unread:
            log.debug("dropped a connection that read none of its response for %ss", self.request_timeout)
            self.transport.abort()
            return
        self._stall = self.loop.call_later(self.request_timeout, self._watch_reading, left)

    def _unread(self) -> int:
        """Bytes written for the client that it has not taken in: the transport's buffer, plus the socket's send
        queue where the system says (megabytes of kernel buffer may drain to a slow reader before the transport's
        own buffer moves)."""
        unread = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if ioctl is not None and sock is not None:
            try:
                unread += struct.unpack("i", ioctl(sock.fileno(), TIOCOUTQ, b"\0" * 4))[0]
            except (OSError, ValueError):  # closed meanwhile, or not a TCP socket
                pass
        return unread
