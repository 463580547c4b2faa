"""Load test for `retriever serve`: QPS and latency at 1, 8 and 32 concurrent clients.

Either starts a server on a free 127.0.0.1 port against an index folder, or targets one that is
already running. Each client thread keeps one keep-alive connection and sends GET /search
requests (queries cycle through the dataset's queries when the manifest's corpus has a
queries.jsonl beside it) until the level's request budget or time cap is spent. Prints a
Markdown table plus the command, machine and date; the client threads share the machine with
the server, so on a small box the numbers include the load generator's own cost.

With ``--modes dense,hybrid`` each concurrency level runs every search mode in ``--rounds``
alternating slices (dense, hybrid, dense, hybrid, ...), so the modes see the same machine load
and their latencies compare within one run.

Run:
    python benchmarks/load_test.py --index /tmp/idx/scifact
    python benchmarks/load_test.py --url http://127.0.0.1:8000 --concurrency 1,8
    python benchmarks/load_test.py --index /tmp/idx/scifact --concurrency 1 --modes dense,hybrid --rounds 10
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

from common import machine

FALLBACK_QUERIES = ["vitamin D and bone fractures", "what causes inflammation", "gene expression in cancer cells",
                    "effects of exercise on the heart", "antibiotic resistance in bacteria",
                    "sleep and memory consolidation", "insulin resistance and obesity", "how do vaccines work"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--index", type=Path, help="Index folder: start a server on it for the test.")
    target.add_argument("--url", help="Base URL of a running server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--concurrency", default="1,8,32", help="Comma-separated client counts.")
    parser.add_argument("--requests", type=int, default=2000, help="Requests per concurrency level.")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="Time cap per concurrency level.")
    parser.add_argument("--warmup", type=int, default=50, help="Untimed requests before the first level.")
    parser.add_argument("--k", type=int, default=10, help="Hits per query.")
    parser.add_argument("--queries", type=Path, default=None,
                        help="JSONL queries (text field). [default: queries.jsonl beside the index's corpus]")
    parser.add_argument("--modes", default=None,
                        help="Comma-separated search modes (dense, bm25, hybrid) sent as ?mode=, interleaved. "
                             "[default: none sent, the server's own mode]")
    parser.add_argument("--rounds", type=int, default=1,
                        help="With several --modes: alternating slices per level; requests and time are split "
                             "evenly among them.")
    parser.add_argument("--server-args", default="",
                        help="Extra `retriever serve` flags when --index is given, e.g. '--dtype fp32 --threads 2'.")
    return parser.parse_args()


def load_queries(path: Path | None, index: Path | None) -> list[str]:
    if path is None and index is not None:
        from retriever.recorded_paths import locate

        corpus = locate(json.loads((index / "manifest.json").read_text())["corpus"].get("path"), index)
        candidate = corpus.parent / "queries.jsonl" if corpus is not None else None
        path = candidate if candidate is not None and candidate.is_file() else None
    if path is None:
        return FALLBACK_QUERIES
    with open(path, encoding="utf-8") as file:
        texts = [json.loads(line)["text"] for line in file if line.strip()]
    return [t for t in texts if t.strip()] or FALLBACK_QUERIES


def start_server(index: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = "from retriever.cli.serving import serve_command; serve_command()"
    process = subprocess.Popen([sys.executable, "-c", script, str(index), "--port", str(port), *extra])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the server exited with code {process.returncode}")
        try:
            get_json(url, "/health")
            return process, url
        except OSError:
            time.sleep(0.2)
    process.terminate()
    sys.exit("the server did not come up within 180 s")


def get_json(url: str, path: str) -> dict:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=10)
    try:
        connection.request("GET", path)
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


def run_level(url: str, clients: int, total: int, max_seconds: float, paths: list[str]) -> dict:
    """Send up to ``total`` requests from ``clients`` threads; latencies in seconds."""
    parts = urllib.parse.urlsplit(url)
    lock = threading.Lock()
    issued = [0]
    latencies: list[float] = []
    errors = [0]
    start_gate = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client(seed: int) -> None:
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)
        mine: list[float] = []
        failed = 0
        start_gate.wait()
        while True:
            with lock:
                if issued[0] >= total or time.perf_counter() > stop_at[0]:
                    break
                number = issued[0]
                issued[0] += 1
            path = paths[(number * 7 + seed) % len(paths)]
            started = time.perf_counter()
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                response.read()
                ok = response.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                connection.close()
                connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)
            mine.append(time.perf_counter() - started)
            failed += not ok
        connection.close()
        with lock:
            latencies.extend(mine)
            errors[0] += failed

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    before = get_json(url, "/health")
    began = time.perf_counter()
    stop_at[0] = began + max_seconds
    start_gate.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    after = get_json(url, "/health")
    return {"clients": clients, "latencies": latencies, "errors": errors[0], "seconds": elapsed,
            "batching": batch_counts(before, after)}


def summarise(runs: list[dict], mode: str | None) -> dict:
    """One table row from one or more ``run_level`` slices of the same level and mode."""
    latencies = sorted(t for run in runs for t in run["latencies"])
    seconds = sum(run["seconds"] for run in runs)
    batches = sum(run["batching"][0] for run in runs)
    queries = sum(run["batching"][1] for run in runs)
    return {"clients": runs[0]["clients"], "mode": mode or "server default", "requests": len(latencies),
            "errors": sum(run["errors"] for run in runs), "qps": len(latencies) / seconds,
            "p50": percentile(latencies, 50), "p90": percentile(latencies, 90), "p99": percentile(latencies, 99),
            "mean_batch": queries / batches if batches else float("nan")}


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    position = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[position]


def batch_counts(before: dict, after: dict) -> tuple[int, int]:
    """Encoder batches and queries the server ran between two /health snapshots."""
    batches = queries = 0
    for name, stats in after.get("indexes", {}).items():
        old = before.get("indexes", {}).get(name, {})
        batches += stats.get("batches", 0) - old.get("batches", 0)
        queries += stats.get("queries", 0) - old.get("queries", 0)
    return batches, queries


def run_modes(url: str, args: argparse.Namespace, paths: dict[str | None, list[str]]) -> list[dict]:
    """Every level × mode, the modes alternating in ``args.rounds`` slices per level."""
    rounds = max(1, args.rounds) if len(paths) > 1 else 1
    rows = []
    for clients in (int(c) for c in args.concurrency.split(",")):
        slices: dict[str | None, list[dict]] = {mode: [] for mode in paths}
        for _ in range(rounds):
            for mode, mode_paths in paths.items():
                slices[mode].append(run_level(url, clients, max(1, args.requests // rounds),
                                              args.max_seconds / rounds, mode_paths))
        rows.extend(summarise(runs, mode) for mode, runs in slices.items())
    return rows


def header(url: str, info: dict, k: int, queries: int, load_before: float) -> list[str]:
    """Command, machine (with its SIMD level and bf16: the server's encoder speed turns on them) and date."""
    return [f"command: {' '.join([Path(sys.executable).name, *sys.argv])}",
            f"machine: {machine()}, {len(os.sched_getaffinity(0))} available to this run "
            f"(load average {load_before:.2f} before the run: other jobs share the machine)",
            f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            f"server: {url}, index {info.get('name')} ({info.get('documents')} docs, {info.get('index_type')}, "
            f"{info.get('encoder', {}).get('model')}), k={k}, {queries} distinct queries", ""]


def main() -> None:
    args = parse_args()
    queries = load_queries(args.queries, args.index)
    modes = args.modes.split(",") if args.modes else [None]
    paths = {mode: [f"/search?{urllib.parse.urlencode({'q': q, 'k': args.k, **({'mode': mode} if mode else {})})}"
                    for q in queries] for mode in modes}
    process = None
    load_before = os.getloadavg()
    if args.index is not None:
        process, url = start_server(args.index, args.server_args.split())
    else:
        url = args.url.rstrip("/")
    try:
        info = get_json(url, "/info")
        for mode_paths in paths.values() if args.warmup else ():
            run_level(url, 1, args.warmup, 60, mode_paths)
        rows = run_modes(url, args, paths)
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
    print("\n".join(header(url, info, args.k, len(queries), load_before[0])))
    print("| clients | mode | requests | errors | QPS | p50 ms | p90 ms | p99 ms | mean batch |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['clients']} | {row['mode']} | {row['requests']} | {row['errors']} | {row['qps']:.0f} "
              f"| {row['p50'] * 1e3:.2f} "
              f"| {row['p90'] * 1e3:.1f} | {row['p99'] * 1e3:.1f} | {row['mean_batch']:.1f} |")


if __name__ == "__main__":
    main()
