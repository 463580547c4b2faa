"""Request framing the serve probe found lax: Host headers, bad percent-escapes, an empty charset."""
from __future__ import annotations

import socket

import pytest

from serving_fixtures import served, small_index, tiny_index  # noqa: F401 - fixtures


def raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


@pytest.mark.parametrize("hosts, said", [(b"", b"no Host header"), (b"Host: a\r\nHost: b\r\n", b"2 Host headers")])
def test_an_http_1_1_request_without_exactly_one_host_header_is_a_400(served, hosts, said):
    """RFC 9112 section 3.2: a server must answer 400 to an HTTP/1.1 request lacking a Host header or with more than
    one; both were served."""
    reply = raw(served.port, b"GET /health HTTP/1.1\r\n%sConnection: close\r\n\r\n" % hosts)
    assert reply.startswith(b"HTTP/1.1 400 ") and said in reply, reply


def test_an_http_1_0_request_without_a_host_is_served(served):
    assert raw(served.port, b"GET /health HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 ")
