"""A malformed request's 400 message, from the parser's own error (the server-level tests are in test_protocol)."""
from __future__ import annotations

import httptools
import pytest

from retriever.serving.malformed import refusal


class _Callbacks:
    def on_headers_complete(self) -> None:
        pass


def parser_error(request_bytes: bytes) -> Exception:
    try:
        httptools.HttpRequestParser(_Callbacks()).feed_data(request_bytes)
    except httptools.HttpParserError as error:
        return error
    raise AssertionError("the parser took it")


@pytest.mark.parametrize(("request_bytes", "said"), [
    (b"GET /search?q=caf\xc3\xa9 HTTP/1.1\r\n\r\n", "must be percent-encoded"),
    (b"GET /search?q=a b HTTP/1.1\r\n\r\n", "not METHOD ADDRESS HTTP/1.1"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "(duplicate Content-Length)"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "(invalid character in chunk size)"),
    (b"GET / HTTP/1.2\r\n\r\n", "(invalid HTTP version)"),
    (b"?q HTTP/1.1\r\n\r\n", "begins the request"),
], ids=["utf8-address", "space", "two-lengths", "chunk-size", "version", "no-method"])
def test_the_message_names_what_is_malformed(request_bytes, said):
    message = refusal(parser_error(request_bytes))
    assert message.startswith("malformed HTTP request") and said in message


def test_an_address_the_server_cannot_parse_is_named_not_the_callback():
    class Parsing(_Callbacks):
        def on_headers_complete(self) -> None:
            httptools.parse_url(b"http://[::1/search")  # as uvicorn does once the head is in

    try:
        httptools.HttpRequestParser(Parsing()).feed_data(b"GET http://[::1/search HTTP/1.1\r\n\r\n")
    except httptools.HttpParserError as error:
        assert refusal(error) == "malformed HTTP request (the address is not a valid URL)"
    else:
        raise AssertionError("the parser took it")


def host_checked_reply(headers: list[tuple[bytes, bytes]], version: str = "1.1") -> tuple[int, bytes]:
    """The status and body ``HostChecked`` answers a request of these headers with (200: passed to the app)."""
    import asyncio

    from retriever.serving.malformed import HostChecked

    sent: list[dict] = []

    async def app(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "http_version": version, "method": "GET", "path": "/health", "headers": headers}
    asyncio.run(HostChecked(app)(scope, None, send))
    return sent[0]["status"], sent[1]["body"]


@pytest.mark.parametrize("host", [b"a b", b"a\tb", b"x/y", b"x@y", b"caf\xc3\xa9.example", b"[::1", b"x:80a",
                                  b"%zz", b"a:b:c", b"[]"])
@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_a_host_header_that_is_no_host_and_port_is_a_400(host, version):
    """RFC 9110 section 7.2: a request (of any version) whose Host header's value is invalid gets a 400, as a missing or
    doubled one does; `Host: a b` (a space inside) was served."""
    status, body = host_checked_reply([(b"host", host)], version)
    assert status == 400, host
    assert body.startswith(b'{"error": "malformed HTTP request (the Host header ') and b"host name" in body, body


@pytest.mark.parametrize("host", [b"localhost", b"127.0.0.1:8000", b"[::1]:8000", b"[::1]", b"xn--caf-dma.example",
                                  b"search.example.com.", b"", b"a-b_c~d%41:", b"[v1.fe80::1]"])
def test_a_host_header_of_a_name_or_address_and_a_port_is_served(host):
    assert host_checked_reply([(b"host", host)]) == (200, b"")


def test_two_host_headers_are_a_400_in_http_1_0_too():
    """RFC 9110 section 7.2 asks a 400 of any request with more than one Host line; an HTTP/1.0 one was served."""
    status, body = host_checked_reply([(b"host", b"a"), (b"host", b"b")], "1.0")
    assert status == 400 and b"2 Host headers" in body, body
    assert host_checked_reply([], "1.0") == (200, b"")
