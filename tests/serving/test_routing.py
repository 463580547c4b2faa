"""Requests the routes do not meet as Starlette would answer them: here, `OPTIONS *` (the server as a whole)."""
from __future__ import annotations

from serving_fixtures import call, raw_reply, served  # noqa: F401 - fixtures


def test_options_asterisk_is_answered_for_the_server_as_a_whole(served):
    """RFC 9110 section 9.3.7: `OPTIONS *` asks about the server in general (a ping, or what it supports); it got a
    404 `no route at *` listing the routes. A path's OPTIONS is still a 405 naming that path's methods."""
    reply = raw_reply(served.port, b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").decode()
    head, _, body = reply.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200 "), reply
    assert "\r\nallow: GET, HEAD, POST\r\n" in head and "\r\ncontent-length: 0\r\n" in head and body == "", reply
    reply = raw_reply(served.port, b"OPTIONS /search HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").decode()
    assert reply.startswith("HTTP/1.1 405 ") and "\r\nallow: GET, HEAD, POST\r\n" in reply, reply
    reply = raw_reply(served.port, b"OPTIONS * HTTP/1.1\r\nConnection: close\r\n\r\n").decode()
    assert reply.startswith("HTTP/1.1 400 ") and "no Host header" in reply, reply


def test_an_asterisk_target_with_a_method_other_than_options_is_a_400(served):
    """RFC 9110 section 7.1: the asterisk form is only for OPTIONS, so `GET *` is a malformed request, not a missing
    resource; it was a 404 `no route at *` listing the routes."""
    for method in (b"GET", b"POST", b"HEAD"):
        reply = raw_reply(served.port, b"%s * HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" % method).decode()
        assert reply.startswith("HTTP/1.1 400 ") and "connection: close" in reply, reply
        if method != b"HEAD":
            assert '"malformed HTTP request (the target * (the server as a whole) is asked only with OPTIONS, ' in reply


def test_a_path_is_named_as_the_client_sent_it(served):
    """uvicorn decodes the path it routes on, so the 404 for ``/indexes/a%2Fb/search`` named ``/indexes/a/b/search``,
    a path the client never sent, and a 405 or a refused parameter named an escaped name decoded."""
    reply = served.get("/indexes/a%2Fb/search?q=cat")
    assert reply.status == 404 and reply.json()["error"].startswith("no route at /indexes/a%2Fb/search; the routes are")
    reply = call(served.port, "DELETE", "/indexes/%73mall/search")
    assert reply.status == 405 and reply.json()["error"] == "/indexes/%73mall/search takes GET, HEAD, POST, not DELETE"
    reply = served.get("/indexes/%73mall/info?x=1")
    assert reply.status == 400 and reply.json()["error"].startswith("GET /indexes/%73mall/info takes no parameters")


def test_the_methods_the_server_names_as_a_whole_are_those_its_routes_take(served):
    """`OPTIONS *`, CORS and the parser's refusals name ``cors.ALLOWED_METHODS``; `OPTIONS *` worked them out from the
    routes while the others wrote them by hand. One constant now, checked here against the routes."""
    from retriever.serving import create_app
    from retriever.serving.cors import ALLOWED_METHODS
    from retriever.serving.routing import _allow, _flattened

    app = create_app(served.searchers)
    assert _allow({method for route in _flattened(app.router.routes) for method in getattr(route, "methods", None)
                   or ()}) == ALLOWED_METHODS
