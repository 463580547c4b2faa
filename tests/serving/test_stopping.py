"""What the server says as it stops (``retriever.serving.stopping``)."""
from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from retriever.searching import Searcher
from retriever.serving import BatchSettings, create_app
from retriever.serving.stopping import STOPPED_AT_ONCE
from serving_fixtures import LIMITS, ServerThread, call


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_a_forced_stop_drops_the_waiting_requests_in_one_line(tiny_index):
    """A second Ctrl-C while requests waited for their batch logged "Exception in ASGI application" and a
    CancelledError traceback of about 80 lines for each of them (60 waiting requests: 4,800 lines). Each of them got
    uvicorn's plain-text 500 "Internal Server Error", as if the server had a bug; it gets a JSON 503 to send again."""
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
    kept = Kept()
    logging.getLogger("uvicorn.error").addHandler(kept)

    replies = []

    def client() -> None:
        try:
            replies.append(call(server.port, "GET", "/search?q=cat", timeout=20))
        except OSError:  # the connection closed before the request was read
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
        # the held batch ends a while after the stop has cancelled the requests (within uvicorn's 0.1 s tick), as a
        # real batch would: the app's lifespan waits for it on the event loop
        threading.Timer(1.0, gate.set).start()
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
    assert len(replies) == 4 and {reply.status for reply in replies} == {503}, replies
    assert replies[0].json() == {"error": STOPPED_AT_ONCE} and replies[0].headers["connection"] == "close"


WAITING_LINES = {"SIGINT": "stopping once the 3 requests being answered are done (Ctrl-C again to drop them)",
                 "SIGTERM": "stopping on SIGTERM once the 3 requests being answered are done (a second SIGTERM drops "
                            "nothing: kill -INT {pid} drops them)",
                 "SIGHUP": "stopping on SIGHUP once the 3 requests being answered are done (a second SIGHUP drops "
                           "nothing: kill -INT {pid} drops them)"}


@pytest.mark.parametrize("stop", list(WAITING_LINES))
def test_a_stop_that_waits_for_requests_says_so(tiny_index, capsys, stop):
    """Ctrl-C (or SIGTERM) while requests waited for their batch stopped only once they were answered, which under load
    (or with a client still sending) took seconds to minutes, and nothing was said meanwhile. What drops them depends
    on the signal: uvicorn forces the stop on a second SIGINT only, so "Ctrl-C again" after a SIGTERM or SIGHUP (sent
    by a process manager, no terminal) named a step that a second such signal does not take."""
    import os
    import signal

    from retriever.serving.stopping import StoppingServer

    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    gate = threading.Event()
    encode = searcher.encoder.encode_queries
    searcher.encoder.encode_queries = lambda texts, *args, **kwargs: gate.wait(20) and encode(texts, *args, **kwargs)
    app = create_app({"tiny": searcher}, LIMITS, BatchSettings(max_batch=1, warm_up=False))
    server = ServerThread(app)
    server.server = StoppingServer(server.server.config)
    server.thread = threading.Thread(target=server.server.run, kwargs={"sockets": [server.socket]}, daemon=True)
    server.start()
    statuses: list[int] = []
    clients = [threading.Thread(target=lambda: statuses.append(call(server.port, "GET", "/search?q=cat").status))
               for _ in range(3)]
    try:
        for thread in clients:
            thread.start()
        deadline = time.monotonic() + 10
        while len(server.server.server_state.tasks) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        server.server.handle_exit(getattr(signal, stop), None)  # as the signal's handler calls it
        said, line = "", WAITING_LINES[stop].format(pid=os.getpid())
        while line not in said and time.monotonic() < deadline:
            said += capsys.readouterr().err
            time.sleep(0.02)
    finally:
        gate.set()
        server.stop()
        for thread in clients:
            thread.join(20)
    assert line in said, said
    assert statuses == [200, 200, 200]
    server.server.handle_exit(signal.SIGINT, None)  # what the line says drops them
    assert server.server.force_exit


