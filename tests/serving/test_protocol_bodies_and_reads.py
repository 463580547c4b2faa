"""Protocol faults of bodies and reads: a malformed chunked body, a refused 100-continue, a client that never reads
its response, a refusal pipelined behind a request still being answered."""
from __future__ import annotations

import asyncio
import re
import socket
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response

from retriever.serving.protocol import guarded_protocol
from serving_fixtures import ServerThread

TIMEOUT = 0.5
BIG = 8 * 1024 * 1024  # more than the kernel's socket buffers hold, so the rest waits in the server
POST_HEAD = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture(scope="module")
def port():
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        return {"length": len(await request.body())}

    @app.post("/refuse")
    async def refuse() -> Response:  # answers before reading the body, as a 413 or 415 does
        return Response(b"no", status_code=415)

    @app.post("/limited")
    async def limited() -> Response:  # refuses the body unread and closes, as a 413 does
        return Response(b"x" * BIG, status_code=413, headers={"connection": "close"})

    @app.api_route("/slow", methods=["GET", "POST"])
    async def slow(wait: float = 0.3) -> dict:  # still being answered when the request pipelined behind it comes in
        await asyncio.sleep(wait)
        return {"ok": True}

    @app.get("/big")
    async def big() -> Response:
        return Response(b"x" * BIG, media_type="application/octet-stream")

    server = ServerThread(app, http=guarded_protocol(TIMEOUT), timeout_keep_alive=5).start()
    yield server.port
    server.stop()


def exchange(port: int, data: bytes, wait: float = 5.0) -> tuple[bytes, float]:
    """What the server sends back until it closes the connection (or ``wait`` passes), and how long that took."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    return received, time.monotonic() - started


@pytest.mark.parametrize("before", [b"", b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"])
@pytest.mark.parametrize(("body", "said"), [(b"zz\r\n", b"invalid character in chunk size"),
                                            (b"2\r\nabXX0\r\n\r\n", b"expected LF after chunk data")])
def test_a_malformed_chunked_body_gets_a_json_400_at_once(port, before, body, said):
    """The request whose body the parser failed on waited for the rest of its body until the request timeout, then
    the connection was closed without any reply (uvicorn alone answers 400 at once); a request before it on the
    same connection is still answered first."""
    received, took = exchange(port, before + POST_HEAD + body, wait=10 * TIMEOUT)
    assert took < TIMEOUT, received
    assert received.endswith(b'{"error": "malformed HTTP request (%s)"}' % said), received
    assert received.count(b"HTTP/1.1 ") == (2 if before else 1), received
    if before:
        assert received.startswith(b"HTTP/1.1 200 ") and b'{"length":2}' in received


def read_all(sock: socket.socket, piece: int = 1 << 20, pause: float = 0.0) -> int:
    sock.settimeout(5)
    total = 0
    try:
        while chunk := sock.recv(piece):
            total += len(chunk)
            time.sleep(pause)
    except (socket.timeout, ConnectionResetError):
        pass
    return total


def big_request(port: int, window: int, request: bytes = b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                ) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def test_a_client_that_reads_none_of_its_response_is_dropped_and_a_slow_reader_is_not(port):
    """A client that sent a small request and never read the answer kept its connection, and the server the
    unsent part of the response, for ever (with defaults, ~8 MiB per connection; a keep-alive timeout's close
    waits for the data to be sent). One that reads slowly but steadily still gets the whole response."""
    with big_request(port, 4096) as stalled:
        time.sleep(4 * TIMEOUT)
        assert read_all(stalled) < BIG
    with big_request(port, 256 * 1024) as slow:  # ~4 MB/s: the server's buffers take seconds to drain
        started = time.monotonic()
        received = read_all(slow, piece=256 * 1024, pause=TIMEOUT / 8)
    assert received > BIG and time.monotonic() - started > 4 * TIMEOUT


def head_of_reply(sock: socket.socket) -> bytes:
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(65536)
    return reply


def test_a_request_answered_before_the_body_its_client_awaits_100_continue_for_closes_the_connection(port):
    """Refused before any 100 Continue, the client may well never send that body; the server waited for it on a
    kept-alive connection, so the client's next request was read as the body (its first Content-Length bytes) and the
    rest as a malformed request: the two lost, or another request than the one sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nExpect: 100-continue\r\n\r\n")
        reply = head_of_reply(sock)
        assert reply.startswith(b"HTTP/1.1 415 ") and b"connection: close" in reply.lower(), reply
        while sock.recv(65536):
            pass  # the server closes; a timeout here fails the test


