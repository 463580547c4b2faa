"""What the server says as it stops.

A stop at once (a second Ctrl-C, uvicorn's force exit) cancels the requests still waiting for their batch, and
uvicorn logged each as "Exception in ASGI application" with a ``CancelledError`` traceback of some 80 lines: under load,
thousands of lines burying the reason the server stopped. The requests are dropped by design (the operator asked for
it), so one warning line says so instead (``DroppedAtStop``).

A graceful stop (Ctrl-C, SIGTERM) answers the requests in progress first, which under load, or with a client still
sending its body (up to --request-timeout), takes seconds to minutes: uvicorn says so only at a level serve does not
log, so the server seemed to ignore the Ctrl-C. ``StoppingServer`` says how many it waits for and how to drop them;
``AnsweredAtStop`` answers each dropped request with a JSON 503.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator

import click
import uvicorn

from retriever.serving.malformed import send_closing_error
from retriever.wording import counted

UVICORN_LOG = "uvicorn.error"  # where uvicorn logs an ASGI application's exceptions (and its lifespan's)
DROPPED = ("stopped at once: the requests still being answered were dropped, each with a 503 to send it again (a batch "
           "the encoder is on ends first)")


class DroppedAtStop(logging.Filter):
    """Drops the log records of requests cancelled by the stop, turning the first into one warning line."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, asyncio.CancelledError):
            return True
        if self.said:
            return False
        self.said = True
        record.msg, record.args, record.exc_info, record.exc_text = DROPPED, (), None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_cancelled_requests() -> None:
    """Put a fresh ``DroppedAtStop`` on uvicorn's error log, in place of an earlier app's (one filter per process)."""
    log = logging.getLogger(UVICORN_LOG)
    for existing in [f for f in log.filters if isinstance(f, DroppedAtStop)]:
        log.removeFilter(existing)
    log.addFilter(DroppedAtStop())


STOPPED_AT_ONCE = ("the server was stopped at once (a forced stop) before it answered this request; send it again once "
                   "the server is back, or to another")
class AnsweredAtStop:
    """ASGI middleware: a request a forced stop cancels before its response began gets a JSON 503 saying so, where
    uvicorn sent its plain-text 500 "Internal Server Error", as if the server had a bug (``STOPPED_AT_ONCE``)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sent(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sent)
        except asyncio.CancelledError:
            if not started:
                with contextlib.suppress(Exception):  # the client may be gone
                    await send_closing_error(sent, 503, STOPPED_AT_ONCE)
            raise


HUNG_UP = ("SIGHUP: stopping once the requests being answered are done (serve does not reload: start it again to load "
           "changed indexes)")


class StoppingServer(uvicorn.Server):
    """uvicorn's server, saying on standard error what a graceful stop waits for. SIGHUP, which many servers take as
    "reload" and uvicorn leaves alone, killed serve at once, its responses cut off and nothing said: it is a graceful
    stop like SIGTERM, ending by the signal (exit code 129); one ignored (nohup) stays ignored."""

    stopped_by: int | None = None  # the signal that began the stop
    _hung_up = False

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's run, with SIGINT kept from asyncio.run: under Python's own handler (a terminal's Ctrl-C) it takes
        SIGINT over, uvicorn put that handler back as it stopped and raised the SIGINT it caught again into it, which
        cancelled the main task, and the KeyboardInterrupt that came out made serve say it was interrupted while
        loading (exit 130). A handler that raises KeyboardInterrupt as Python's does stands in meanwhile."""
        if threading.current_thread() is not threading.main_thread() \
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            super().run(sockets)
            return
        signal.signal(signal.SIGINT, _interrupted)
        try:
            super().run(sockets)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        busy = len(self.server_state.tasks)
        if busy and not self.force_exit:
            click.echo(waiting_line(busy, self.stopped_by), err=True)
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: object) -> None:
        """uvicorn's handler of SIGINT and SIGTERM, and serve's of SIGHUP (``_hang_ups_captured``)."""
        if not self.should_exit:
            self.stopped_by = sig
        if sig != getattr(signal, "SIGHUP", None):
            super().handle_exit(sig, frame)
            return
        if not self._hung_up:
            with contextlib.suppress(OSError):  # the terminal that hung up may take no more output
                click.echo(HUNG_UP, err=True)
        self._hung_up = self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Every stop signal ends here: uvicorn raises the one it caught again once it has stopped, and where SIGTERM's
        and SIGHUP's end the process by the signal, SIGINT's is Python's KeyboardInterrupt, which ends serve (exit code
        0: the stop asked for is done) rather than reaching the CLI's "interrupted" handler. A stop a SIGINT forced
        (after another signal; uvicorn raises it first) exits 130, as an interrupted command's, since it drops any
        request still being answered (it was 0, as if nothing were lost); it does so with none left to drop too."""
        try:
            with self._hang_ups_captured(), super().capture_signals():
                yield
        except KeyboardInterrupt:
            if signal.SIGINT not in self._captured_signals:
                raise
            if self.force_exit:
                raise SystemExit(128 + signal.SIGINT) from None

    @contextlib.contextmanager
    def _hang_ups_captured(self) -> Iterator[None]:
        hup = getattr(signal, "SIGHUP", None)
        if hup is None or threading.current_thread() is not threading.main_thread() \
                or signal.getsignal(hup) == signal.SIG_IGN:
            yield
            return
        previous = signal.signal(hup, self.handle_exit)
        try:
            yield
        finally:
            signal.signal(hup, previous)
        if self._hung_up:  # as uvicorn ends by the signal it caught, once the handler it replaced is back
            signal.raise_signal(hup)


def waiting_line(busy: int, stopped_by: int | None) -> str:
    """What a graceful stop waits for and what drops it. uvicorn forces the stop on a SIGINT alone, so after a SIGTERM
    or SIGHUP (a process manager's, often with no terminal) "Ctrl-C again" named a step a second such signal is not."""
    being = "is" if busy == 1 else "are"
    waiting = f"once the {counted(busy, 'request')} being answered {being} done"
    if stopped_by in (None, signal.SIGINT):
        return f"stopping {waiting} (Ctrl-C again to drop them)"
    name = signal.Signals(stopped_by).name
    return f"stopping on {name} {waiting} (a second {name} drops nothing: kill -INT {os.getpid()} drops them)"


def _interrupted(sig: int, frame: object) -> None:
    raise KeyboardInterrupt
