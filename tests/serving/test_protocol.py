"""The request deadline: connections that never deliver a whole request are closed; served ones are not cut."""
from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest
from fastapi import FastAPI, Request

from retriever.serving.protocol import guarded_protocol
from serving_fixtures import ServerThread, call

TIMEOUT = 0.5
HEAD_LIMIT = 8 * 1024


@pytest.fixture(scope="module")
def port():
    app = FastAPI()

    @app.get("/slow")
    async def slow() -> dict:
        await asyncio.sleep(3 * TIMEOUT)  # longer than the deadline: the response must still arrive
        return {"ok": True}

    @app.get("/quick")
    async def quick() -> dict:  # a route for tests that need one answered, without /slow's wait
        return {"ok": True}

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        return {"length": len(await request.body())}

    server = ServerThread(app, http=guarded_protocol(TIMEOUT, HEAD_LIMIT), timeout_keep_alive=5).start()
    yield server.port
    server.stop()


def connect(port: int, first_bytes: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_300_half_open_connections_are_closed_while_the_server_keeps_answering(port):
    openings = [b"", b"GET /health HTTP/1.1\r\n", b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Slow: 1"]
    sockets = [connect(port, openings[i % 3]) for i in range(300)]
    try:
        started = time.monotonic()
        assert call(port, "GET", "/slow", timeout=10).status == 200
        for sock in sockets:
            sock.settimeout(max(0.1, 10 - (time.monotonic() - started)))
        assert all(closed_by_server(sock) for sock in sockets)
        assert time.monotonic() - started < 10 * TIMEOUT
    finally:
        for sock in sockets:
            sock.close()


def test_a_trickled_body_is_cut_off_but_a_prompt_one_is_read(port):
    sock = connect(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n")
    try:
        started = time.monotonic()
        while time.monotonic() - started < 4 * TIMEOUT:
            try:
                sock.sendall(b"x")
            except OSError:
                break
            time.sleep(TIMEOUT / 10)
        sock.settimeout(2)
        assert closed_by_server(sock)
    finally:
        sock.close()
    assert call(port, "POST", "/echo", b"x" * 100, {"Content-Type": "text/plain"}).json() == {"length": 100}


def test_the_deadline_restarts_for_each_request_on_a_keep_alive_connection(port):
    sock = connect(port, b"")
    try:
        for _ in range(3):
            time.sleep(TIMEOUT * 0.8)  # idle between requests is keep-alive's business, not the deadline's
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab")
            reply = sock.recv(4096)
            assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b'{"length":2}')
    finally:
        sock.close()


def read_reply(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    reply = b""
    while True:
        try:
            piece = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not piece:
            break
        reply += piece
    return reply


def reply_to(port: int, request_bytes: bytes) -> bytes:
    sock = connect(port, request_bytes)
    try:
        return read_reply(sock)
    finally:
        sock.close()


@pytest.mark.parametrize("head", [
    b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (4 * HEAD_LIMIT),   # one header, never finished
    b"GET /slow HTTP/1.1\r\nHost: x\r\n" + b"X-Many: b\r\n" * HEAD_LIMIT,    # many small ones
    b"GET /slow?q=" + b"c" * (2 * HEAD_LIMIT) + b" HTTP/1.1\r\n",            # a long URL
])
def test_a_head_over_the_cap_gets_a_json_431_and_is_closed(port, head):
    sock = connect(port, b"")
    try:
        for start in range(0, len(head), 4096):  # in pieces, as a client streaming it would
            try:
                sock.sendall(head[start:start + 4096])
            except OSError:
                break
        reply = read_reply(sock)
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.1 431 ")
    assert b'{"error": "the request line and headers are over 8192 bytes' in reply


@pytest.mark.parametrize("head", [
    b"GET /slow?q=" + b"c" * (2 * HEAD_LIMIT) + b" HTTP/1.1\r\nHost: x\r\n\r\n",     # a whole long URL
    b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (2 * HEAD_LIMIT) + b"\r\n\r\n",  # a whole big header
    b"GET /slow HTTP/1.1\r\nHost: x\n" + b"X-Big: " + b"a" * (2 * HEAD_LIMIT) + b"\n\n",  # bare LF line ends
])
def test_a_whole_head_over_the_cap_in_one_packet_gets_a_431(port, head):
    """Counted only after parsing, a head that arrived whole in one read was served (at twice the cap, a 200)."""
    reply = reply_to(port, head)
    assert reply.startswith(b"HTTP/1.1 431 ")


def streamed_reply(port: int, head: bytes, stream: bytes) -> bytes:
    """The reply to ``head`` then ``stream`` sent in 4 KiB pieces a moment apart (separate reads, as bytes streamed
    over time arrive), until the server stops taking them."""
    sock = connect(port, head)
    try:
        for start in range(0, len(stream), 4096):
            try:
                sock.sendall(stream[start:start + 4096])
            except OSError:
                break
            time.sleep(0.002)
        return read_reply(sock)
    finally:
        sock.close()


def test_a_chunked_bodys_trailer_fields_over_the_cap_get_a_431(port):
    """The fields after a chunked body's last chunk are parsed, and held, like headers; they went uncounted, so one
    client streaming a trailer field held its connection's memory growing and stalled the event loop (a search took
    7.8 s while 80 MB streamed) until the request timeout."""
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Big: "
    reply = streamed_reply(port, head, b"a" * (4 * HEAD_LIMIT) + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431 ") and b"trailer" in reply, reply


@pytest.mark.parametrize("body", [
    b"3\r\nabc\r\n0\r\nX-Big: %s\r\n\r\n" % (b"a" * (4 * HEAD_LIMIT)),  # a whole trailer field
    b"3\r\nabc\r\n1;%s\r\nd\r\n0\r\n\r\n" % (b"e" * (4 * HEAD_LIMIT)),  # a whole chunk extension
    b"3\r\nabc\r\n0\r\n%s\r\n" % b"".join(b"X-%d: 1\r\n" % i for i in range(HEAD_LIMIT // 4)),  # many short ones
], ids=["trailer", "extension", "many-trailers"])
def test_chunk_framing_over_the_cap_sent_whole_with_data_before_it_gets_a_431(port, body):
    """The run of framing since a body's last data was counted a piece at a time, and a piece that held some data was
    not counted at all: a trailer or extension over the cap that came in one read with the data before it and ended
    there was served, one sent in its own reads refused."""
    reply = reply_to(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     + body)
    assert reply.startswith(b"HTTP/1.1 431 ") and b"chunk extensions or trailer fields" in reply, reply[:300]


@pytest.mark.parametrize("sizes", [b"ffffffffffffffff\r\n", b"30000\r\n" + b"x" * 0x30000 + b"\r\n10001\r\n"],
                         ids=["one-huge-chunk", "chunks-adding-past-it"])
def test_chunk_sizes_taking_a_post_body_past_its_limit_get_a_413_at_once(port, sizes):
    """A Content-Length over --max-body-bytes got a 413 at once, but a chunk size of 2**64-1 held the request until
    --request-timeout, then closed it with no reply: the app counted the data alone, as it came."""
    started = time.monotonic()
    reply = reply_to(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + sizes)
    assert time.monotonic() - started < TIMEOUT, reply[:200]
    assert reply.startswith(b"HTTP/1.1 413 ") and b"connection: close" in reply, reply[:300]
    assert b'{"error": "the body is over the limit of 262144 bytes (its chunk sizes add up to ' in reply, reply[:300]


def test_a_chunked_body_of_many_chunks_and_a_small_trailer_is_served(port):
    chunks = b"".join(b"400\r\n%s\r\n" % (b"x" * 1024) for _ in range(4 * HEAD_LIMIT // 1024))
    sock = connect(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    try:
        for start in range(0, len(chunks), 1000):  # cut across chunk sizes and data
            sock.sendall(chunks[start:start + 1000])
            time.sleep(0.001)
        sock.sendall(b"0\r\nX-Checksum: 1\r\n\r\n")
        reply = read_reply(sock)
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b'{"length":%d}' % (4 * HEAD_LIMIT)), reply


def test_a_head_under_the_cap_with_a_large_body_in_the_same_packet_is_served(port):
    body = b"x" * (4 * HEAD_LIMIT)
    reply = reply_to(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (len(body), body))
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b'{"length":%d}' % len(body))


@pytest.mark.parametrize(("request_bytes", "said"), [
    (b"GET /slow HTTP/1.1\r\nContent-Length: -5\r\n\r\n", b"(invalid character in Content-Length)"),
    (b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab", b"(duplicate Content-Length)"),
    (b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
     b"(Transfer-Encoding can't be present with Content-Length)"),
    (b"FOO /slow HTTP/1.1\r\n\r\n", b"(no method this server answers (GET, HEAD, POST) begins the request; "
                                      b"after another request, that one's Content-Length may be short of its body)"),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"(an HTTP/2 connection preface: this server speaks HTTP/1.1)"),
], ids=["negative-length", "two-lengths", "length-and-chunked", "unknown-method", "http2-preface"])
def test_a_malformed_request_gets_a_json_400_saying_what_is_malformed(port, request_bytes, said):
    """uvicorn's 400 said "invalid http request received" whatever the fault, and warned of it in the log."""
    reply = reply_to(port, request_bytes)
    assert reply.startswith(b"HTTP/1.1 400 ") and b"application/json" in reply
    assert reply.endswith(b'{"error": "malformed HTTP request ' + said + b'"}'), reply


@pytest.mark.parametrize("target", [b"/slow?q=caf\xc3\xa9", b"/slow?q=a\x01b", b"/caf\xc3\xa9", b"/slow?q=a b"],
                         ids=["utf8-query", "control", "utf8-path", "space"])
def test_an_address_holding_a_character_to_percent_encode_is_a_400_saying_so(port, target):
    """``curl 'http://host/search?q=café'`` sends the UTF-8 bytes unencoded, and got "malformed HTTP request (invalid
    http request received)"."""
    reply = reply_to(port, b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % target)
    assert reply.startswith(b"HTTP/1.1 400 ") and b"application/json" in reply
    assert b"percent-encode" in reply and b"--data-urlencode" in reply, reply


@pytest.mark.parametrize(("target", "said"), [(b"http://[::1/slow", b"not a valid URL"),
                                              (b"?q=cat", b"a path beginning with /")])
def test_a_request_target_that_is_not_a_url_is_a_400_saying_so(port, target, said):
    reply = reply_to(port, b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % target)
    assert reply.startswith(b"HTTP/1.1 400 ") and said in reply, reply


UPGRADES = [b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
            b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"]


@pytest.mark.parametrize("request_bytes", [b"GET /quick HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + u + b"\r\n"
                                           for u in UPGRADES] + [b"GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n"],
                         ids=["websocket", "h2c", "malformed"])
def test_a_clients_upgrade_or_malformed_request_puts_no_warning_in_the_servers_log(port, request_bytes):
    """Each logged warnings: an upgrade two (the second telling the operator to install a WebSocket library, for a
    server with no WebSocket route), a malformed request "Invalid HTTP request received." (without its reason). An
    upgrade is answered as plain HTTP."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        reply = reply_to(port, request_bytes)
    finally:
        logger.removeHandler(handler)
    assert reply.startswith(b"HTTP/1.1 400 " if b"caf" in request_bytes else b"HTTP/1.1 200 "), reply
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []


def half_closed_exchange(port: int, request_bytes: bytes) -> tuple[bytes, float]:
    """What comes back to a client that sends ``request_bytes`` and then shuts its sending side (``nc -N``), until
    the server closes, and how long that took."""
    started = time.monotonic()
    sock = connect(port, request_bytes)
    sock.shutdown(socket.SHUT_WR)
    try:
        return read_reply(sock), time.monotonic() - started
    finally:
        sock.close()


@pytest.mark.parametrize("requests", [1, 3])
def test_a_client_that_half_closes_after_its_requests_gets_their_responses(port, requests):
    """A half-close says the client has sent all it will, not that it gave up on the replies; uvicorn closed the
    connection at once, and the requests in flight got no response. The first outlasts the request deadline; those
    queued behind it are quick (three slow ones took 4.5 s)."""
    reply, _ = half_closed_exchange(port, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
                                    + b"GET /quick HTTP/1.1\r\nHost: x\r\n\r\n" * (requests - 1))
    assert reply.count(b"HTTP/1.1 200 ") == requests and reply.endswith(b'{"ok":true}'), reply


def test_a_half_close_in_the_middle_of_a_body_closes_at_once(port):
    """That body can never be finished, so the request is not left waiting for the request timeout."""
    reply, took = half_closed_exchange(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    assert reply == b"" and took < TIMEOUT


def test_a_chunk_extension_streamed_without_end_gets_a_431(port):
    """A chunk's extensions (``1;name=value``) are read like a header line, and went uncounted: one streamed without
    end was bounded only by the request timeout, as trailer fields were."""
    reply = streamed_reply(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1;a",
                           b"a" * (4 * HEAD_LIMIT))
    assert reply.startswith(b"HTTP/1.1 431 ") and b"chunk extensions" in reply, reply


@pytest.mark.parametrize("trickled", [b"\r\n", b"\n"])
def test_blank_lines_trickled_after_a_response_do_not_hold_the_connection(trickled):
    """Blank lines before a request are skipped by the parser, but each cancelled the keep-alive timeout, and no
    request began to start the request deadline: a client sending one every second after a response held its
    connection (and a file descriptor) for ever, a slowloris past both limits."""
    app = FastAPI()

    @app.get("/ok")
    async def ok() -> dict:
        return {"ok": True}

    server = ServerThread(app, http=guarded_protocol(TIMEOUT, HEAD_LIMIT), timeout_keep_alive=1).start()
    try:
        sock = connect(server.port, b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        with sock:
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            try:
                while time.monotonic() - started < 4:
                    sock.sendall(trickled)
                    time.sleep(0.1)
            except OSError:  # closed by the server: a broken pipe or a reset
                pass
            assert time.monotonic() - started < 2.5
    finally:
        server.stop()


@pytest.mark.parametrize("version", [b"HTTP/2.0", b"HTTP/0.9", b"HTTP/1.2", b"HTTP/3.0"])
def test_a_request_line_of_another_http_version_is_a_505_failing_only_its_connection(port, version):
    """HTTP/2.0 and HTTP/0.9, which the parser takes, were answered as HTTP/1.1 (200); other digits were a 400
    "invalid HTTP version". A request before it on the same connection is answered first."""
    reply = reply_to(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
                           b"GET /slow %s\r\nHost: x\r\n\r\n" % version)
    first, _, second = reply.partition(b"HTTP/1.1 505 HTTP Version Not Supported\r\n")
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b'{"length":2}') and b"connection: close" in second
    said = version if version in (b"HTTP/2.0", b"HTTP/0.9") else b"its HTTP version"
    assert second.endswith(b'{"error": "the request line names %s, which this server does not speak: send the '
                           b'request as HTTP/1.1 (or HTTP/1.0)"}' % said), reply
    assert reply_to(port, b"GET /quick HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 ")


def test_a_connect_to_a_host_is_a_405_naming_the_method_after_the_requests_before_it(port):
    """``CONNECT host:443`` (a client that takes the server for its proxy) got a 400 "the address is not a valid URL",
    naming neither the method nor that the server opens no tunnels."""
    reply = reply_to(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
                           b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
    first, _, second = reply.partition(b"HTTP/1.1 405 Method Not Allowed\r\n")
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b'{"length":2}'), reply
    assert b"\r\nallow: GET, HEAD, POST\r\n" in second and b"connection: close" in second, reply
    assert second.endswith(b'{"error": "CONNECT example.com:443 asks for a tunnel, which a proxy opens, and this server '
                           b'is none: it takes GET, HEAD, POST on its own paths, such as /search"}'), reply


@pytest.mark.parametrize("target", [b"http://127.0.0.1", b"http://127.0.0.1:8000?q=cat", b"HTTP://[::1]:80"])
def test_an_absolute_address_without_a_path_is_the_root(port, target):
    """HTTP/1.1 lets a request name its target as a whole URL (``GET http://host HTTP/1.1``, as a client that thinks it
    talks to a proxy sends it), whose empty path is ``/``. uvicorn read no path there: each such request was a 400 "the
    server could not read it" and a 10-line traceback in the server's log."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    logging.getLogger("retriever").addHandler(handler)
    try:
        reply = reply_to(port, b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % target)
    finally:
        logging.getLogger("retriever").removeHandler(handler)
    assert reply.startswith(b"HTTP/1.1 404 "), reply  # the test app has no route at /
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
