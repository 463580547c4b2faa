"""/health latency while `retriever serve` is hit with the largest requests its limits let through.

Starts a server with its default limits on an index folder (or targets a running one), polls
GET /health on a keep-alive connection every 10 ms, and meanwhile sends, from --clients processes
for --seconds each, three kinds of request in turn: the amplification request of issue #10
(256 queries x k=1000, refused by --max-hits), the most hits one request may ask for by default
(2 x 1000 and 20 x 100) and one query x 1000. Prints, per phase, the /health latencies (p50, p99, max), the big
requests' statuses, response sizes and times, and the server's peak RSS.

Run:
    python benchmarks/serve_amplification.py --index /tmp/idx/scifact
"""
from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import statistics
import threading
import time
from pathlib import Path

from common import stamp
from load_test import start_server

PHASES = [("idle", 0, 0), ("256 x 1000 (over --max-hits)", 256, 1000), ("2 x 1000 (at --max-hits)", 2, 1000),
          ("20 x 100 (at --max-hits)", 20, 100), ("1 x 1000", 1, 1000)]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True, help="Index folder to serve.")
    parser.add_argument("--clients", type=int, default=2, help="Processes sending big requests at once.")
    parser.add_argument("--seconds", type=float, default=15.0, help="Length of each phase.")
    parser.add_argument("--server-args", default="", help="Extra `retriever serve` flags.")
    return parser.parse_args()


def poll_health(port: int, stop: threading.Event, latencies: list[float]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while not stop.is_set():
        started = time.perf_counter()
        connection.request("GET", "/health")
        connection.getresponse().read()
        latencies.append(time.perf_counter() - started)
        time.sleep(0.01)
    connection.close()


def send_big(port: int, queries: int, k: int, until: float, outcomes: multiprocessing.Queue) -> None:
    body = json.dumps({"queries": [f"effects of treatment number {i} on patients" for i in range(queries)],
                       "k": k}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while time.monotonic() < until:
        started = time.perf_counter()
        connection.request("POST", "/search", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        size = len(response.read())
        outcomes.put((response.status, size, time.perf_counter() - started))
    connection.close()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_phase(port: int, queries: int, k: int, clients: int, seconds: float) -> tuple[list[float], list]:
    """Big requests come from other processes, so reading their responses does not hold up the poller."""
    stop, latencies, queue = threading.Event(), [], multiprocessing.Queue()
    poller = threading.Thread(target=poll_health, args=(port, stop, latencies))
    poller.start()
    until = time.monotonic() + seconds
    senders = [multiprocessing.Process(target=send_big, args=(port, queries, k, until, queue))
               for _ in range(clients if queries else 0)]
    for process in senders:
        process.start()
    time.sleep(seconds)
    outcomes = []
    while any(p.is_alive() for p in senders) or not queue.empty():
        while not queue.empty():
            outcomes.append(queue.get())
        time.sleep(0.05)
    for process in senders:
        process.join()
    stop.set()
    poller.join()
    return latencies, outcomes


def row(name: str, latencies: list[float], outcomes: list, rss: float) -> str:
    ms = sorted(x * 1000 for x in latencies)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    statuses = ", ".join(f"{s}x{sum(1 for o in outcomes if o[0] == s)}" for s in sorted({o[0] for o in outcomes}))
    size = max((o[1] for o in outcomes), default=0) / 1e6
    took = statistics.median([o[2] for o in outcomes]) * 1000 if outcomes else 0.0
    return (f"| {name} | {len(ms)} | {statistics.median(ms):.1f} | {p99:.1f} | {ms[-1]:.1f} | {statuses or '-'} "
            f"| {size:.2f} | {took:.0f} | {rss:.0f} |")


def main() -> None:
    args = parse_args()
    process, url = start_server(args.index, args.server_args.split())
    port = int(url.rsplit(":", 1)[1])
    try:
        lines = ["| phase | /health polls | p50 ms | p99 ms | max ms | big-request statuses | largest response MB "
                 "| median big-request ms | server peak RSS MB |", "|---|---|---|---|---|---|---|---|---|"]
        for name, queries, k in PHASES:
            latencies, outcomes = run_phase(port, queries, k, args.clients, args.seconds)
            lines.append(row(name, latencies, outcomes, peak_rss_mb(process.pid)))
            print(lines[-1], flush=True)
    finally:
        process.terminate()
        process.wait(30)
    print(stamp())
    print(f"clients sending big requests: {args.clients}, {args.seconds:.0f} s per phase, server flags: "
          f"{args.server_args or '(defaults)'}\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
