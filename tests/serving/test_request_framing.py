"""Request framing the serve probe found lax: Host headers, bad percent-escapes, an empty charset."""
from __future__ import annotations

import socket
import time

import pytest

from serving_fixtures import call, raw_reply, served  # noqa: F401 - fixtures


@pytest.mark.parametrize("hosts, said", [(b"", b"no Host header"), (b"Host: a\r\nHost: b\r\n", b"2 Host headers")])
def test_an_http_1_1_request_without_exactly_one_host_header_is_a_400(served, hosts, said):
    """RFC 9112 section 3.2: a server must answer 400 to an HTTP/1.1 request lacking a Host header or with more than
    one; both were served."""
    reply = raw_reply(served.port, b"GET /health HTTP/1.1\r\n%sConnection: close\r\n\r\n" % hosts)
    assert reply.startswith(b"HTTP/1.1 400 ") and said in reply, reply


def test_an_http_1_0_request_without_a_host_is_served(served):
    assert raw_reply(served.port, b"GET /health HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 ")
@pytest.mark.parametrize("query, bad", [("%zz", "%zz"), ("%", "%"), ("cat%2", "%2"), ("a%g1b", "%g1")])
def test_a_bad_percent_escape_in_a_get_query_is_a_400_naming_it(served, query, bad):
    """``q=%zz`` was searched for the three characters "%zz", where a client meant some escaped byte."""
    reply = served.get(f"/search?q={query}")
    assert reply.status == 400, reply.body
    assert reply.json()["error"] == (f"the query string holds {bad!r}, which is not a percent-escape (% and two hex "
                                     "digits); write a literal % as %25")


def test_an_empty_charset_is_a_415_saying_so(served):
    reply = call(served.port, "POST", "/search", b'{"queries": ["cat"]}', {"Content-Type": "application/json; charset="})
    assert reply.status == 415 and reply.json()["error"] == ("the body's Content-Type has an empty charset; the server "
                                                             "reads JSON as UTF-8 alone (RFC 8259): send it as UTF-8 "
                                                             "with charset=utf-8 or none"), reply.body


def test_a_503_for_too_many_waiting_requests_says_when_to_retry(tiny_index):
    """It had no ``Retry-After``, so a client could only guess how long "retry shortly" is."""
    from concurrent.futures import ThreadPoolExecutor

    from retriever.searching import Searcher
    from retriever.serving import BatchSettings, create_app
    from serving_fixtures import ServerThread

    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    encode = searcher.encoder.encode_queries

    def slow_encode(*args, **kwargs):
        time.sleep(0.3)
        return encode(*args, **kwargs)

    searcher.encoder.encode_queries = slow_encode
    server = ServerThread(create_app({"tiny": searcher}, batching=BatchSettings(max_batch=1, max_pending=1,
                                                                               warm_up=False))).start()
    try:
        with ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(lambda n: call(server.port, "GET", f"/search?q=cat+{n}&k=1"), range(6)))
    finally:
        server.stop()
    busy = [reply for reply in replies if reply.status == 503]
    assert busy and all(reply.headers.get("retry-after") == "1" for reply in busy), [r.status for r in replies]


@pytest.fixture()
def guarded_port(served, request) -> int:
    """The served indexes behind the protocol ``retriever serve`` runs (``guarded_protocol``)."""
    from retriever.serving import create_app
    from retriever.serving.protocol import guarded_protocol
    from serving_fixtures import LIMITS, ServerThread

    server = ServerThread(create_app(served.searchers, LIMITS), http=guarded_protocol(2.0)).start()
    request.addfinalizer(server.stop)
    return server.port


@pytest.mark.parametrize("sent", [0, 1000, 200_000])
def test_a_413_closes_the_connection_without_waiting_for_the_body(guarded_port, sent):
    """The connection was kept and the refused body read (and thrown away) to its end, or until --request-timeout
    closed it: a client that stopped sending waited that long, and one that went on sent megabytes for nothing."""
    with socket.create_connection(("127.0.0.1", guarded_port), timeout=10) as sock:
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 10000000\r\n\r\n")
        started = time.monotonic()
        try:
            sock.sendall(b" " * sent)
        except OSError:  # the server closed first
            pass
        reply = b""
        while chunk := sock.recv(65536):  # a socket timeout here fails the test
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413 ") and b"connection: close" in reply.lower(), reply
    assert time.monotonic() - started < 5


def test_a_413_body_holding_a_request_is_never_served_as_one(served):
    """Closing after the 413 keeps what 100-continue's fix keeps: no byte of a refused body is read as a request."""
    inner = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    body = inner * (5000 // len(inner) + 1)
    reply = raw_reply(served.port, b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                             b"%d\r\n\r\n%s" % (len(body), body))
    assert reply.startswith(b"HTTP/1.1 413 ") and reply.count(b"HTTP/1.1 ") == 1, reply


@pytest.mark.parametrize("k, said", [
    ("1" * 5000, "Input should be less than or equal to 1000"),
    ("-" + "1" * 5000, "Input should be greater than or equal to 1"),
    ("0" * 5000, "Input should be greater than or equal to 1"),
    ("1" + "0" * 4999 + "1", "Input should be less than or equal to 1000"),
], ids=["huge", "huge-negative", "zeros", "ending-in-one"])
def test_a_k_of_thousands_of_digits_gets_the_range_message(served, k, said):
    """pydantic refused a k of over 4,300 digits with "Unable to parse input string as an integer, exceeded maximum
    size", where k=1001 or k=0 says the range. Leading zeros are skipped, as pydantic skips them."""
    reply = served.get(f"/search?q=cat&k={k}")
    assert reply.status == 400 and reply.json()["error"] == f"k: {said}", reply.body
    reply = served.get(f"/search?q=cat&k={'0' * 5000}5")
    assert reply.status == 200 and len(reply.json()["hits"]) == 5, reply.body


@pytest.mark.parametrize("query, said", [
    ("query=cat", "unknown parameter 'query'; GET /search takes only q, k, mode"),
    ("Q=cat", "unknown parameter 'Q'; GET /search takes only q, k, mode"),
    ("q=cat&k=5&k=", "the parameter 'k' is given 2 times; give it once"),
    ("q=cat&k=abc&fusion=rrf", "unknown parameter 'fusion'; GET /search takes only q, k, mode"),
], ids=["query-for-q", "capital-q", "k-twice-last-blank", "unknown-and-bad-k"])
def test_a_get_parameter_not_taken_or_repeated_is_named_before_the_others_are_read(served, query, said):
    """The framework read q and k before the query string was checked: `?query=cat` (q misnamed) said only "q: Field
    required", `?k=5&k=` "k: Input should be a valid integer", naming neither the unknown parameter nor the repeat."""
    reply = served.get(f"/search?{query}")
    assert reply.status == 400 and reply.json()["error"].startswith(said), reply.body
    assert served.get(f"/indexes/small/search?{query}").json()["error"].startswith(
        said.replace("GET /search", "GET /indexes/small/search"))  # it named /search, a route not asked for
