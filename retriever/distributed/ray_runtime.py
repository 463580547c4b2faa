"""Connecting to Ray: a local Ray on this machine's cores, or an existing cluster.

Ray is an optional extra, so it is imported here only, when a command asks for it, and a
missing install becomes a one-line error that says how to add it. Every command that takes
``--ray [ADDRESS]`` opens its session through :func:`ray_session`.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TypeVar

from retriever.distributed.ray_probe import PORT_HINT, answers_as_gcs
from retriever.errors import RetrieverError, error_line

LOCAL = "local"
# Ray restarts a dead worker (actor or task) and re-runs its unfinished work this many times before the run
# fails (a rerun then resumes after the work already written).
MAX_RETRIES = 3
# Seconds to wait for a cluster's port to answer: ray.init itself retries an unreachable GCS for ever.
CONNECT_TIMEOUT = 5.0
RAY_CLIENT_PORT = 10001  # what ray://HOST means without a port
# A client's HTTP/2 connection preface with an empty SETTINGS frame (RFC 9113 section 3.4), and that frame's type.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4
_Result = TypeVar("_Result")
INSTALL_HINT = "pip install 'retriever[ray]' (in a checkout: pip install -e '.[ray]')"
ADDRESS_HELP = ("Run on Ray. Without a value: a local Ray on this machine's cores; 'auto' joins the cluster this "
                "machine belongs to (`ray start`); 'ray://HOST:10001' or 'HOST:PORT' joins a remote one.")
_ADDRESS = re.compile(r"^(auto|local|ray://[^\s/]+|[\w.-]+:\d+)$")


def require_ray() -> ModuleType:
    """The ray module, or an error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RetrieverError(f"--ray needs Ray, which is not installed; run: {INSTALL_HINT}") from None
    return ray


def check_address(address: str | None) -> str:
    """``local`` for no address; otherwise the address if it has a form Ray accepts."""
    if not address:
        return LOCAL
    if not _ADDRESS.match(address):
        raise RetrieverError(f"--ray {address!r} is not a Ray address; give auto, ray://HOST:PORT or HOST:PORT, "
                             "or no value for a local Ray (put --ray after the corpus, or write --ray=auto)")
    return address



def starts_local_ray(address: str | None) -> bool:
    """Whether ``ray_session(address)`` starts a local Ray on this machine (no address, no session open here), whose
    resources are then this machine's and known before it starts."""
    return check_address(address) == LOCAL and not require_ray().is_initialized()

@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[ModuleType]:
    """Ray connected for the duration of the block.

    A session already open in this process (a test's, or a caller's) is used as it is and left open;
    a session opened here is shut down on the way out. ``num_cpus`` caps a local Ray only: a cluster
    has the resources it was started with.
    """
    ray = require_ray()
    address = check_address(address)
    if ray.is_initialized():
        yield ray
        return
    check_reachable(address)
    options: dict = {"logging_level": logging.WARNING}
    if address == LOCAL:
        options.update(num_cpus=num_cpus, include_dashboard=False)
    before = sigterm_handler()
    try:
        with _quiet_auth_notice(address == LOCAL):
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as error:  # what ray.init raises for an unreachable cluster
        _set_sigterm(before, before)  # ray.init set its own
        raise _unreachable(address, _refusal_reason(error)) from None
    _set_sigterm(before, _exit_quietly)
    try:
        yield ray
    finally:
        ray.shutdown()
        _set_sigterm(before, before)


@contextlib.contextmanager
def _quiet_auth_notice(local: bool) -> Iterator[None]:
    """Without Ray's notice, logged as a WARNING on every start of a local Ray, that it turned on token
    authentication (its default; RAY_AUTH_MODE set by the user is obeyed and silent): nothing to act on."""
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = notice.level
    if local:
        notice.setLevel(logging.ERROR)
    try:
        yield
    finally:
        notice.setLevel(level)


