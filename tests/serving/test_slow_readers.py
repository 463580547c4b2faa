"""Dropping a client that reads none of its response (``retriever.serving.slow_readers``), through the guarded
protocol it is part of: a slow but steady reader still gets the whole response."""
from __future__ import annotations

import socket
import time

from serving_fixtures import BIG, big_request, port  # noqa: F401 - fixture
from serving_fixtures import GUARDED_TIMEOUT as TIMEOUT


def read_all(sock: socket.socket, piece: int = 1 << 20, pause: float = 0.0) -> int:
    sock.settimeout(5)
    total = 0
    try:
        while chunk := sock.recv(piece):
            total += len(chunk)
            time.sleep(pause)
    except (socket.timeout, ConnectionResetError):
        pass
    return total


def test_a_client_that_reads_none_of_its_response_is_dropped_and_a_slow_reader_is_not(port):
    """A client that sent a small request and never read the answer kept its connection, and the server the
    unsent part of the response, for ever (with defaults, ~8 MiB per connection; a keep-alive timeout's close
    waits for the data to be sent). One that reads slowly but steadily still gets the whole response."""
    with big_request(port, 4096) as stalled:
        time.sleep(4 * TIMEOUT)
        assert read_all(stalled) < BIG
    with big_request(port, 256 * 1024) as slow:  # ~4 MB/s: the server's buffers take seconds to drain
        started = time.monotonic()
        received = read_all(slow, piece=256 * 1024, pause=TIMEOUT / 8)
    assert received > BIG and time.monotonic() - started > 4 * TIMEOUT
