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
