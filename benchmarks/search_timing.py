"""Timing FAISS searches for the search speed benchmark: QPS, latency percentiles and recall of one setting."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import faiss
import numpy as np

from search_report import Row

from retriever.tuning import recall_at_k

K = 10


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {loadavg()}] {message}", file=sys.stderr, flush=True)


def index_bytes(index: faiss.Index) -> int:
    """Serialised size, counted through a callback so a 1.5 GB index is not copied to measure it."""
    total = [0]

    def count(chunk: bytes) -> None:
        total[0] += len(chunk)

    faiss.write_index(index, faiss.PyCallbackIOWriter(count))
    return total[0]


def timed(index: faiss.Index, queries: np.ndarray, batch: int, budget: float,
          min_queries: int = 30) -> tuple[float, float, float, np.ndarray]:
    """QPS, p50 and p99 latency (ms per call of ``batch`` queries), and the ids of one full pass.

    Batch 64 always does one full pass (its ids give recall), then repeats until ``budget``
    seconds; batch 1 stops after ``budget`` seconds once ``min_queries`` were timed, so exact
    search on 1M vectors does not take minutes.
    """
    index.search(queries[:batch], K)  # warm-up
    ids = np.full((len(queries), K), -1, dtype=np.int64)
    latencies, done, started = [], 0, time.perf_counter()
    while True:
        start = done % len(queries)
        block = queries[start:start + batch]
        t0 = time.perf_counter()
        _, found = index.search(block, K)
        latencies.append(time.perf_counter() - t0)
        if done < len(queries):
            ids[start:start + len(block)] = found
        done += len(block)
        elapsed = time.perf_counter() - started
        full_pass = done >= len(queries)
        if batch > 1 and full_pass and elapsed >= budget:
            break
        if batch == 1 and done >= min(min_queries, len(queries)) and (elapsed >= budget or done >= 2000):
            break
    seconds = sum(latencies)
    ms = np.array(latencies) * 1000
    return done / seconds, float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), ids


def measure(index: faiss.Index, queries: np.ndarray, truth: np.ndarray | None, row: dict,
            budgets: tuple[float, float]) -> tuple[Row, np.ndarray]:
    """One table row; recall is against ``truth`` (None: this is the exact search, recall 1)."""
    qps1, p50_1, p99_1, _ = timed(index, queries, 1, budgets[0])
    qps64, p50_64, p99_64, ids = timed(index, queries, 64, budgets[1])
    recall = 1.0 if truth is None else recall_at_k(ids, truth)
    result = Row(recall=recall, qps1=qps1, p50_1=p50_1, p99_1=p99_1, qps64=qps64, p50_64=p50_64,
                 p99_64=p99_64, **row)
    log(f"{result.dataset} {result.index} {result.params}: recall@10 {recall:.3f}, "
        f"QPS b1 {qps1:.0f}, QPS b64 {qps64:.0f}")
    return result, ids
