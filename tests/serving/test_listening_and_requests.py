"""Serve faults found by the sixth probe round: a port taken while loading, duplicate JSON keys, the page's
URL parameters, the Allow header of a 405, a malformed pipelined request, hybrid depth in a batch, port 0."""
from __future__ import annotations

import re
import socket

import pytest
from click.testing import CliRunner

from retriever.cli import main
from fixtures_system import free_port
from serving_fixtures import call, served  # noqa: F401 - fixtures
from test_page_browser import browser  # noqa: F401 - fixture


def test_a_port_taken_while_the_indexes_load_is_an_error_not_a_silent_server(tiny_index, monkeypatch):
    """Two `serve`s started together both bind (SO_REUSEADDR, neither listening yet); the second to listen
    used to announce itself and run on, answering nothing (uvloop drops the listen error)."""
    from retriever.serving.batcher import MicroBatcher

    monkeypatch.setattr("retriever.serving.configure_threads",
                        lambda threads, workers: {"torch": 1, "workers": 1, "cores": 1})
    port, other = free_port(), []
    warm_up = MicroBatcher.warm_up

    def warm_up_while_another_server_takes_the_port(self):
        warm_up(self)
        rival = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        rival.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        rival.bind(("127.0.0.1", port))
        rival.listen()
        other.append(rival)

    def uvicorn_must_not_start(*args, **kwargs):
        raise AssertionError("uvicorn ran on a port another server listens on")

    monkeypatch.setattr(MicroBatcher, "warm_up", warm_up_while_another_server_takes_the_port)
    monkeypatch.setattr("uvicorn.Server.run", uvicorn_must_not_start)
    try:
        result = CliRunner().invoke(main, ["serve", str(tiny_index), "--port", str(port), "--device", "cpu",
                                           "--dtype", "fp32"])
    finally:
        for sock in other:
            sock.close()
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[-1] == (f"error: port {port} on 127.0.0.1 was taken by another server while "
                                              "the indexes loaded: stop it or pick another --port")
    assert "serving tiny at" not in result.output


@pytest.mark.parametrize("body, message", [
    (b'{"queries": ["cat"], "k": 3, "k": 2}', "the key 'k' is given 2 times in one JSON object; give it once"),
    (b'{"queries": ["cat"], "mode": "bm25", "mode": "dense"}', "the key 'mode' is given 2 times"),
    (b'{"queries": ["cat"], "queries": ["dog"]}', "the key 'queries' is given 2 times"),
    (b'{"queries": ["cat"], "k": 1' + b"0" * 200 + b"}", "a number in the body has 201 digits; the limit is 100"),
])
def test_a_post_body_repeating_a_key_is_refused_as_a_repeated_get_parameter_is(served, body, message):
    """json.loads kept the last value unsaid (a GET k given twice is a 400); a k of over 4,300 digits (fits the
    default 256 KiB body) got Python's advice to call sys.set_int_max_str_digits: long integers stop at 100."""
    reply = call(served.port, "POST", "/search", body, {"Content-Type": "application/json"})
    assert reply.status == 400, reply.body
    assert reply.json()["error"] == message or message in reply.json()["error"]
    assert "set_int_max_str_digits" not in reply.json()["error"]
    assert served.post_json("/search", {"queries": ["cat"], "k": 2}).json()["k"] == 2


