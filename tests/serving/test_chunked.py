"""ChunkedEnd: a chunked body's end, found from its chunk sizes however its bytes are split into reads."""
from __future__ import annotations

import httptools
import pytest

from retriever.serving.chunked import ChunkedEnd

NEXT = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
BODIES = [
    b"0\r\n\r\n",
    b"5\r\nhello\r\n0\r\n\r\n",
    b"4;name=\"a;b\"\r\n\r\n\r\n\r\n000\r\n\r\n",  # data of blank lines, a quoted extension, a padded last size
    b"A\r\n0\r\n\r\n0\r\n\r\n\r\n0\r\nX-Sum: 1\r\nY: 2\r\n\r\n",  # data that looks like a last chunk; trailers
    b"1F4\r\n" + b"\r\n" * 250 + b"\r\n0\r\n\r\n",
]


def ends(body: bytes, cuts: list[int]) -> int | None:
    """Where ChunkedEnd says the body ends in ``body + NEXT`` fed in reads split at ``cuts``."""
    return followed(body, cuts)[0]


def followed(body: bytes, cuts: list[int]) -> tuple[int | None, int]:
    """Where ChunkedEnd says the body ends in ``body + NEXT`` fed in reads split at ``cuts``, and its longest run of
    framing."""
    whole, chunks, start = body + NEXT, ChunkedEnd(), 0
    for cut in cuts + [len(body + NEXT)]:
        at = chunks.end(whole[:cut], start)
        if at is not None:
            return at, chunks.longest
        start = cut
    return None, chunks.longest


def parser_end(body: bytes) -> int:
    """Where the HTTP parser itself ends the body: the shortest prefix after which it completes the message."""
    for size in range(len(body) + 1):
        done = []
        parser = httptools.HttpRequestParser(type("P", (), {"on_message_complete": lambda self: done.append(1)})())
        parser.feed_data(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body[:size])
        if done:
            return size
    raise AssertionError("the parser never completed the body")


@pytest.mark.parametrize("body", BODIES)
def test_the_end_is_where_the_parser_ends_the_body_at_every_split(body):
    """Cutting at blank lines stopped at the 64th of a read and fed the rest whole, so a head pipelined behind a body
    of more blank lines reached the parser uncounted; the chunk sizes give the end in any split."""
    assert parser_end(body) == len(body)
    for cut in range(len(body + NEXT)):
        assert ends(body, [cut]) == len(body), cut
    assert ends(body, list(range(1, len(body) + len(NEXT)))) == len(body)


def test_an_unfinished_body_has_no_end_yet():
    chunks = ChunkedEnd()
    assert chunks.end(b"5\r\nhel", 0) is None and chunks.end(b"lo\r\n0\r\n", 0) is None
    assert chunks.end(b"\r\nGET", 0) == 2



@pytest.mark.parametrize("body, longest", [
    (b"5\r\nhello\r\n0\r\n\r\n", len(b"\r\n0\r\n\r\n")),
    (b"3;ext=1\r\nabc\r\n0\r\nX-Sum: 12\r\n\r\n", len(b"\r\n0\r\nX-Sum: 12\r\n\r\n")),
    (b"1;%s\r\na\r\n0\r\n\r\n" % (b"e" * 100), len(b"1;\r\n") + 100),
])
def test_the_longest_run_of_framing_is_the_same_at_every_split(body, longest):
    """The protocol caps chunk extensions and trailers by this run: counted a read at a time, a read holding some data
    was not counted, so a whole trailer over the cap sent with the data before it was served."""
    for cut in range(len(body)):
        assert followed(body, [cut]) == (len(body), longest), cut


@pytest.mark.parametrize("body", [b"zz\r\n", b"5 \r\nhello\r\n", b"\r\n", b"5z" + b"a" * 100])
def test_a_size_line_the_parser_refuses_is_not_followed(body):
    """The parser's 400 says what is wrong; following on would read its bytes as trailers and refuse with a 431."""
    chunks = ChunkedEnd()
    assert chunks.end(body + b"a" * 100_000, 0) is None and chunks.longest < 100


@pytest.mark.parametrize("size", [b"f" * 16, b"f" * 20, b"8" + b"0" * 15])
def test_a_chunk_size_past_any_offset_is_followed_without_overflow(size):
    """A chunk of 2**63 bytes or more put the next size line past any offset a bytes search takes: OverflowError in
    the protocol's data_received, a 'Fatal error on transport' traceback in the server's log, and the connection
    closed with no reply (a size the parser refuses now gets its 400)."""
    chunks = ChunkedEnd()
    assert chunks.end(size + b"\r\nabc\r\n0\r\n\r\n", 0) is None
    assert chunks.end(b"more data", 0) is None
