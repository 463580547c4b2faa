"""POST requests found wanting by probe round 12: how the body is framed and labelled, parameters in the URL, and
which of several queries is refused."""
from __future__ import annotations

import gzip

import pytest

from retriever.serving.app import create_app
from retriever.serving.protocol import guarded_protocol
from serving_fixtures import ServerThread, call, raw_reply, served  # noqa: F401 - fixtures

BODY = b'{"queries": ["cat"], "k": 2}'
JSON = {"Content-Type": "application/json"}


def chunked_post(port: int, body: bytes, codings: str) -> bytes:
    return raw_reply(port, b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: "
                           b"%s\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (codings.encode(), len(body), body))


@pytest.mark.parametrize("codings, body", [("gzip, chunked", gzip.compress(BODY)), ("gzip, chunked", BODY),
                                           ("bogus, chunked", BODY), ("Deflate, Chunked", BODY)],
                         ids=["gzip", "labelled-gzip", "unknown", "capitals"])
def test_a_transfer_coding_other_than_chunked_is_a_501_naming_it(served, codings, body):
    """The chunks were undone and the rest taken as the body: a gzip one got 400 "malformed JSON: 'utf-8' codec can't
    decode byte 0x8b", and one labelled gzip but sent plain was searched."""
    reply = chunked_post(served.port, body, codings)
    assert reply.startswith(b"HTTP/1.1 501 "), reply[:200]
    assert (b'{"error": "the body is sent with transfer-encoding %s, of which the server undoes only chunked; send it '
            b'chunked alone or with a Content-Length"}' % codings.lower().encode()) in reply


def test_a_chunked_body_alone_is_read(served):
    reply = chunked_post(served.port, BODY, "chunked")
    assert reply.startswith(b"HTTP/1.1 200 ") and b'"k": 2' in reply


def test_a_content_encoding_on_a_second_header_line_is_a_415_too(served):
    """Only the first ``Content-Encoding`` line was read: ``identity`` then ``gzip`` got 400 "malformed JSON: 'utf-8'
    codec can't decode byte 0x8b" for a gzip body, and a body labelled so but sent plain was searched."""
    for body in (gzip.compress(BODY), BODY):
        reply = raw_reply(served.port, b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                       b"Content-Encoding: identity\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n"
                                       b"Connection: close\r\n\r\n%s" % (len(body), body))
        assert reply.startswith(b"HTTP/1.1 415 "), reply[:200]
        assert (b'{"error": "the body is sent with content-encoding identity, gzip, which the server does not undo; '
                b'send it uncompressed"}') in reply


@pytest.mark.parametrize("types", [(b"application/json", b"application/json; charset=latin1"),
                                   (b"application/json", b"text/plain"), (b"application/json", b"application/json")])
def test_a_body_with_two_content_type_lines_is_a_400_naming_them(served, types):
    """Only the first ``Content-Type`` line was read: ``application/json`` then ``application/json; charset=latin1``
    was read as UTF-8, its charset unread, and ``text/plain`` after JSON was searched. RFC 9110 section 8.3 makes it one
    field, and which line a client meant is a guess."""
    reply = raw_reply(served.port, b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Type: %s\r\n"
                                   b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (*types, len(BODY), BODY))
    assert reply.startswith(b"HTTP/1.1 400 "), reply[:200]
    assert (b'{"error": "the body has 2 Content-Type headers (%s, %s); send one: Content-Type: application/json"}'
            % types) in reply


@pytest.mark.parametrize("path, named", [("/search?k=1", "'k'"), ("/indexes/small/search?mode=bm25&q=dog", "'mode', 'q'"),
                                         ("/search?fusion=rrf", "'fusion'")])
def test_a_post_with_parameters_in_its_address_is_refused_naming_them(served, path, named):
    """They were dropped unread: ``POST /search?k=1`` got the default 10 hits, ``?mode=bm25`` a dense search."""
    reply = call(served.port, "POST", path, BODY, JSON)
    assert reply.status == 400, reply.body
    assert reply.json()["error"] == (f"POST takes its parameters in the JSON body, not in the address: move {named} "
                                     "into the body (queries, k, mode)")


@pytest.mark.parametrize("path", ["/search?", "/search?&"])
def test_a_post_whose_address_ends_in_an_empty_query_string_is_searched(served, path):
    assert call(served.port, "POST", path, BODY, JSON).json()["k"] == 2


@pytest.mark.parametrize("queries, error", [
    (["cat", "", "dog"], "queries.1: the query is empty (nothing but whitespace or invisible characters)"),
    (["cat", "dog", "a" * 201], "queries.2: the query is 201 characters; the limit is 200"),
    (["\u200b", "cat"], "queries.0: the query is empty (nothing but whitespace or invisible characters)"),
])
def test_a_refused_query_of_several_is_named_by_its_place(served, queries, error):
    """Among a POST's queries the refused one went unnamed ("the query is empty"), as pydantic's own errors name
    theirs (``queries.1: Input should be a valid string``)."""
    reply = served.post_json("/search", {"queries": queries, "k": 1})
    assert reply.status == 400 and reply.json()["error"] == error


@pytest.mark.parametrize("queries, place", [(["cat", "\U0001f41d"], "queries.1: "), (["\U0001f41d"], "queries.0: ")])
def test_a_query_of_no_known_word_is_named_by_its_place_as_the_other_refusals(served, queries, place):
    """It said "query 2 of 2", counting from 1, where the refusals made before batching and pydantic's say
    "queries.1"; a GET's one query needs no number."""
    reply = served.post_json("/search", {"queries": queries, "k": 1})
    assert reply.status == 400 and reply.json()["error"].startswith(f"{place}the query holds no word"), reply.body
    reply = served.get("/search?q=%F0%9F%90%9D&k=1")
    assert reply.status == 400 and reply.json()["error"].startswith("the query holds no word"), reply.body


def test_a_lone_surrogate_among_several_queries_is_named_by_its_place(served):
    reply = call(served.port, "POST", "/search", b'{"queries": ["cat", "\\ud800"]}', JSON)
    assert reply.status == 400 and reply.json()["error"].startswith("queries.1: the query has a lone surrogate U+D800")


@pytest.mark.parametrize("charset, body", [
    ("iso-8859-1", '{"queries": ["caf\u00e9"]}'.encode("latin-1")),
    ("iso-8859-1", '{"queries": ["caf\u00c3\u00a9"]}'.encode("latin-1")),  # bytes that happen to be UTF-8 "café"
    ("windows-1252", BODY), ("utf-16", '{"queries": ["cat"]}'.encode("utf-16")), ('"latin1"', BODY),
], ids=["latin-1", "latin-1-read-as-utf-8", "cp1252-ascii", "utf-16", "quoted"])
def test_a_body_in_a_charset_other_than_utf_8_is_a_415_naming_it(served, charset, body):
    """The charset was not read: a latin-1 é was a 400 "malformed JSON: 'utf-8' codec can't decode byte 0xe9", and
    latin-1 bytes that happen to be UTF-8 were searched as other text."""
    reply = call(served.port, "POST", "/search", body, {"Content-Type": f"application/json; charset={charset}"})
    assert reply.status == 415, reply.body
    assert reply.json()["error"] == (f"the body is sent as charset {charset.strip(chr(34)).lower()}; the server reads "
                                     "JSON as UTF-8 alone (RFC 8259): send it as UTF-8")


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", 'application/json;charset="UTF-8"',
                                          "application/json; charset=us-ascii", "application/json; v=1"])
