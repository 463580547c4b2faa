"""`serve --allow-origin`: CORS headers for a search page on another origin, off by default, over real HTTP."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from retriever.searching import Searcher
from retriever.serving import create_app
from serving_fixtures import BATCHING, LIMITS, ServerThread, call, served  # noqa: F401

PAGE = "https://search.example"
PREFLIGHT = {"Origin": PAGE, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}


@contextmanager
def cors_server(index, origins):
    server = ServerThread(create_app({"tiny": Searcher(index, device="cpu", dtype="fp32")}, LIMITS, BATCHING,
                                     origins=origins)).start()
    try:
        yield server.port
    finally:
        server.stop()


def test_without_the_flag_no_cors_header_is_sent_and_a_preflight_is_a_405(served):
    """The default stays as it was: a page on another origin cannot read the replies."""
    reply = call(served.port, "GET", "/search?q=cat&k=2", headers={"Origin": PAGE})
    assert reply.status == 200 and not [h for h in reply.headers if h.startswith("access-control-")]
    assert "origin" not in reply.headers.get("vary", "").lower()
    preflight = call(served.port, "OPTIONS", "/search", headers=PREFLIGHT)
    assert preflight.status == 405 and preflight.headers["allow"] == "GET, HEAD, POST"
    assert not [h for h in preflight.headers if h.startswith("access-control-")]


def test_an_allowed_origin_gets_the_header_on_answers_and_errors_and_a_204_preflight(tiny_index, monkeypatch):
    """No flag let a search page on another origin call the API: the browser refused every reply."""
    with cors_server(tiny_index, (PAGE, "http://localhost:3000")) as port:
        preflight = call(port, "OPTIONS", "/indexes/tiny/search", headers=PREFLIGHT)
        assert preflight.status == 204 and preflight.body == b""
        assert preflight.headers["access-control-allow-origin"] == PAGE
        assert preflight.headers["access-control-allow-methods"] == "GET, HEAD, POST"
        assert preflight.headers["access-control-allow-headers"] == "Content-Type"
        assert preflight.headers["vary"] == "Origin"
        posted = call(port, "POST", "/search", b'{"queries": ["cat"], "k": 2}',
                      {"Origin": PAGE, "Content-Type": "application/json"})
        assert posted.status == 200 and posted.headers["access-control-allow-origin"] == PAGE
        assert "Origin" in posted.headers["vary"]
        for method, path in [("GET", "/search?q="), ("GET", "/nowhere"), ("DELETE", "/search"),
                             ("GET", "/indexes/none/search?q=cat")]:
            refused = call(port, method, path, headers={"Origin": "http://localhost:3000"})
            assert refused.status >= 400 and refused.json()["error"], (method, path)
            assert refused.headers["access-control-allow-origin"] == "http://localhost:3000", (method, path)
        monkeypatch.setattr("retriever.serving.app.summary", lambda *args: 1 / 0)  # a bug: a bare 500
        bug = call(port, "GET", "/indexes", headers={"Origin": PAGE})
        assert bug.status == 500 and bug.json() == {"error": "internal server error"}
        assert bug.headers["access-control-allow-origin"] == PAGE and bug.headers["vary"] == "Origin"


def test_another_origin_gets_no_header_and_its_preflight_is_answered_as_without_the_flag(tiny_index):
    with cors_server(tiny_index, (PAGE,)) as port:
        reply = call(port, "GET", "/search?q=cat&k=2", headers={"Origin": "https://evil.example"})
        assert reply.status == 200 and "access-control-allow-origin" not in reply.headers
        assert reply.headers["vary"] == "Origin"  # the answer depends on the Origin: caches must keep them apart
        preflight = call(port, "OPTIONS", "/search", headers={**PREFLIGHT, "Origin": "https://evil.example"})
        assert preflight.status == 405 and "access-control-allow-origin" not in preflight.headers
        plain = call(port, "OPTIONS", "/search", headers={"Origin": PAGE})  # no Access-Control-Request-Method
        assert plain.status == 405
        assert "access-control-allow-origin" not in call(port, "GET", "/health").headers


def test_a_star_allows_every_origin(tiny_index):
    with cors_server(tiny_index, ("*",)) as port:
        reply = call(port, "GET", "/search?q=cat&k=2", headers={"Origin": "https://any.example"})
        assert reply.status == 200 and reply.headers["access-control-allow-origin"] == "*"
        preflight = call(port, "OPTIONS", "/search", headers={**PREFLIGHT, "Origin": "null"})
        assert preflight.status == 204 and preflight.headers["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("origin", ["https://search.example/", "search.example", "https://a.example/page", "",
                                    "https://a.example?x", "**"])
def test_an_origin_that_no_browser_sends_is_refused(origin):
    """An origin is scheme://host[:port]: a trailing slash or a path would never match the Origin header, and the
    flag would be silently unused."""
    from retriever.errors import RetrieverError
    from retriever.serving.cors import checked_origins

    with pytest.raises(RetrieverError, match="scheme://host"):
        checked_origins([origin])
    assert checked_origins(["HTTPS://Search.Example:8443", "*"]) == ("https://search.example:8443", "*")


@pytest.mark.parametrize("origins, request_bytes, status, allowed", [
    (("*",), b"GET /" + b"x" * 2000 + b" HTTP/1.1\r\nHost: x\r\nOrigin: https://page.example\r\n\r\n", 431, "*"),
    (("https://page.example",), b"GET / HTTP/2.0\r\nHost: x\r\nOrigin: https://page.example\r\n\r\n", 505,
     "https://page.example"),
    (("https://page.example",), b"GET / HTTP/2.0\r\nHost: x\r\nOrigin: https://other.example\r\n\r\n", 505, None)])
def test_refusals_the_protocol_writes_carry_the_cors_headers(origins, request_bytes, status, allowed):
    """The app's responses carried CORS headers, the protocol layer's refusals (400, 431, 505) none: a page on an
    allowed origin sending a GET of a URL over --max-head-bytes saw a network error, not the 431 saying why."""
    from fastapi import FastAPI

    from retriever.serving.protocol import guarded_protocol
    from serving_fixtures import raw_reply

    server = ServerThread(FastAPI(), http=guarded_protocol(10, 1024, origins=origins)).start()
    try:
        reply = raw_reply(server.port, request_bytes)
    finally:
        server.stop()
    head = reply.split(b"\r\n\r\n")[0].decode().lower()
    assert head.startswith(f"http/1.1 {status} ") and "vary: origin" in head, head
    assert (f"access-control-allow-origin: {allowed}" in head) if allowed else "access-control-allow" not in head


def test_an_origin_is_kept_as_a_browser_sends_it_default_port_dropped_and_host_in_punycode():
    """`--allow-origin https://a.example:443` or `https://bücher.example` never matched: a browser's Origin leaves out
    the scheme's default port and writes an international host name in punycode, so the flag went unused without a
    word and the page got no CORS header."""
    from retriever.errors import RetrieverError
    from retriever.serving.cors import checked_origins, cross_origin_headers

    given = ["https://a.example:443", "http://b.example:80", "https://Bücher.example", "http://[::1]:80",
             "http://c.example:8080"]
    origins = checked_origins(given)
    assert origins == ("https://a.example", "http://b.example", "https://xn--bcher-kva.example", "http://[::1]",
                       "http://c.example:8080")
    assert cross_origin_headers(origins, "https://xn--bcher-kva.example")["access-control-allow-origin"] == \
        "https://xn--bcher-kva.example"
    with pytest.raises(RetrieverError, match="scheme://host"):
        checked_origins(["https://a.example:99999"])
