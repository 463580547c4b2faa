"""Which Ray server answers at a port, asked with one gRPC call, so a wrong port is one line at once.

A ``ray://`` address needs the Ray client server's port; given the GCS port (what a plain HOST:PORT takes), Ray's
client waited for its connection timeout and failed with ``ray client connection timeout`` and its warnings.
"""
from __future__ import annotations

# A read-only GCS call that the client server lacks (it answers UNIMPLEMENTED), with an empty request.
GCS_METHOD = "/ray.rpc.NodeInfoGcsService/CheckAlive"
PORT_HINT = ("ray://HOST:PORT takes the Ray client server's port (10001 by default), a plain HOST:PORT the GCS port "
             "(6379 by default)")


def answers_as_gcs(host: str, port: int, timeout: float) -> bool:
    """Whether the gRPC server at ``host:port`` (an IPv6 host in brackets) has the GCS's service; False when it
    lacks it, or does not say within ``timeout`` seconds (then Ray is left to try)."""
    import grpc  # installed with Ray

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            channel.unary_unary(GCS_METHOD)(b"", timeout=timeout)
        except grpc.RpcError as error:
            return error.code() not in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.DEADLINE_EXCEEDED,
                                        grpc.StatusCode.UNAVAILABLE)
    return True