def sigterm_handler() -> object:
    """This process's SIGTERM handler (one set outside Python counts as the default), or None where it cannot be
    changed: only the main thread may."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGTERM) or signal.SIG_DFL


def _set_sigterm(before: object, handler: object) -> None:
    """Set the SIGTERM handler if ``before`` says this thread may. A SIGTERM under Ray is to end the process as it
    ends one without Ray, quietly after the ``finally`` blocks (actors killed, a local Ray shut down): ray.init hands
    it to a C++ crash handler that printed a stack dump (``*** SIGTERM received ... PC: @``) and, 3 runs in 4,
    ended the process by SIGABRT (exit code 134). Setting a handler again here takes it back at the C level."""
    if before is not None:
        signal.signal(signal.SIGTERM, handler)


def _exit_quietly(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)  # the exit code of a process SIGTERM ends


def _unreachable(address: str, reason: str) -> RetrieverError:
    return RetrieverError(f"could not connect to Ray at {address!r} ({reason}); start a cluster with "
                          "`ray start --head`, or pass --ray without a value for a local Ray")


def _refusal_reason(error: BaseException) -> str:
    """ray.init's first line, or what to do when the cluster wants an auth token: Ray says that only in a
    traceback folded into the text of the error's cause."""
    chain, cause = [], error
    while cause is not None and len(chain) < 8:
        chain.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    if any("InvalidAuthToken" in text for text in chain):
        return ("the cluster uses token authentication and this process has no matching token: set "
                "RAY_AUTH_MODE=token, with the cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN")
    return str(error).splitlines()[0]


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """For a HOST:PORT or ray://HOST[:PORT] address, or the one ``auto`` finds, that a gRPC server answers there
    within ``timeout`` seconds (``local``, and ``auto`` finding none, are left to ray.init, which waits long on
    an address nothing answers at: for ``auto``, RAY_ADDRESS or the last `ray start` of a head now gone)."""
    target, found = address, ""
    if address == "auto":
        target = _auto_address() or LOCAL
        found = f"it found {target} in RAY_ADDRESS or a past `ray start`; "
    if target in ("auto", LOCAL) or not _ADDRESS.match(target):
        return
    tls = os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")
    host, _, port = target.removeprefix("ray://").rpartition(":")
    if not host:
        host, port = port, str(RAY_CLIENT_PORT)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as connection:
            speaks_grpc = tls or _answers_http2(connection)
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        hint = f"; {PORT_HINT}" if target.startswith("ray://") else ""
        raise _unreachable(address, f"{found}nothing answers at {host}:{port} within {timeout:g}s: {reason}{hint}") \
            from None
    if not speaks_grpc:
        raise _unreachable(address, f"{found}what answers at {host}:{port} is not Ray: it does not speak gRPC; "
                                    "check the port `ray start --head` printed")
    if target.startswith("ray://") and not tls and answers_as_gcs(host, int(port), timeout):
        raise _unreachable(address, f"what answers at {host}:{port} is a Ray GCS, not a Ray client server; {PORT_HINT}")


def _auto_address() -> str | None:
    """The address ray.init takes ``auto`` to mean (RAY_ADDRESS, else the last `ray start` on this node, else a
    running Ray found by its process name), or None when it finds none or its private lookup is gone."""
    try:
        from ray._private.services import get_ray_address_from_environment
        return get_ray_address_from_environment("auto", None)
    except (ImportError, AttributeError, TypeError, ConnectionError, ValueError, OSError):
        return None


def _answers_http2(connection: socket.socket) -> bool:
    """Whether the server opens HTTP/2 with a SETTINGS frame, as every gRPC server (Ray's GCS and its client
    server) does; under TLS (``RAY_USE_TLS``) it cannot be seen, and the caller does not ask."""
    head = b""
    with contextlib.suppress(OSError):  # a timeout, or a server that hung up on the preface
        connection.sendall(HTTP2_PREFACE)
        while len(head) < 9:
            chunk = connection.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    return len(head) == 9 and head[3] == HTTP2_SETTINGS


def worker_died_errors(ray: ModuleType) -> tuple[type, ...]:
    """The errors Ray raises when the process running a task or actor is gone for good (its retries used up)."""
    names = ("RayActorError", "WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "LocalRayletDiedError")
    return tuple(getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name))


def unwrapped(ray: ModuleType, call: Callable[[], _Result], doing: str = "running its task") -> _Result:
    """Run ``call``; a RetrieverError raised in a Ray worker comes out as itself, one line, not a remote traceback,
    and so does a worker that died more often than Ray restarts it (``doing`` says what it was doing)."""
    try:
        return call()
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, RetrieverError):
            raise error.cause from None
        raise
    except worker_died_errors(ray) as error:
        raise died(ray, error, doing) from None


def died(ray: ModuleType, error: Exception, doing: str) -> RetrieverError:
    """One line for a worker gone for good: why, and that a rerun resumes."""
    if getattr(error, "_actor_init_failed", False):  # its __init__ raised: a restart would fail alike
        return RetrieverError(f"a Ray worker could not start ({error_line(error)}); check that every node has the "
                              "same retriever and its dependencies installed, then rerun the same command")
    what = (f"died {MAX_RETRIES + 1} times" if isinstance(error, (ray.exceptions.RayActorError,
                                                                  ray.exceptions.WorkerCrashedError)) else "was lost")
    if "killed by `ray.kill`" in str(error):  # Ray restarts no actor that ray.kill ended: it died once
        what = "was killed by ray.kill (by hand, or by a tool managing the cluster)"
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return RetrieverError(f"a Ray worker {what} {doing} ({type(error).__name__}: {first[:200]}); rerun the same "
                          "command to resume (finished parts are kept)")
