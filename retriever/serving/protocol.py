"""Limits on receiving each request that uvicorn's httptools protocol does not have: time, head size, and a chunked
body's size, refused (a 413) once its chunk sizes add up past the app's limit (``max_body_bytes``).

- **Time.** uvicorn's ``timeout_keep_alive`` only runs between a finished response and the next
  request's first byte, so a client that connects and sends half a header (or trickles one byte a
  second) holds its connection, and the server's file descriptors, for ever: a few hundred such
  connections make a cheap denial of service (Slowloris). Any connection that has not delivered a
  whole request (headers and body) within ``request_timeout`` seconds of connecting or of starting
  that request is closed. Responses are not cut short for taking long: the clock stops once the request
  is in. The other way round, a client that reads nothing of a response waiting for it for
  ``request_timeout`` seconds is disconnected (``slow_readers``).
- **Head size.** httptools buffers a request line and headers of any length, so a few connections
  sending headers of hundreds of megabytes would exhaust memory before the app sees a byte. A head
  (request line plus headers) over ``max_head_bytes`` gets a JSON 431 and the connection is closed (lingering, as
  below, and after the responses of the requests before it, as for a 400: the client may still be sending); so do a
  chunked body's chunk extensions and trailer fields, which the parser reads alike: the bytes of a body read
  since its last data.
- **Malformed requests** get a JSON 400 naming the parser's reason (``malformed.refusal``: uvicorn's said "invalid http
  request received" whatever it was, and logged a warning each time), once the requests pipelined before them are
  answered; also when the fault is in the body (a bad chunk size), whose request would otherwise wait for the rest
  of a body that can never come. **Upgrades** (WebSocket, h2c) are answered as plain HTTP, logging nothing.
  A request line of an HTTP version other than 1.0 and 1.1 gets a JSON 505 alike, ``CONNECT host:443`` (a tunnel,
  which a proxy opens) a 405 naming the methods taken (``malformed.answer``).
- **100-continue.** A request answered before the body its client waits for a 100 Continue to send (a 413 or 415)
  closes the connection: the client may never send it, and its next request was read as that body. A response closing
  the connection before the request's body is all in closes it lingering (``lingering``), dropping what more comes.
- **Half-close** (``nc -N``): the requests sent are answered, then the connection closes (uvicorn closed at once).
HEAD, a 405's ``Allow`` and a 404 for a path with a slash too many are in ``routing``.
"""
from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from retriever.choices import MAX_BODY_BYTES
from retriever.serving.chunked import ChunkedEnd
from retriever.serving.cors import cross_origin_headers
from retriever.serving.lingering import LingeringTransport, close_lingering
from retriever.serving.open_files import DescriptorWatch
from retriever.serving.malformed import SUPPORTED_VERSIONS, NotAProxy, UnsupportedVersion, answer, rooted
from retriever.serving.slow_readers import SlowReaderWatch

log = logging.getLogger(__name__)
MAX_HEAD_BYTES = 32 * 1024