def test_a_link_to_an_index_not_served_or_a_mode_it_lacks_says_so_on_the_page(served, browser):
    """``/?index=nope&q=cat`` showed the default index's hits; ``/?index=small&mode=bm25`` on an index without
    BM25 selected the disabled option."""
    searcher = served.searchers["small"]
    lexical, searcher.lexical = searcher.lexical, None  # "small" now offers dense only
    state = "document.body.dataset.state"
    status = "document.getElementById('status').textContent"
    try:
        browser.send("Page.navigate", {"url": served.url + "?index=nope&q=cat"})
        browser.wait_for(f"['ready', 'done', 'error'].includes({state})")
        assert browser.evaluate(state) == "error"
        assert "No index named \u201cnope\u201d is served here" in browser.evaluate(status)
        assert browser.evaluate("document.querySelectorAll('#results .hit').length") == 0
        browser.send("Page.navigate", {"url": served.url + "?index=small&mode=bm25"})
        browser.wait_for(f"['ready', 'done', 'error'].includes({state})")
        assert browser.evaluate(state) == "error"
        assert "Index small has no BM25 part, so mode bm25 cannot run" in browser.evaluate(status)
        assert browser.evaluate("document.getElementById('mode').selectedOptions[0].disabled") is False
        browser.send("Page.navigate", {"url": served.url + "?index=small&mode=dense&q=cat&k=5"})
        browser.wait_for(f"['done', 'error'].includes({state})")
        assert "5 hits from small (dense)" in browser.evaluate(status)
    finally:
        searcher.lexical = lexical


@pytest.mark.parametrize("method, path, allow", [
    ("DELETE", "/search", "GET, HEAD, POST"),
    ("OPTIONS", "/search", "GET, HEAD, POST"),
    ("PUT", "/indexes/small/search", "GET, HEAD, POST"),
    ("POST", "/health", "GET, HEAD"),
    ("OPTIONS", "/", "GET, HEAD"),
])
def test_a_405_allows_every_method_the_path_takes(served, method, path, allow):
    """Starlette named only the first route's method, so /search said ``allow: GET`` though it takes POST; the
    error said a bare "Method Not Allowed", naming neither the methods taken nor the one sent."""
    reply = call(served.port, method, path)
    assert reply.status == 405 and reply.json()["error"] == f"{path} takes {allow}, not {method}"
    assert reply.headers["allow"] == allow


def test_a_malformed_request_pipelined_after_good_ones_is_refused_after_their_responses():
    """The 400 was written and the connection closed at once, so the responses of the good requests sent before
    it on the same connection were never written."""
    import asyncio
    import socket as sockets

    from fastapi import FastAPI

    from retriever.serving.protocol import guarded_protocol
    from serving_fixtures import ServerThread

    app = FastAPI()

    @app.get("/slow")
    async def slow() -> dict:
        await asyncio.sleep(0.3)
        return {"ok": True}

    server = ServerThread(app, http=guarded_protocol(5.0)).start()
    try:
        with sockets.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /slow HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n")
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
    finally:
        server.stop()
    statuses = re.findall(rb"HTTP/1\.1 \d+", received)
    assert statuses == [b"HTTP/1.1 200", b"HTTP/1.1 200", b"HTTP/1.1 400"], received
    assert received.count(b'{"ok":true}') == 2 and b"(GET, HEAD, POST) begins the request" in received


def test_port_0_on_every_address_is_one_port():
    """``--host '' --port 0`` bound 0.0.0.0 and :: to two different random ports and announced one of them."""
    from retriever.cli.listening import listening_sockets

    bound = listening_sockets("", 0)
    try:
        ports = {sock.getsockname()[1] for sock in bound}
        if len(bound) < 2:
            pytest.skip("this machine resolves the wildcard host to one address only")
        assert len(ports) == 1 and 0 not in ports, [sock.getsockname() for sock in bound]
    finally:
        for sock in bound:
            sock.close()


@pytest.mark.parametrize("method, path, meant", [("GET", "/search/?q=cat", "/search"), ("POST", "/search/", "/search"),
                                                 ("GET", "/indexes/small/search/?q=cat", "/indexes/small/search"),
                                                 ("GET", "/health//", "/health"),
                                                 ("GET", "/indexes/sm%61ll/search/", "/indexes/sm%61ll/search")])
