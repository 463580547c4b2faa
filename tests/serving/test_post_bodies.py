"""POST bodies found wanting by probe round 8: compressed ones, and ones with thousands of problems."""
from __future__ import annotations

import gzip
import json
import socket

import pytest

from serving_fixtures import call, served  # noqa: F401 - fixtures

BODY = b'{"queries": ["cat"], "k": 2}'


@pytest.mark.parametrize("coding, body", [("gzip", gzip.compress(BODY)), ("GZIP", gzip.compress(BODY)),
                                          ("br", BODY), ("deflate, gzip", BODY)])
def test_a_compressed_body_is_a_415_naming_its_encoding(served, coding, body):
    """A gzip body got 400 "malformed JSON: 'utf-8' codec can't decode byte 0x8b in position 1", and one labelled
    compressed but sent plain was searched."""
    reply = call(served.port, "POST", "/search", body, {"Content-Type": "application/json",
                                                       "Content-Encoding": coding})
    assert reply.status == 415, reply.body
    assert reply.json()["error"] == (f"the body is sent with content-encoding {coding.lower()}, which the server does "
                                     "not undo; send it uncompressed")


def test_an_identity_encoding_is_read_as_it_is(served):
    reply = call(served.port, "POST", "/search", BODY, {"Content-Type": "application/json",
                                                       "Content-Encoding": "identity"})
    assert reply.status == 200 and reply.json()["k"] == 2


@pytest.mark.parametrize("body, first, more", [
    ({"queries": [1] * 1500}, "queries.0: Input should be a valid string", 1495),  # within the test's 4 KB
    ({"queries": ["cat"], **{f"x{i}": 0 for i in range(350)}}, "x0: Extra inputs are not permitted", 345),
])
def test_a_body_with_thousands_of_problems_gets_a_short_message(served, body, first, more):
    """120 KB of ``[1, 1, ...]`` got a 2.8 MB error naming every item (5.6 MB at the default body limit), 23 times
    the request, outside --max-response-bytes and written in one piece on the event loop."""
    raw = json.dumps(body, separators=(",", ":")).encode()
    reply = call(served.port, "POST", "/search", raw, {"Content-Type": "application/json"})
    assert reply.status == 400 and len(reply.body) < 1000, len(reply.body)
    message = reply.json()["error"]
    assert message.startswith(first + "; ") and message.endswith(f"; and {more} more problems like these")
    assert message.count(";") == 5


@pytest.mark.parametrize("body", [b"", b"  \r\n"])
def test_a_post_without_a_body_says_so(served, body):
    """``curl -X POST URL`` got "malformed JSON: Expecting value: line 1 column 1 (char 0)"."""
    reply = call(served.port, "POST", "/search", body, {"Content-Type": "application/json"})
    assert reply.status == 400 and reply.json()["error"].startswith("the body is empty"), reply.body


def test_an_http_1_0_post_without_a_length_says_its_body_was_not_read(served):
    """Without a Content-Length the server cannot tell where an HTTP/1.0 body ends, so it reads none; the client was
    told its JSON was malformed."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(b'POST /search HTTP/1.0\r\nContent-Type: application/json\r\n\r\n{"queries": ["cat"]}')
        sock.shutdown(socket.SHUT_WR)
        reply = b"".join(iter(lambda: sock.recv(65536), b""))
    assert reply.startswith(b"HTTP/1.1 400 ") and b"the body is empty" in reply and b"Content-Length" in reply, reply


def test_a_long_name_a_client_sends_is_cut_short_in_the_error(served):
    """Names a client sends are echoed in the 400: a body with a 200,000-character unknown key got a 200 KB error line
    (5 such keys were as long as the body allows), a GET with a 20,000-character parameter name a 20 KB one."""
    name = "x" * 3000
    reply = served.post_json("/search", {"queries": ["cat"], name: 1})
    assert reply.status == 400 and len(reply.body) < 200, reply.body[:300]
    said = reply.json()["error"]
    assert said.startswith("xxxxx") and "extra inputs are not permitted" in said.lower(), said
    reply = served.get(f"/search?q=cat&{name}=1")
    assert reply.status == 400 and len(reply.body) < 250, reply.body[:300]
    reply = served.get(f"/search?q=cat&k=1_{'0' * 3000}")
    assert reply.status == 400 and len(reply.body) < 200, reply.body[:300]
    twice = name[:1900].encode()
    reply = call(served.port, "POST", "/search", b'{"queries": ["cat"], "%s": 1, "%s": 2}' % (twice, twice),
                 {"Content-Type": "application/json"})
    assert reply.status == 400 and len(reply.body) < 200 and b"given 2 times" in reply.body, reply.body[:300]
    assert len(served.get(f"/info?{name}=1").body) < 300


@pytest.mark.parametrize("headers, sent", [({"Content-Type": "application/x-www-form-urlencoded"},
                                            "the body is sent as application/x-www-form-urlencoded"),
                                           ({"Content-Type": "text/plain; charset=utf-8"}, "the body is sent as text/plain"),
                                           ({}, "the body is sent without a Content-Type")])
def test_a_body_of_another_media_type_is_a_415_saying_what_it_was_sent_as(served, headers, sent):
    """`curl -d '{"queries": ["cat"]}' URL` (curl labels -d bodies application/x-www-form-urlencoded) got only "send the
    body as application/json", not what it was sent as or which header to set."""
    reply = call(served.port, "POST", "/search", b'{"queries": ["cat"]}', headers)
    assert reply.status == 415 and reply.json()["error"] == (
        f"{sent}; send JSON with the header Content-Type: application/json (curl -H 'Content-Type: application/json'), "
        "or a JSON type of the form application/NAME+json")


@pytest.mark.parametrize("media_type", ["application/vnd.api+json", "Application/Problem+JSON; charset=utf-8",
                                        "application/merge-patch+json"])
def test_a_json_type_with_the_json_suffix_is_read_as_json(served, media_type):
    """RFC 6839's +json suffix says the body is JSON; application/vnd.api+json (JSON:API clients send it) was a 415."""
    reply = call(served.port, "POST", "/search", BODY, {"Content-Type": media_type})
    assert reply.status == 200 and reply.json()["k"] == 2, reply.body


def test_an_optional_field_given_as_null_takes_its_default(served):
    """`"mode": null` took the server's mode while `"k": null` was a 400 "k: Input should be a valid integer": one rule
    now, as a client serialising its unset options (Python's None) sends them. The required queries stay required."""
    reply = served.post_json("/search", {"queries": ["cat"], "k": None, "mode": None})
    assert reply.status == 200, reply.body
    assert reply.json()["k"] == 10 and reply.json()["mode"] == "dense" and len(reply.json()["results"][0]["hits"]) == 10
    reply = served.post_json("/search", {"queries": None})
    assert reply.status == 400 and reply.json()["error"] == "queries: Input should be a valid list"
