from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from fixtures_system import free_port, too_many
from retriever.distributed.ray_capacity import cluster_cpus_and_gpus
from retriever.distributed.ray_runtime import MAX_RETRIES, check_address, ray_session, require_ray, unwrapped
from retriever.errors import RetrieverError


def test_missing_ray_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    with pytest.raises(RetrieverError, match=r"pip install 'retriever\[ray\]'"):
        require_ray()
    with pytest.raises(RetrieverError, match="not installed"), ray_session():
        pass


@pytest.mark.parametrize("address", [None, "", "auto", "local", "ray://head:10001", "10.0.0.5:6379"])
def test_addresses_ray_accepts(address):
    assert check_address(address) == (address or "local")


@pytest.mark.parametrize("address", ["corpus.jsonl", "ray://", "http://head:8265", "data/scifact"])
def test_other_values_are_refused(address):
    with pytest.raises(RetrieverError, match="not a Ray address"):
        check_address(address)


def test_an_open_session_is_reused_and_left_open(local_ray):
    with ray_session("ray://unreachable:1") as ray:  # the address is not used: a session is already open
        assert ray is local_ray
        assert cluster_cpus_and_gpus(ray) == (2, 0)
    assert local_ray.is_initialized()


def test_an_address_where_nothing_listens_fails_within_seconds(monkeypatch):
    ray = pytest.importorskip("ray")
    port = free_port()  # nothing listens on it

    def never(**_):  # ray.init retries an unreachable GCS for ever: it must not be reached
        raise AssertionError("ray.init was called for an address nothing answers at")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as if no test had opened a session
    monkeypatch.setattr(ray, "init", never)
    started = time.monotonic()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(RetrieverError, match=rf"could not connect to Ray at '{address}' \(nothing answers"), \
                ray_session(address):
            pass
    assert time.monotonic() - started < 10


def test_auto_where_the_cluster_it_finds_is_gone_fails_within_seconds(monkeypatch, tmp_path):
    """`auto` names the cluster of RAY_ADDRESS, else of the last `ray start` on this node: one whose head died (a
    reboot, a SIGKILL, RAY_ADDRESS left from another session) was waited for by ray.init for minutes."""
    ray = pytest.importorskip("ray")
    port = free_port()
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init was called for a cluster that is gone"))
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(RetrieverError, match=rf"could not connect to Ray at 'auto' \(it found 127.0.0.1:{port} "
                                             r"in RAY_ADDRESS or a past `ray start`; nothing answers"), \
            ray_session("auto"):
        pass
    assert time.monotonic() - started < 10


