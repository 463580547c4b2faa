"""Closing a connection lingering while its client still sends (``retriever.serving.lingering``), through the
guarded protocol: the response, a 413 or the protocol's own 431 and 400, is read whole before the close."""
from __future__ import annotations

import socket
import time

import pytest

from serving_fixtures import BIG, POST_HEAD, big_request, port  # noqa: F401 - fixture


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
