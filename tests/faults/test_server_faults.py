"""Server faults against a real `retriever serve` process with its default limits.

Poisoned requests (lone surrogates) from some clients while others search; the amplification
request (256 queries x k=1000); a 5,000-deep JSON body; 300 connections that never finish
their headers. Each must fail alone, with a JSON 4xx or a closed connection, and leave no
traceback in the server's log.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fixtures_corpora import TINY_DOCS, write_jsonl
from fixtures_system import run_in_threads
from retriever.encoder import Encoder, EncoderSettings
from retriever.indexing import IndexParams, encode_and_index

REQUEST_TIMEOUT = 1.0


class Server:
    def __init__(self, port: int, process: subprocess.Popen, log: Path) -> None:
        self.port, self.process, self.log = port, process, log

    def request(self, method: str, path: str, body: bytes | None = None,
                connection: http.client.HTTPConnection | None = None) -> tuple[int, dict]:
        own = connection is None
        connection = connection or http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            assert response.getheader("content-type") == "application/json"
            return response.status, json.loads(response.read())
        finally:
            if own:
                connection.close()


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("server-faults")
    corpus = write_jsonl(root / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(corpus, root / "index", encoder, IndexParams("flat"), progress=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = root / "server.log"
    process = subprocess.Popen([sys.executable, "-m", "retriever", "serve", str(root / "index"), "--port", str(port),
                                "--device", "cpu", "--dtype", "fp32", "--threads", "1",
                                "--request-timeout", str(REQUEST_TIMEOUT)],
                               stdout=subprocess.DEVNULL, stderr=open(log, "wb"),
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    running = Server(port, process, log)
    deadline = time.monotonic() + 60
    while True:
        try:
            if running.request("GET", "/health")[0] == 200:
                break
        except OSError:
            pass
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "retriever serve did not come up"
        time.sleep(0.1)
    yield running
    process.terminate()
    process.wait(15)
    assert "Traceback" not in log.read_text(), log.read_text()


def test_poisoned_requests_fail_alone(server):
    """8 good clients and 4 sending lone surrogates, 25 requests each, all at once."""
    outcomes: dict[str, list] = {"good": [], "bad": []}
    barrier = threading.Barrier(12)

    def client(number: int, bad: bool) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        barrier.wait()
        for i in range(25):
            query = f"client {number} query {i} about honey"
            queries = [query + (" \ud800" if i % 2 else "\udfff")] if bad else [query]
            if bad and i % 3 == 0:
                queries = [query, "\ud800" + query]  # one poisoned query among good ones
            status, body = server.request("POST", "/search", json.dumps({"queries": queries, "k": 3}).encode(),
                                          connection)
            outcomes["bad" if bad else "good"].append((status, body, queries))
        connection.close()

    run_in_threads(client, [(n, n >= 8) for n in range(12)], timeout=120)
    good, bad = outcomes["good"], outcomes["bad"]
    assert len(good) == 200 and len(bad) == 100
    assert [status for status, _, _ in good] == [200] * 200
    assert all(body["results"][0]["query"] == queries[0] and len(body["results"][0]["hits"]) == 3
               for _, body, queries in good)
    assert [status for status, _, _ in bad] == [400] * 100
    assert all("lone surrogate" in body["error"] for _, body, _ in bad)


def test_amplification_and_deep_json_are_refused_up_front(server):
    started = time.perf_counter()
    status, body = server.request("POST", "/search", json.dumps({"queries": ["honey"] * 256, "k": 1000}).encode())
    assert status == 400 and "256000 hits; the limit is 2560" in body["error"]
    assert time.perf_counter() - started < 5, "refused before any encoding"
    status, body = server.request("POST", "/search", b'{"queries": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert status == 400 and "nests 5001 levels deep; the limit is 32" in body["error"]


def test_connections_that_never_finish_a_request_are_closed(server):
    openings = [b"", b"POST /search HTTP/1.1\r\n", b"GET /health HTTP/1.1\r\nHost: x\r\n",
                b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"]
    sockets = []
    try:
        for i in range(300):
            sockets.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
            sockets[-1].sendall(openings[i % len(openings)])
        assert server.request("GET", "/health")[0] == 200
        time.sleep(REQUEST_TIMEOUT * 2)
        for sock in sockets:
            sock.settimeout(5)
            try:
                assert sock.recv(1) == b"", "the server should have closed the connection"
            except ConnectionResetError:
                pass
    finally:
        for sock in sockets:
            sock.close()
    assert server.request("GET", "/health")[0] == 200
