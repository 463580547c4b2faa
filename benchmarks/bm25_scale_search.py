"""Search child of benchmarks/bm25_scale.py: opens an index folder's BM25 part the way search does and times
single BM25 queries.

Prints one JSON object: the open's time and the RssAnon/RssFile it added (measured after the imports, so
only the part's own cost counts), and the latency of one-query searches whose texts are random passages'.
With --json-vocabulary it instead measures loading bm25s's JSON vocabulary, the open of folders built before
the sorted vocabulary, in a process of its own so that memory is not counted as the searches'.
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

import bm25s  # noqa: E402  (imported by the open; loaded here so its import is not counted)
from procmem import status  # noqa: E402
from scale_data import passage_text  # noqa: E402

from retriever.index_folder import read_manifest  # noqa: E402
from retriever.lexical import LEXICAL_DIR  # noqa: E402
from retriever.lexical_build import SORTED_VOCAB_FILE  # noqa: E402
from retriever.searching import open_lexical  # noqa: E402  (the open Searcher makes for --mode bm25/hybrid)

WARMUP = 5


def opened(index: Path):
    """The part, opened as search opens it, and what the open cost."""
    manifest = read_manifest(index)
    before = status(os.getpid())
    started = time.perf_counter()
    lexical = open_lexical(index, manifest)
    seconds = time.perf_counter() - started
    after = status(os.getpid())
    return lexical, {"seconds": round(seconds, 4), "before": before, "after": after,
                     "added_rss_anon": after["RssAnon"] - before["RssAnon"],
                     "added_rss_file": after["RssFile"] - before["RssFile"]}


def json_vocabulary_load(part: Path) -> dict:
    """What opening cost before the part held a sorted vocabulary: bm25s's JSON vocabulary loaded into a dict (the
    path folders built before it still take). Measured after the mapped open, whose maps it shares."""
    before = status(os.getpid())
    started = time.perf_counter()
    model = bm25s.BM25.load(str(part), mmap=True, load_vocab=True)
    seconds = time.perf_counter() - started
    after = status(os.getpid())
    return {"seconds": round(seconds, 2), "terms": len(model.vocab_dict),
            "added_rss_anon": after["RssAnon"] - before["RssAnon"]}


def query_terms(lexical, text: str) -> dict:
    """How many known terms a query holds, and how many of them every passage holds (each such term makes the
    query score every passage)."""
    ids, _ = lexical.term_counts(lexical.tokenize(text))
    indptr = lexical._postings[2]
    return {"terms": len(ids), "in_every_passage": sum(int(indptr[i + 1] - indptr[i]) == lexical.count for i in ids)}


def timed_queries(lexical, count: int) -> dict:
    """Latency of ``count`` one-query searches for random passages' texts, after a few warm-up ones."""
    rows = np.random.default_rng(0).integers(0, lexical.count, WARMUP + count)
    texts = [passage_text(int(row)) for row in rows]
    for text in texts[:WARMUP]:
        lexical.search([text], 10)
    latencies, found_first = [], 0
    for row, text in zip(rows[WARMUP:], texts[WARMUP:]):
        started = time.perf_counter()
        _, hits = lexical.search([text], 10)
        latencies.append((time.perf_counter() - started) * 1000)
        found_first += int(hits[0, 0] == row)  # doc-store row = passage number here
    ms = np.array(latencies)
    return {"queries": count, "warmup": WARMUP, "found_first": found_first,
            "first_query": query_terms(lexical, texts[WARMUP]),
            "latency_ms": {"p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90)),
                           "max": float(ms.max())}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index", type=Path)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json-vocabulary", action="store_true",
                        help="after the open, measure only loading bm25s's JSON vocabulary (run in its own process, "
                             "so its memory is not counted as the searches')")
    args = parser.parse_args()
    lexical, cost = opened(args.index)
    part = args.index / lexical.record.get("directory", LEXICAL_DIR)
    if args.json_vocabulary:
        print(json.dumps(json_vocabulary_load(part)))
        return
    print(json.dumps({"open": cost, "mapped_vocabulary": (part / SORTED_VOCAB_FILE).is_file(),
                      **timed_queries(lexical, args.queries)}))


if __name__ == "__main__":
    main()
