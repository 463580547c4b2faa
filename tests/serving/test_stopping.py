"""What the server says as it stops (``retriever.serving.stopping``)."""
from __future__ import annotations

import logging
import threading
import time

from retriever.searching import Searcher
from retriever.serving import BatchSettings, create_app
from serving_fixtures import LIMITS, ServerThread, call, tiny_index  # noqa: F401


class Kept(logging.Handler):
    """The lines logged, each also calling ``then`` (to let held batches go once the stop has begun)."""

    def __init__(self, then) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.then = then

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        self.then()


def test_a_forced_stop_drops_the_waiting_requests_in_one_line(tiny_index):
    """A second Ctrl-C while requests waited for their batch logged "Exception in ASGI application" and a
    CancelledError traceback of about 80 lines for each of them (60 waiting requests: 4,800 lines)."""
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    gate, entered = threading.Event(), threading.Event()
    encode = searcher.encoder.encode_queries

    def held(texts, *args, **kwargs):
        entered.set()
        gate.wait(20)
        return encode(texts, *args, **kwargs)

    searcher.encoder.encode_queries = held
    app = create_app({"tiny": searcher}, LIMITS, BatchSettings(max_batch=1, warm_up=False))
    server = ServerThread(app).start()
    kept = Kept(gate.set)
    logging.getLogger("uvicorn.error").addHandler(kept)

    def client() -> None:
        try:
            call(server.port, "GET", "/search?q=cat", timeout=20)
        except OSError:  # dropped unanswered: what a forced stop does
            pass

    clients = [threading.Thread(target=client) for _ in range(4)]
    try:
        for thread in clients:
            thread.start()
        assert entered.wait(20)
        deadline = time.monotonic() + 10
        while app.state.served.batchers["tiny"]._queue.qsize() < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        server.server.force_exit = True  # as uvicorn sets it on a second Ctrl-C
        server.stop()
    finally:
        gate.set()
        logging.getLogger("uvicorn.error").removeHandler(kept)
        app.state.served.stop()
        for thread in clients:
            thread.join(20)
    text = "\n".join(kept.lines)
    assert "Traceback" not in text and "Exception in ASGI application" not in text, text
    assert len(kept.lines) == 1 and "stopped at once" in kept.lines[0], kept.lines
