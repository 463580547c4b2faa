"""Fixtures for the serving tests: a real uvicorn server on a free port, over tiny_index and small_index
(tests/fixtures_indexes.py, which tests/test_shared_encoders.py shares).

This is not a ``conftest.py`` on purpose: tests/ has no ``__init__.py``, so a second
``conftest`` module would replace the root one in ``sys.modules``. Test modules import
these fixtures by name instead. The servers are started once per session (the
fixtures they start from are per-test, so they are cached here) and stopped at exit.
"""
from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

from fixtures_indexes import build_flat_index
from retriever.searching import Searcher
from retriever.serving import BatchSettings, Limits, create_app
from retriever.serving.protocol import guarded_protocol

LIMITS = Limits(max_query_chars=200, max_body_bytes=4096, max_queries=16)
BATCHING = BatchSettings(max_batch=64, max_wait_ms=15.0)
_CACHE: dict[str, object] = {}


class ServerThread:
    """uvicorn on an already-bound socket in a daemon thread, so the port is known and race-free."""

    def __init__(self, app, **config_options) -> None:
        # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on sockets whose proto says TCP, and
        # without it each response waits ~40 ms for the client's delayed ACK.
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                                    **config_options))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def start(self, timeout: float = 60.0) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()


@dataclass
class Reply:
    status: int
    headers: dict
    body: bytes

    def json(self):
        return json.loads(self.body)


def call(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
         chunked: bool = False, timeout: float = 30.0) -> Reply:
    """One request on a fresh connection with only the standard library."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if chunked:
            connection.request(method, path, body=iter([body]), headers=headers or {}, encode_chunked=True)
        else:
            connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


def raw_reply(port: int, request: bytes) -> bytes:
    """Everything the server sends back for the raw bytes ``request`` on a connection of its own, until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


@dataclass
class Served:
    """The running test server: ``tiny`` (default, 12 docs) and ``small`` (the first 6 docs)."""

    port: int
    index: Path
    small_index: Path
    searchers: dict[str, Searcher]
    forward_passes: list[int] = field(default_factory=lambda: [0])

    def get(self, path: str, **kwargs) -> Reply:
        return call(self.port, "GET", path, **kwargs)

    def post_json(self, path: str, payload: object) -> Reply:
        return call(self.port, "POST", path, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@pytest.fixture()
def served(tiny_index, small_index, request) -> Served:
    """A real server on 127.0.0.1 (shared by the session), counting encoder forward passes."""
    if "served" not in _CACHE:
        searchers = {"tiny": Searcher(tiny_index, device="cpu", dtype="fp32"),
                     "small": Searcher(small_index, device="cpu", dtype="fp32")}
        passes = [0]
        encode = searchers["tiny"].encoder.encode_queries

        def counting_encode(texts, *args, **kwargs):
            passes[0] += 1
            return encode(texts, *args, **kwargs)

        searchers["tiny"].encoder.encode_queries = counting_encode
        server = ServerThread(create_app(searchers, LIMITS, BATCHING)).start()
        request.config.add_cleanup(server.stop)
        _CACHE["served"] = Served(server.port, tiny_index, small_index, searchers, passes)
    return _CACHE["served"]


SHORT_QUERY_TOKENS = 8


@pytest.fixture()
def short_query_server(tiny_beir, tiny_model_dir, tmp_path_factory, request) -> tuple[int, Searcher]:
    """A server over the tiny corpus indexed with a query max length of ``SHORT_QUERY_TOKENS``, so that queries
    within the character limit are cut; built once."""
    if "short_query_server" not in _CACHE:
        folder = build_flat_index(tiny_beir, tmp_path_factory.mktemp("serving-short") / "short", tiny_model_dir,
                                  query_max_length=SHORT_QUERY_TOKENS)
        searcher = Searcher(folder, device="cpu", dtype="fp32")
        server = ServerThread(create_app({"short": searcher}, LIMITS, BATCHING)).start()
        request.config.add_cleanup(server.stop)
        _CACHE["short_query_server"] = (server.port, searcher)
    return _CACHE["short_query_server"]


GUARDED_TIMEOUT = 0.5
BIG = 8 * 1024 * 1024  # more than the kernel's socket buffers hold, so the rest waits in the server
POST_HEAD = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture(scope="module")
def port():
    """A guarded-protocol server (request timeout ``GUARDED_TIMEOUT``) for the tests of bodies, reads and closes: it
    echoes a body's length, refuses one unread (``/refuse``, ``/limited``), answers slowly or with ``BIG`` bytes."""
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        return {"length": len(await request.body())}

    @app.post("/refuse")
    async def refuse() -> Response:  # answers before reading the body, as a 413 or 415 does
        return Response(b"no", status_code=415)

    @app.post("/limited")
    async def limited() -> Response:  # refuses the body unread and closes, as a 413 does
        return Response(b"x" * BIG, status_code=413, headers={"connection": "close"})

    @app.api_route("/slow", methods=["GET", "POST"])
    async def slow(wait: float = 0.3) -> dict:  # still being answered when the request pipelined behind it comes in
        await asyncio.sleep(wait)
        return {"ok": True}

    @app.get("/big")
    async def big() -> Response:
        return Response(b"x" * BIG, media_type="application/octet-stream")

    server = ServerThread(app, http=guarded_protocol(GUARDED_TIMEOUT), timeout_keep_alive=5).start()
    yield server.port
    server.stop()


def big_request(port: int, window: int, request: bytes = b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                ) -> socket.socket:
    """A connection to ``port`` whose receive window is ``window`` bytes, ``request`` sent."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    return sock
