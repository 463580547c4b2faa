"""Protocol faults of bodies and reads: a malformed chunked body, a refused 100-continue, a refusal pipelined behind
a request still being answered (a client that never reads its response: test_slow_readers.py; a close while the
client still sends: test_lingering.py)."""
from __future__ import annotations

import re
import socket
import time

import pytest

from serving_fixtures import POST_HEAD, port  # noqa: F401 - fixture
from serving_fixtures import GUARDED_TIMEOUT as TIMEOUT


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
