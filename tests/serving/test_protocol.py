"""The request deadline: connections that never deliver a whole request are closed; served ones are not cut."""
from __future__ import annotations

import asyncio
import socket
import time

import pytest
from fastapi import FastAPI, Request

from retriever.serving.protocol import request_deadline_protocol
from serving_fixtures import ServerThread, call

TIMEOUT = 0.5


@pytest.fixture(scope="module")
def port():
    app = FastAPI()

    @app.get("/slow")
    async def slow() -> dict:
        await asyncio.sleep(3 * TIMEOUT)  # longer than the deadline: the response must still arrive
        return {"ok": True}

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        return {"length": len(await request.body())}

    server = ServerThread(app, http=request_deadline_protocol(TIMEOUT), timeout_keep_alive=5).start()
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
