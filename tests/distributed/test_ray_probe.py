from __future__ import annotations

import time
from concurrent import futures

import pytest

from fixtures_system import free_port
from retriever.distributed.ray_runtime import ray_session
from retriever.errors import RetrieverError

HINT = r"ray://HOST:PORT takes the Ray client server's port \(10001 by default\)"


def _grpc_server(methods: dict[str, str]):
    """A gRPC server on a free port answering the named ``{service: method}`` calls with an empty reply; any other
    call gets UNIMPLEMENTED, as from a real server that lacks it."""
    grpc = pytest.importorskip("grpc")
    handlers = [grpc.method_handlers_generic_handler(service, {method: grpc.unary_unary_rpc_method_handler(
        lambda request, context: b"")}) for service, method in methods.items()]
    server = grpc.server(futures.ThreadPoolExecutor(1), handlers=handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


@pytest.fixture
def no_ray_init(monkeypatch):
    ray = pytest.importorskip("ray")
    called = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **options: called.append(options))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    return called


def test_a_ray_address_at_a_gcs_port_says_which_port_ray_takes_within_seconds(no_ray_init):
    """`--ray ray://HOST:6379` (the GCS port, not the client server's) failed after ~40 s with Ray's `ray client
    connection timeout` and its warnings."""
    server, port = _grpc_server({"ray.rpc.NodeInfoGcsService": "CheckAlive"})
    started = time.monotonic()
    try:
        with pytest.raises(RetrieverError, match=rf"is a Ray GCS, not a Ray client server; {HINT}"), \
                ray_session(f"ray://127.0.0.1:{port}"):
            pass
    finally:
        server.stop(None)
    assert time.monotonic() - started < 10 and not no_ray_init


def test_a_ray_address_at_a_client_server_port_is_connected_to(no_ray_init):
    server, port = _grpc_server({"ray.rpc.RayletDriver": "ClusterInfo"})
    try:
        with ray_session(f"ray://127.0.0.1:{port}"):
            pass
    finally:
        server.stop(None)
    assert [options["address"] for options in no_ray_init] == [f"ray://127.0.0.1:{port}"]


def test_a_ray_address_nothing_answers_at_says_which_port_ray_takes(no_ray_init):
    port = free_port()  # nothing listens on it
    with pytest.raises(RetrieverError, match=rf"nothing answers .*; {HINT}"), ray_session(f"ray://127.0.0.1:{port}"):
        pass
