"""Search child of benchmarks/scale.py: opens an index as `search`/`serve` do and sweeps nprobe.

Prints one JSON object: per nprobe, recall@10 against the exact top-10 and QPS at batch 1 and 64;
the doc-store lookups' latency; and this process's own memory at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from procmem import status  # noqa: E402

from retriever.indexing import read_manifest  # noqa: E402
from retriever.searching import open_index  # noqa: E402
from retriever.search_settings import apply_search_params, ivf_part  # noqa: E402
from retriever.tuning import NPROBE_CANDIDATES, recall_at_k  # noqa: E402


def batch64(index, queries: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Labels, queries per second, and CPU milliseconds per query (all threads; on a shared machine
    the CPU time is the steadier measure of the work a query costs)."""
    started, cpu = time.perf_counter(), time.process_time()
    labels = np.concatenate([index.search(queries[i:i + 64], 10)[1] for i in range(0, len(queries), 64)])
    cpu_ms = (time.process_time() - cpu) * 1000 / len(queries)
    return labels, len(queries) / (time.perf_counter() - started), cpu_ms


def batch1(index, queries: np.ndarray, seconds: float) -> float:
    started, done = time.perf_counter(), 0
    while done < len(queries) and (done < 20 or time.perf_counter() - started < seconds):
        index.search(queries[done:done + 1], 10)
        done += 1
    return done / (time.perf_counter() - started)


def lookups(documents, labels: np.ndarray) -> dict:
    """Time the label → (id, title, text) lookups of 64 queries' hits, and id → text for 100 ids."""
    started = time.perf_counter()
    ids = []
    for row in labels[:64]:
        ids.extend(documents.ids_of(row.tolist()))
        documents.records(row.tolist())
    hits_ms = (time.perf_counter() - started) * 1000 / 64
    started = time.perf_counter()
    assert all(documents.document(doc_id) is not None for doc_id in ids[:100])
    return {"hits_ms_per_query": round(hits_ms, 3),
            "id_to_text_ms": round((time.perf_counter() - started) * 1000 / min(100, len(ids)), 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index", type=Path)
    parser.add_argument("queries", type=Path)
    parser.add_argument("truth", type=Path)
    parser.add_argument("--max-nprobe", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    opened = time.perf_counter()
    manifest = read_manifest(args.index)
    index, documents = open_index(args.index, manifest)
    open_seconds = time.perf_counter() - opened
    after_open = status(os.getpid())
    queries, truth = np.load(args.queries), np.load(args.truth)
    tuned = manifest["index"]["search_defaults"]["nprobe"]
    nlist = ivf_part(index).nlist
    candidates = sorted({*(n for n in NPROBE_CANDIDATES if n <= min(args.max_nprobe, nlist)), tuned})
    sweep = []
    for nprobe in candidates:
        apply_search_params(index, nprobe=nprobe)
        labels, qps64, cpu_ms = batch64(index, queries)
        recall = recall_at_k(labels, truth)
        sweep.append({"nprobe": nprobe, "recall": round(recall, 4), "qps_batch64": round(qps64, 1),
                      "cpu_ms_per_query": round(cpu_ms, 3),
                      "qps_batch1": round(batch1(index, queries, args.seconds), 1)})
        print(json.dumps(sweep[-1]), file=sys.stderr)
        if recall >= 0.995 and nprobe >= tuned:
            break
    lookup = lookups(documents, labels)
    print(json.dumps({"open_seconds": round(open_seconds, 2), "after_open": after_open, "at_end": status(os.getpid()),
                      "tuned_nprobe": tuned, "nlist": nlist, "sweep": sweep, "lookups": lookup,
                      "queries": len(queries)}))


if __name__ == "__main__":
    main()
