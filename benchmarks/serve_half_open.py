"""Connections that never finish a request: does `retriever serve` close them, and when?

Starts a server (default flags unless --server-args) on an index folder and opens --connections
connections at once, a third each sending nothing, half a request line, or complete headers of a
POST whose body never comes. Polls them for --seconds and prints how many the server closed and
when (by kind), then whether /health still answers.

Run:
    python benchmarks/serve_half_open.py --index /tmp/idx/scifact
"""
from __future__ import annotations

import argparse
import http.client
import socket
import time
from pathlib import Path

from common import stamp
from load_test import start_server

OPENINGS = {"nothing sent": b"", "half a request line": b"GET /health HTTP/1.1\r\n",
            "headers, body never sent": b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                        b"Content-Length: 50\r\n\r\n{"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True, help="Index folder to serve.")
    parser.add_argument("--connections", type=int, default=300, help="Half-open connections to hold.")
    parser.add_argument("--seconds", type=float, default=20.0, help="How long to hold them.")
    parser.add_argument("--server-args", default="", help="Extra `retriever serve` flags.")
    return parser.parse_args()


def closed(sock: socket.socket) -> bool:
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def main() -> None:
    args = parse_args()
    process, url = start_server(args.index, args.server_args.split())
    port = int(url.rsplit(":", 1)[1])
    kinds = list(OPENINGS)
    try:
        sockets = []
        started = time.monotonic()
        for number in range(args.connections):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(OPENINGS[kinds[number % len(kinds)]])
            sock.setblocking(False)
            sockets.append(sock)
        closed_at: dict[int, float] = {}
        while time.monotonic() - started < args.seconds:
            for number, sock in enumerate(sockets):
                if number not in closed_at and closed(sock):
                    closed_at[number] = time.monotonic() - started
            time.sleep(0.05)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        before = time.perf_counter()
        connection.request("GET", "/health")
        health = connection.getresponse().status
        health_ms = (time.perf_counter() - before) * 1000
    finally:
        process.terminate()
        process.wait(30)
    print(stamp())
    print(f"server flags: {args.server_args or '(defaults)'}; {args.connections} connections held {args.seconds:.0f} s\n")
    print("| opening | connections | closed by the server | first close s | last close s |")
    print("|---|---:|---:|---:|---:|")
    for index, kind in enumerate(kinds):
        numbers = range(index, args.connections, len(kinds))
        times = sorted(closed_at[n] for n in numbers if n in closed_at)
        first, last = (f"{times[0]:.1f}", f"{times[-1]:.1f}") if times else ("-", "-")
        print(f"| {kind} | {len(numbers)} | {len(times)} | {first} | {last} |")
    print(f"\n/health afterwards: {health} in {health_ms:.1f} ms")


if __name__ == "__main__":
    main()