def test_a_100_continue_followed_by_its_body_keeps_the_connection(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        assert head_of_reply(sock).startswith(b"HTTP/1.1 100 ")
        sock.sendall(b"ab")
        reply = head_of_reply(sock)
        assert reply.startswith(b"HTTP/1.1 200 ") and b"connection: close" not in reply.lower(), reply
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        time.sleep(0.2)
        assert b'{"length":3}' in sock.recv(65536)


def test_a_response_closing_the_connection_while_its_body_comes_is_read_whole_before_the_close(port):
    """Closed at once after a 413, the body bytes still arriving met a socket the server no longer read, and closing
    it with them unread reset the connection, throwing away the response the kernel had not sent yet: a client still
    sending got "connection reset" and not (all of) the 413. The server now shuts its sending side and drops what
    more comes until the client closes (or the request timeout)."""
    with big_request(port, 4096, b"POST /limited HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n") as sock:
        time.sleep(0.2)  # the 413 is being sent meanwhile
        sock.sendall(b"x" * 100_000)  # a client still sending the body it was refused
        time.sleep(0.2)
        reply = b""
        while chunk := sock.recv(1 << 20):  # a reset fails the test
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413 ") and reply.endswith(b"x" * BIG), len(reply)


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4_000_000 + b"\r\n\r\n", b"431"),
    (POST_HEAD + b"zz\r\n" + b"a" * 4_000_000, b"400")])
def test_a_refusal_while_the_client_still_sends_is_read_before_the_close(port, request_bytes, status):
    """The protocol's own 431 (a head over the cap) and 400 (a malformed request) closed the connection at once, with
    the rest of the request still arriving: the kernel reset it, and a client that sends its whole request before
    reading (http.client, most libraries) got "connection reset" and never the refusal. They close lingering now."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request_bytes)  # a reset fails the test
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 " + status + b" ") and b'{"error":' in reply, reply[:200]



SLOW = b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
OVERSIZED = b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000
HEAD_SAID = b"431 Request Header Fields Too Large", b"are over 32768 bytes, the server's --max-head-bytes"


@pytest.mark.parametrize(("before", "after", "pause", "said"), [
    (SLOW, OVERSIZED + b"\r\n\r\n", 0.0, HEAD_SAID),  # a whole head, in the same read: it was served (a 200)
    (SLOW, OVERSIZED, 0.0, HEAD_SAID),  # never finished: it was not counted, and the deadline closed without a 431
    (SLOW, OVERSIZED, 0.1, HEAD_SAID),  # sent while the first is answered: the 431 came first, its 200 never
    (b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", OVERSIZED + b"\r\n\r\n", 0.0, HEAD_SAID),
    (b"POST /slow HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
     OVERSIZED + b"\r\n\r\n", 0.0, HEAD_SAID),
    (b"POST /slow HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n190\r\n" + b"\r\n" * 200 + b"\r\n0\r\n\r\n",
     OVERSIZED + b"\r\n\r\n", 0.0, HEAD_SAID),  # over 64 blank lines in the body: the head was counted from the next read
    (SLOW, POST_HEAD + b"5;" + b"e" * 100_000, 0.0, (b"431 ", b"chunk extensions or trailer fields are over")),
    (b"GET /slow?wait=1.0 HTTP/1.1\r\nHost: x\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: z\r\n\r\n", 0.0,
     (b"400 Bad Request", b"malformed HTTP request")),  # answered past the request timeout: it was cut off at it
], ids=["whole-head", "unfinished-head", "head-sent-later", "after-a-body", "after-a-chunked-body",
        "after-a-body-of-blank-lines",
        "chunk-extension", "400-past-the-timeout"])
def test_a_refusal_pipelined_behind_a_request_comes_after_its_response(port, before, after, pause, said):
    """A 431 (a head, chunk extensions or trailers over the cap) pipelined on a keep-alive connection behind a request
    still being answered was written at once and the connection closed: that request's response was lost. The client
    now reads the responses before it whole, then the refusal, then the close, as for a malformed request's 400."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(before + (b"" if pause else after))
        if pause:
            time.sleep(pause)
            sock.sendall(after)
        received = b""
        while chunk := sock.recv(65536):  # a reset or a timeout fails the test
            received += chunk
    assert re.findall(rb"HTTP/1\.1 \d+", received) == [b"HTTP/1.1 200", b"HTTP/1.1 " + said[0][:3]], received
    assert received.index(b'{"ok":true}') < received.index(b"HTTP/1.1 " + said[0]) < received.index(said[1]), received