def _serve_until_signalled(signum, handler, give_up_after: float | None = None) -> tuple:
    """Run a StoppingServer of an app that answers nothing on a free port, with ``handler`` for ``signum``, sending
    ``signum`` to this process once it has started (and, ``give_up_after`` seconds later, stopping it as a signal
    that stopped nothing would leave it). Returns (seconds it ran, whether a KeyboardInterrupt came out, the
    handler of ``signum`` once it ended)."""
    import os
    import signal
    import socket

    import uvicorn

    from retriever.serving.stopping import StoppingServer

    async def app(scope, receive, send):
        pass

    previous = signal.signal(signum, handler)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = StoppingServer(uvicorn.Config(app, lifespan="off", log_level="warning"))

    def signal_it():
        while not server.started:
            time.sleep(0.01)
        os.kill(os.getpid(), signum)
        if give_up_after is not None:
            time.sleep(give_up_after)
            server.should_exit = True

    threading.Thread(target=signal_it, daemon=True).start()
    started, interrupted = time.monotonic(), False
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        interrupted = True
    finally:
        after = signal.signal(signum, previous)
        sock.close()
    assert server.should_exit
    return time.monotonic() - started, interrupted, after


def test_sighup_is_a_graceful_stop_that_says_serve_does_not_reload(capsys):
    """SIGHUP (which many servers take as "reload") killed serve at once: responses cut off, nothing said. It is a
    graceful stop like SIGTERM, ending by the signal (exit code 129); a SIGHUP ignored (nohup) stays ignored."""
    import signal

    got = []  # the handler stands in for dying by it; 5 s on, the fix missing, the signal had stopped nothing
    seconds, _, _ = _serve_until_signalled(signal.SIGHUP, lambda sig, frame: got.append(sig), give_up_after=5)
    assert seconds < 4 and got == [signal.SIGHUP]
    assert "serve does not reload" in capsys.readouterr().err


def test_ctrl_c_ends_the_server_as_the_other_stop_signals_do():
    """uvicorn raises the signal it caught again once it has stopped: SIGTERM's and SIGHUP's end the process, SIGINT's
    is a KeyboardInterrupt, which `run_app` caught apart from them; the server's own signal handling takes it now."""
    import signal

    import uvicorn

    from retriever.serving.stopping import StoppingServer

    server = StoppingServer(uvicorn.Config(lambda scope, receive, send: None, lifespan="off"))
    with server.capture_signals():
        signal.raise_signal(signal.SIGINT)
    assert server.should_exit and not server.force_exit


def test_one_ctrl_c_while_serving_ends_the_server_as_asked_not_as_an_interrupted_start():
    """Under Python's own SIGINT handler (a terminal's Ctrl-C), asyncio.run takes SIGINT over; uvicorn, putting that
    handler back as it stopped, raised the SIGINT it caught again into it, which cancelled the main task: the
    KeyboardInterrupt that came out made serve say "interrupted (Ctrl-C) while the indexes loaded; nothing was
    served" and exit 130 after serving."""
    import signal

    _, interrupted, handler = _serve_until_signalled(signal.SIGINT, signal.default_int_handler)
    assert not interrupted
    assert handler is signal.default_int_handler  # as it was before the server ran


@pytest.mark.parametrize("first", ["SIGTERM", "SIGINT"])
def test_a_stop_forced_by_a_ctrl_c_while_stopping_exits_as_interrupted(first):
    """A SIGINT while a stop waited for a request (after SIGTERM, or a second Ctrl-C) drops it, and serve exited 0 as
    if the stop asked for were done: uvicorn raised the SIGINT again first, whose KeyboardInterrupt ended serve as one
    Ctrl-C's does. The exit code is 130, as the third Ctrl-C's, since requests went unanswered."""
    import os
    import signal
    import socket

    import uvicorn

    from retriever.serving.stopping import StoppingServer

    async def app(scope, receive, send):
        await asyncio.sleep(30)  # a request being answered, until the forced stop cancels it

    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda sig, frame: got.append(sig))  # stands in for dying by it
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    server = StoppingServer(uvicorn.Config(app, lifespan="off", log_level="critical"))

    def request_then_signals() -> None:
        while not server.started:
            time.sleep(0.01)
        client = socket.create_connection(listening.getsockname())
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        while not server.server_state.tasks:
            time.sleep(0.01)
        os.kill(os.getpid(), getattr(signal, first))
        while not server.should_exit:
            time.sleep(0.01)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)
        client.close()

    signaller = threading.Thread(target=request_then_signals, daemon=True)
    signaller.start()
    try:
        with pytest.raises(SystemExit) as stopped:
            server.run(sockets=[listening])
    finally:
        signal.signal(signal.SIGTERM, previous)
        listening.close()
        signaller.join(5)
    assert server.force_exit and stopped.value.code == 130 and got == []