def test_a_path_with_a_trailing_slash_is_a_json_404_naming_the_path_without_it(served, method, path, meant):
    """It was an empty 307 to ``http://`` plus whatever the Host header said (``evil.example``), so behind a proxy it
    named another host or dropped https, and a client that does not follow redirects got no JSON. The path without
    the slash is named as sent, percent-escapes kept: it was named decoded, beside the path as sent."""
    reply = call(served.port, method, path, b'{"queries": ["cat"]}', {"Host": "evil.example",
                                                                       "Content-Type": "application/json"})
    assert reply.status == 404 and "location" not in reply.headers
    assert reply.json() == {"error": f"no route at {path.split('?')[0]}; the path is {meant}, without the slash"}


@pytest.mark.parametrize("method, path, meant", [("GET", "//search?q=cat", "/search"), ("POST", "//search", "/search"),
                                                 ("GET", "/indexes/small//search?q=cat", "/indexes/small/search"),
                                                 ("GET", "//health", "/health")])
def test_a_path_with_a_doubled_slash_is_a_404_naming_the_path(served, method, path, meant):
    """A base URL ending in a slash joined to ``/search`` (``$BASE/search``) got a bare "Not Found"."""
    reply = call(served.port, method, path, b'{"queries": ["cat"]}', {"Content-Type": "application/json"})
    assert reply.status == 404
    assert reply.json() == {"error": f"no route at {path.split('?')[0]}; the path is {meant}, without the slash"}



def test_an_escaped_slash_is_not_taken_for_a_doubled_one(served):
    """``/indexes/small%2F/search`` (an index named ``small/``) was told the path is /indexes/small/search, without
    the slash: its decoded form has a doubled slash, the path as sent none."""
    reply = call(served.port, "GET", "/indexes/small%2F/search?q=cat", b"", {})
    assert reply.status == 404 and "without the slash" not in reply.json()["error"], reply.json()

ROUTES = ("the routes are / (the search page), /health, /indexes, /info, /indexes/NAME/info, /search, "
          "/indexes/NAME/search; API docs at /docs")


@pytest.mark.parametrize("path", ["/nope/", "/indexes/small", "/indexes/small/", "/indexes/small/serch?q=cat",
                                  "/api/search?q=cat", "/Search?q=cat"])
def test_an_unknown_path_is_a_404_naming_the_routes_there_are(served, path):
    """``/indexes/small`` (the search route's start) and other near misses got a bare "Not Found"."""
    reply = call(served.port, "GET", path)
    assert reply.status == 404 and reply.json() == {"error": f"no route at {path.split('?')[0]}; {ROUTES}"}


def test_a_long_unknown_path_is_cut_short_in_the_404(served):
    error = call(served.port, "GET", "/" + "x" * 20_000).json()["error"]
    assert error == f"no route at /{'x' * 59}...; {ROUTES}"


@pytest.mark.parametrize("path, named", [("/info?index=small", "'index'"), ("/indexes?name=small", "'name'"),
                                         ("/indexes/small/info?verbose=1", "'verbose'"),
                                         ("/indexes/small/info?index=tiny&x", "'index', 'x'")])
def test_a_route_that_takes_no_parameters_refuses_them_by_name(served, path, named):
    """They were dropped unread: ``/info?index=small`` (the page's own ``?index=`` form) answered the default index's
    manifest, ``/indexes?name=small`` listed every index."""
    reply = call(served.port, "GET", path)
    assert reply.status == 400, reply.body
    assert reply.json()["error"] == (f"GET {path.split('?')[0]} takes no parameters, and was given {named}; another "
                                     "index's manifest is at /indexes/NAME/info, its search at /indexes/NAME/search")


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_health_lets_a_checker_s_cache_buster_be_and_asks_caches_not_to_store_it(served, method):
    """A liveness check refused for its cache-buster would mark a healthy server down; no-store keeps caches on the
    way from answering for it (no header was sent)."""
    for path in ("/health?_=1700000000&x", "/health"):
        reply = call(served.port, method, path)
        assert reply.status == 200, reply.body
        assert reply.headers["cache-control"] == "no-store"
    assert call(served.port, method, "/?utm_source=x&q=cat").status == 200