def _server(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    """A one-connection server on a free port that sends ``reply`` once it has read a little."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        connection, _ = listener.accept()
        with connection, contextlib.suppress(OSError):  # the client may hang up first
            connection.recv(64)
            connection.sendall(reply)
            connection.recv(64)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_an_address_where_something_else_answers_is_refused_at_once(monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init was called for a server that is not Ray"))
    listener, thread = _server(b"HTTP/1.0 400 Bad Request\r\n\r\n")
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    started = time.monotonic()
    with listener, pytest.raises(RetrieverError, match=rf"at '{address}' \(what answers .* is not Ray"), \
            ray_session(address):
        pass
    assert time.monotonic() - started < 3
    thread.join(5)


def test_a_cluster_that_wants_a_token_says_how_to_give_it(monkeypatch):
    ray = pytest.importorskip("ray")
    settings_frame = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # what a gRPC server sends first
    listener, thread = _server(settings_frame)

    def init(**_):  # how Ray reports it: a traceback folded into the text of the error's cause
        try:
            raise RuntimeError("Failed to connect to GCS. Last connection error: Traceback (most recent call last):\n"
                               "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token")
        except RuntimeError as cause:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379") from cause

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    with listener, pytest.raises(RetrieverError, match="token authentication .* set RAY_AUTH_MODE=token"), \
            ray_session(f"127.0.0.1:{listener.getsockname()[1]}"):
        pass
    thread.join(5)


@pytest.mark.parametrize("error", ["ActorDiedError", "RayActorError", "WorkerCrashedError"])
def test_a_worker_that_died_past_its_restarts_is_one_line(error):
    ray = pytest.importorskip("ray")

    def dies():
        raise getattr(ray.exceptions, error)()

    with pytest.raises(RetrieverError) as raised:
        unwrapped(ray, dies, "encoding part embeddings-w000of001-00003.parquet")
    message = str(raised.value)
    assert message.startswith(f"a Ray worker died {MAX_RETRIES + 1} times encoding part embeddings-w000of001-00003")
    assert message.endswith("rerun the same command to resume (finished parts are kept)")
    assert "\n" not in message and raised.value.__suppress_context__


def test_a_worker_killed_by_ray_kill_is_not_said_to_have_died_past_its_restarts():
    """Ray does not restart an actor that ray.kill ended (by hand, or a tool managing the cluster): it died once, and
    the line said it died 4 times, as a part that crashes every worker would."""
    ray = pytest.importorskip("ray")

    def killed():  # the text Ray gives a task of an actor ray.kill ended
        raise ray.exceptions.RayActorError(error_msg="The actor died unexpectedly before finishing this task.\n"
                                           "\tclass_name: EncoderActor\nThe actor is dead because it was killed by "
                                           "`ray.kill`.")

    with pytest.raises(RetrieverError) as raised:
        unwrapped(ray, killed, "encoding part embeddings-w000of001-00003.parquet")
    assert str(raised.value).startswith("a Ray worker was killed by ray.kill (by hand, or by a tool managing the "
                                        "cluster) encoding part embeddings-w000of001-00003.parquet")
    assert "times" not in str(raised.value) and "rerun the same command to resume" in str(raised.value)


def test_a_worker_that_could_not_start_says_so():
    ray = pytest.importorskip("ray")

    def fails_to_start():
        raise ray.exceptions.RayActorError(error_msg="The actor died because of an error raised in its creation "
                                           "task\nTraceback...\nModuleNotFoundError: No module named 'retriever'",
                                           actor_init_failed=True)

    with pytest.raises(RetrieverError, match=r"could not start \(ModuleNotFoundError: No module named 'retriever'\)"):
        unwrapped(ray, fails_to_start, "starting its encoder")


SESSION_THEN_WAIT = """
import time
from retriever.distributed.ray_runtime import ray_session
with ray_session(num_cpus=1):
    print("ready", flush=True)
    time.sleep(120)
"""
SESSION_THEN_END = "from retriever.distributed.ray_runtime import ray_session\nwith ray_session(num_cpus=1):\n    pass\n"


@pytest.fixture(scope="module")
def fresh_sessions():
    """Two processes each starting a local Ray of their own, started together so their seconds of Ray's start overlap:
    ``waiting`` holds its session open, ``ending`` (RAY_AUTH_MODE unset) ends its session as the block ends."""
    pytest.importorskip("ray")
    without_auth_mode = {key: value for key, value in os.environ.items() if key != "RAY_AUTH_MODE"}
    runs = {"waiting": (SESSION_THEN_WAIT, os.environ), "ending": (SESSION_THEN_END, without_auth_mode)}
    started = {name: subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env={**environment, "HF_HUB_OFFLINE": "1"})
               for name, (code, environment) in runs.items()}
    yield started
    for process in started.values():  # a test that failed before its process ended
        process.kill()
        process.wait()


def test_sigterm_ends_a_ray_session_quietly_with_code_143(fresh_sessions):
    """As a process without Ray ends: Ray's C++ crash handler printed `*** SIGTERM received ... PC: @` lines and
    often ended the driver by SIGABRT (134)."""
    process = fresh_sessions["waiting"]
    assert process.stdout.readline() == "ready\n"  # a fresh local Ray: seconds
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    assert "SIGTERM received" not in stderr and "PC: @" not in stderr


def test_the_sigterm_handler_is_given_back_when_the_session_ends(monkeypatch):
    ray = pytest.importorskip("ray")
    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **_: signal.signal(signal.SIGTERM, lambda *_: None))  # as Ray's does
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    with ray_session():
        assert signal.getsignal(signal.SIGTERM) not in (before, signal.SIG_DFL)
        with pytest.raises(SystemExit) as exited:
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        assert exited.value.code == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_local_ray_starts_without_rays_token_auth_warning(fresh_sessions):
    """A local Ray keeps Ray's own default, token authentication, without Ray's stderr line `WARNING ... Token
    authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out` on every `encode --ray`
    and `build --ray` (Ray logs it whenever RAY_AUTH_MODE is unset)."""
    _, stderr = fresh_sessions["ending"].communicate(timeout=120)
    assert fresh_sessions["ending"].returncode == 0, stderr
    assert "Token authentication is" not in stderr and "RAY_AUTH_MODE" not in stderr, stderr


@pytest.mark.parametrize("command", ["encode", "build"])
def test_too_many_ray_workers_for_a_local_ray_are_refused_before_it_starts(no_ray_start, tiny_model_dir, tiny_beir,
                                                                           tmp_path, command):
    """`encode --ray --ray-workers 5` on 2 cores was refused only after the local Ray had started (seconds)."""
    from click.testing import CliRunner

    from retriever.cli import main

    result = CliRunner().invoke(main, [command, str(tiny_beir), "-o", str(tmp_path / "out"), "--model",
                                       str(tiny_model_dir), "--device", "cpu", "--ray", "--ray-workers",
                                       str(too_many())])
    assert result.exit_code == 1, result.output
    assert re.fullmatch(rf"error: --ray-workers {too_many()} needs more than the cluster's \d+ CPUs at 1 per worker "
                        r"\(room for \d+\); lower --ray-workers or --ray-cpus-per-worker\n", result.output)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.shards").exists()


def test_ondisk_parts_on_a_local_ray_are_refused_before_the_corpus_pass(no_ray_start):
    from retriever.faiss_index import IndexParams
    from retriever.partwork import check_part_settings

    params = IndexParams("ivf-ondisk", ray_address="local", ray_workers=too_many(2), ray_cpus_per_worker=2)
    with pytest.raises(RetrieverError, match=rf"--ray-workers {too_many(2)} needs more than the cluster's"):
        check_part_settings(params)


@pytest.mark.parametrize("workers, cpus, message", [
    (0, 1, "--ray-workers must be a whole number of at least 1, not 0"),
    (2.5, 1, "--ray-workers must be a whole number of at least 1, not 2.5"),
    (None, 0, "--ray-cpus-per-worker must be a whole number of at least 1, not 0")])
def test_a_library_pool_of_no_workers_or_no_cpus_is_refused_before_ray_starts(no_ray_start, tiny_model_dir, workers,
                                                                              cpus, message):
    """`ray_encoder_pool(..., workers=0)` started Ray, then failed with an IndexError on the metadata of no actors;
    cpus_per_worker=0 raised ZeroDivisionError (the CLI's flag ranges stop both; the library had no check)."""
    from retriever.distributed.ray_encoding import RayEncoderPool, ray_encoder_pool
    from retriever.encoder_settings import EncoderSettings

    settings = EncoderSettings(model=str(tiny_model_dir))
    with pytest.raises(RetrieverError, match=f"^{re.escape(message)}$"):
        with ray_encoder_pool(None, settings, device="cpu", workers=workers, cpus_per_worker=cpus):
            pass
    with pytest.raises(RetrieverError, match=f"^{re.escape(message)}$"):
        RayEncoderPool(no_ray_start, settings, device="cpu", workers=workers, cpus_per_worker=cpus)
