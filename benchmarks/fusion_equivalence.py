"""Does today's `retriever.fusion.fuse_one` return exactly what an earlier revision's did, and how fast is each?

A rewrite of the fusion for speed must not move a single result: this runs both versions (the old one loaded
from `git show REV:retriever/fusion.py`) on random pairs of rankings with many score ties, padding and every
fusion method, and counts the cases where scores or labels differ at all. Then it times both on one
query's two depth-1000 lists over a 5,000-document collection, the shape hybrid search fuses.

Run:
    python benchmarks/fusion_equivalence.py --against 56d04ba
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, stamp  # noqa: E402

from retriever import fusion  # noqa: E402


def fusion_at(revision: str) -> types.ModuleType:
    source = subprocess.run(["git", "show", f"{revision}:retriever/fusion.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(f"fusion_{revision}")
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(source, f"{revision}:retriever/fusion.py", "exec"), module.__dict__)
    return module


def random_cases(count: int, seed: int = 1) -> list[tuple]:
    """Rankings of up to 60 of up to 80 labels, half with scores from a four-value set (ties), BM25-like
    integer scores, -1 padding, and RRF (k 60 and 1) and convex fusions at random weights and k."""
    rng = np.random.default_rng(seed)
    cases = []
    for case in range(count):
        size = int(rng.integers(1, 80))
        first, second = (rng.choice(size, min(int(n), size), replace=False) for n in rng.integers(0, 60, 2))
        dense_scores = rng.choice([0.1, 0.2, 0.3, 0.5], len(first)) if case % 2 else rng.random(len(first))
        padding = int(rng.integers(0, 3))
        dense = (np.r_[np.sort(dense_scores)[::-1], [-np.inf] * padding].astype(np.float32),
                 np.r_[first, [-1] * padding].astype(np.int64))
        lexical = (np.sort(rng.integers(0, 4, len(second)).astype(np.float32))[::-1], second.astype(np.int64))
        for params in (fusion.FusionParams(), fusion.FusionParams("convex", alpha=float(rng.random())),
                       fusion.FusionParams(rrf_k=1.0)):
            cases.append((dense, lexical, params, int(rng.integers(1, 30))))
    return cases


def depth_1000_lists(seed: int = 2) -> tuple[tuple, tuple]:
    rng = np.random.default_rng(seed)
    return ((np.sort(rng.random(1000).astype(np.float32))[::-1], rng.choice(5000, 1000, replace=False)),
            (np.sort((rng.random(1000) * 30).astype(np.float32))[::-1], rng.choice(5000, 1000, replace=False)))


def median_ms(fuse_one, lists: tuple, repeats: int = 500) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fuse_one(*lists, fusion.FusionParams(), 10)
        times.append(time.perf_counter() - started)
    return float(np.median(times)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="Git revision whose retriever/fusion.py to compare with.")
    parser.add_argument("--cases", type=int, default=3000, help="Random ranking pairs (each fused three ways).")
    args = parser.parse_args()
    old = fusion_at(args.against)
    cases = random_cases(args.cases)
    differing = 0
    for dense, lexical, params, k in cases:
        old_scores, old_labels = old.fuse_one(dense, lexical, old.FusionParams(**params.record()), k)
        new_scores, new_labels = fusion.fuse_one(dense, lexical, params, k)
        differing += not (np.array_equal(old_scores, new_scores) and np.array_equal(old_labels, new_labels))
    lists = depth_1000_lists()
    print(stamp())
    print(f"fuse_one against {args.against}: {differing} of {len(cases)} fusions differ (scores or labels)")
    print(f"one query, two depth-1000 lists, RRF, k 10, median of 500: {args.against} "
          f"{median_ms(old.fuse_one, lists):.3f} ms, now {median_ms(fusion.fuse_one, lists):.3f} ms")
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