class GuardedHttpProtocol(SlowReaderWatch, HttpToolsProtocol):
    """uvicorn's httptools protocol plus a deadline and a size cap for receiving each request."""

    request_timeout: float = 10.0
    max_head_bytes: int = MAX_HEAD_BYTES
    max_body_bytes: int = MAX_BODY_BYTES  # the app's limit: a chunked body's chunk sizes past it are refused at once
    descriptors: DescriptorWatch | None = None  # logs connections taking the last file descriptors
    origins: tuple[str, ...] = ()  # --allow-origin: the app's CORS headers go on this layer's refusals too

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._head_bytes: int | None = 0  # bytes of the head being received; None once it is in
        self._pending: tuple[int, str, str | None] | None = None  # a refusal (status, message, Allow) in turn
        self._body_of = None  # the request (uvicorn's cycle) whose body is coming in, if any
        self._body_left: int | None = None  # bytes of a Content-Length body still to come
        self._chunks: ChunkedEnd | None = None  # where a chunked body coming in ends, while that is followed
        self._client_done = False  # the client half-closed: it sends no more requests
        self._awaiting_body = None  # a request whose client waits for a 100 Continue to send its body
        self._lingering = False  # a response closing the connection is sent: what more comes is dropped
        super().connection_made(transport)
        if self.descriptors is not None:
            sock = transport.get_extra_info("socket")
            self.descriptors.connected(sock.fileno() if sock is not None else -1)
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Parsed in pieces that end where a message can end (a blank line, a Content-Length body's last byte), so each
        head is measured from its first byte and refused before it is parsed: fed a read at once, the parser took in
        the heads pipelined behind the first (one over the cap was served) uncounted. A chunked body is cut where its
        chunk sizes say it ends (``chunked``): cut at its first 64 blank lines in a read, a head behind more was counted
        from the next read."""
        view, start = memoryview(data), 0
        found = {b"\r\n\r\n": -1, b"\n\n": -1}  # where each blank line is next
        while start < len(data) and not (self._lingering or self._pending):  # once refused, what more comes is dropped
            if self._body_left:  # a Content-Length body is cut where it ends, whatever it holds
                end = min(len(data), start + self._body_left)
            elif self._body_of is not None:  # chunked
                at = self._chunks.end(data, start) if self._chunks else None
                if self._chunks and self._chunks.longest > self.max_head_bytes:  # refused before it is parsed
                    return self._refuse_in_turn(431, f"the chunked body's chunk extensions or trailer fields are over "
                                                     f"{self.max_head_bytes} bytes, the server's --max-head-bytes")
                if self._chunks and self._chunks.announced > self.max_body_bytes and self._reads_body():
                    return self._refuse_in_turn(413, f"the body is over the limit of {self.max_body_bytes} bytes (its "
                                                     f"chunk sizes add up to {self._chunks.announced})")
                if at is not None:  # the parser ends the body there; if it does not (it refuses the framing), the
                    self._chunks = None  # rest is fed whole
                end = len(data) if at is None else at
            else:
                for mark, at in found.items():
                    if at < start:
                        found[mark] = at if (at := data.find(mark, start)) >= 0 else len(data)
                end = min(min(at + len(mark), len(data)) for mark, at in found.items())
            self._receive(view[start:end])
            start = end

    def _reads_body(self) -> bool:
        """Whether the app is to read the body coming in (a POST not yet answered): a 413 for one it does not read would
        be a second response to its request."""
        return self._body_of.scope["method"] == "POST" and not self._body_of.response_started

    def _receive(self, data: memoryview) -> None:
        if self._head_bytes is not None:  # the parser holds at most the cap of an oversized head
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                return self._refuse_head()
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        """uvicorn's ``data_received``, keeping the parser's reason for a 400 and logging no warning a client causes
        (an upgrade is served as plain HTTP: no route takes one). The keep-alive timeout is cancelled once a request
        begins (``on_message_begin``), not by any byte: blank lines, which the parser skips, held a connection for ever."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass
        except httptools.HttpParserError as error:
            log.debug("refused a malformed request: %s", error)
            self._refuse_in_turn(*answer(error))  # a 400, 405 or 505, in turn as a 400 (``send_400_response``)

    def _should_upgrade(self) -> bool:
        return False  # else, with a WebSocket library installed, uvicorn hands the connection to its own protocol

    def _refuse_head(self) -> None:
        self._head_bytes = None
        self._refuse_in_turn(431, f"the request line and headers are over {self.max_head_bytes} bytes, the "
                                  "server's --max-head-bytes")

    def on_message_begin(self) -> None:
        self._unset_keepalive_if_required()
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        if self.parser.get_http_version() not in SUPPORTED_VERSIONS:  # stops the parser: a 505 (``_feed``)
            raise UnsupportedVersion(self.parser.get_http_version())
        if self.parser.get_method() == b"CONNECT" and not self.url.startswith(b"/"):  # a 405 (``_feed``)
            raise NotAProxy(self.url.decode("latin-1"))
        self._head_bytes = None
        self.url = rooted(self.url)
        super().on_headers_complete()
        self._body_of = self.cycle
        lengths = [value for name, value in self.headers if name == b"content-length"]  # the parser checked it
        chunked = any(name == b"transfer-encoding" for name, _ in self.headers)
        self._body_left = int(lengths[0]) if len(lengths) == 1 and lengths[0].isdigit() and not chunked else None
        self._chunks = ChunkedEnd() if chunked else None
        self.cycle.transport = LingeringTransport(self.transport, lambda cycle=self.cycle: self._body_of is cycle,
                                                  lambda: setattr(self, "_lingering", True))
        if self.cycle.waiting_for_100_continue and self.cycle.keep_alive:  # kept alive once the body is in
            self.cycle.keep_alive, self._awaiting_body = False, self.cycle

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._body_of is None:  # a trailer field is dropped: added to the headers, it was read as one if it came soon
            super().on_header(name, value)

    def on_body(self, body: bytes) -> None:
        if self._body_left is not None:
            self._body_left -= len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._awaiting_body is self.cycle and not self.cycle.response_started:
            self.cycle.keep_alive = True
        self._awaiting_body = None
        self._body_left = self._chunks = None
        self._disarm()
        self._head_bytes = 0
        self._body_of = None
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def eof_received(self) -> bool:
        """The client shut its sending side: it has sent all it will, so the requests in flight are answered, then the
        connection closes (uvicorn closed it at once). One whose body is still coming can never finish: closed now."""
        self._client_done = True
        return self._body_of is None and bool(self.pipeline or (self.cycle and not self.cycle.response_complete))

    def send_400_response(self, msg: str) -> None:
        """Refused (with ``msg``, from ``refusal``) once the requests before it are answered: pipelined after a good
        request, the 400 and close used to cut that request's response off (uvicorn's own behaviour). A fault in a
        request's body (a bad chunk) means that request never gets the rest of its body: it is not run, or, running
        and not yet answering, it is refused at once (it waited for the request timeout and got no reply)."""
        self._refuse_in_turn(400, msg)

    def _refuse_in_turn(self, status: int, message: str, allow: str | None = None) -> None:
        """A refusal (a 400, 405, 413, 431 or 505; ``send_400_response`` says why it waits), sent by the one way for
        all: the 431 of a head over the cap pipelined behind a request still being answered was written at once, and
        that response was lost."""
        if self._pending:
            return
        self._pending = (status, message, allow)
        broken = self._body_of
        queued = [entry for entry in self.pipeline if entry[0] is broken]
        for entry in queued:
            self.pipeline.remove(entry)
        running = broken is not None and not queued and not broken.response_started
        if running or self.cycle is None or self.cycle.response_complete:
            self._refuse(status, message, allow)
        else:  # the receiving deadline stops: the requests are in, and their responses are not cut short for time
            self._disarm()
            self.flow.pause_reading()

    def on_response_complete(self) -> None:
        last = not self.pipeline  # no request waits behind the one just answered
        super().on_response_complete()
        if self._pending and last:
            self._refuse(*self._pending)
        elif self._client_done and last and not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, status: int, message: str, allow: str | None = None) -> None:
        """Send a 400, 405, 413, 431 or 505 and close lingering (the client may still be sending), at most a request timeout
        on."""
        if self._lingering or self.transport.is_closing():
            return
        body = json.dumps({"error": message}).encode()
        reason = HTTPStatus(status).phrase.encode()
        origin = next((value.decode("latin-1") for name, value in self.headers or () if name == b"origin"), None)
        extra = {**cross_origin_headers(self.origins, origin), **({"allow": allow} if allow else {})}
        lines = "".join(f"{name}: {value}\r\n" for name, value in extra.items())
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s"
                             b"connection: close\r\n\r\n%s" % (status, reason, len(body), lines.encode(), body))
        if self.cycle is not None and not self.cycle.response_complete:  # as connection_lost tells a running app
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        close_lingering(self.transport, lambda: setattr(self, "_lingering", True))
        self._arm()

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


def guarded_protocol(request_timeout: float, max_head_bytes: int = MAX_HEAD_BYTES,
                     descriptors: DescriptorWatch | None = None, origins: tuple[str, ...] = (),
                     max_body_bytes: int = MAX_BODY_BYTES) -> type[GuardedHttpProtocol]:
    """The protocol class to pass as ``uvicorn.Config(http=...)``, with its limits set."""
    if not (0 < request_timeout < float("inf") and max_head_bytes > 0):  # NaN passes `<= 0`, then fails each connection
        raise ValueError("the request timeout must be a positive number of seconds and the head size limit positive")
    return type("GuardedHttpProtocol", (GuardedHttpProtocol,),
                {"request_timeout": float(request_timeout), "max_head_bytes": int(max_head_bytes),
                 "max_body_bytes": int(max_body_bytes),
                 "descriptors": descriptors, "origins": tuple(origins)})