def test_a_body_declared_utf_8_or_ascii_is_read(served, content_type):
    assert call(served.port, "POST", "/search", BODY, {"Content-Type": content_type}).json()["k"] == 2


TEXT = '{"queries": ["caf\u00e9"], "k": 2}'


@pytest.mark.parametrize("encoding, named", [
    ("utf-16", "UTF-16"), ("utf-16-le", "UTF-16"), ("utf-16-be", "UTF-16"),
    ("utf-32", "UTF-32"), ("utf-32-le", "UTF-32"), ("utf-32-be", "UTF-32")])
@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
def test_a_utf_16_or_32_body_is_a_415_asking_for_utf_8(served, encoding, named, content_type):
    """JSON between systems is UTF-8 (RFC 8259); json.loads guessed UTF-16 or UTF-32 from the zero bytes or the BOM
    and searched, though the request said nothing of it (or said UTF-8)."""
    reply = call(served.port, "POST", "/search", TEXT.encode(encoding), {"Content-Type": content_type})
    assert reply.status == 415, reply.body
    error = reply.json()["error"]
    assert error.startswith(f"the body is {named}") and error.endswith("send it as UTF-8"), error
    assert "\n" not in error


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
def test_a_utf_8_body_with_a_byte_order_mark_is_read_as_without_one(served, content_type):
    """RFC 8259 lets a parser ignore a UTF-8 BOM: the body is searched as it would be without it."""
    plain = call(served.port, "POST", "/search", TEXT.encode(), {"Content-Type": content_type}).json()
    marked = call(served.port, "POST", "/search", TEXT.encode("utf-8-sig"), {"Content-Type": content_type}).json()
    assert marked["results"][0]["query"] == "caf\u00e9" and marked["k"] == 2
    assert [r["hits"] for r in marked["results"]] == [r["hits"] for r in plain["results"]]


@pytest.fixture()
def guarded(served):
    """The served indexes behind the protocol ``retriever serve`` runs (the shared server runs uvicorn's own)."""
    server = ServerThread(create_app(served.searchers), http=guarded_protocol(10.0)).start()
    yield server.port
    server.stop()


@pytest.mark.parametrize("trailer", [b"Host: other", b"Content-Encoding: gzip", b"Content-Type: text/plain"])
def test_a_chunked_bodys_trailer_fields_are_not_read_as_headers(guarded, trailer):
    """Trailer fields that came in the same read as the head were added to the request's headers before the app read
    them (later ones were not): a second Host was a 400, a Content-Encoding trailer a 415, as the bytes happened to
    arrive. RFC 9110 lets a server drop trailers, which nothing here reads."""
    body = b'{"queries": ["cat"], "k": 2}'
    reply = raw_reply(guarded, b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n%s\r\n\r\n"
                      % (len(body), body, trailer))
    assert reply.startswith(b"HTTP/1.1 200 ") and b'"k": 2' in reply, reply[:300]
