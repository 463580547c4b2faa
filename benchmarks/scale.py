"""Scale benchmark: an ivf-ondisk index over N × 384 hard synthetic vectors (default 10M, 15 GB).

Steps, each skipped when its output exists (rerun after a crash to continue):
  1. shards + small-text corpus, streamed (benchmarks/scale_data.py);
  2. `retriever index --index-type ivf-ondisk --target-recall 0.9` in a child process, its tree's
     RssAnon/RssFile/VmHWM sampled every 0.5 s (benchmarks/procmem.py);
  3. exact top-10 of the benchmark queries by one streaming pass over the shards;
  4. a search child that opens the index the way `search`/`serve` do (memory-mapped) and sweeps
     nprobe: recall@10 against exact, QPS at batch 1 and 64, its own memory sampled meanwhile.

Run: nice -n 10 python benchmarks/scale.py                      # 10M (hours on 2 shared cores)
     python benchmarks/scale.py --n 1000000 --nlist 1024 --train-size 100000   # development size
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling modules from any cwd

import numpy as np  # noqa: E402

from common import REPO, stamp  # noqa: E402
from procmem import PeakSampler  # noqa: E402
from scale_data import write_collection  # noqa: E402
from scale_report import write_report  # noqa: E402
from synthetic import SyntheticCollection, SyntheticSpec  # noqa: E402

from retriever.files import write_json  # noqa: E402

WORK = REPO / "benchmarks" / ".work" / "scale"


def build(shards: Path, corpus: Path, index: Path, args: argparse.Namespace) -> dict:
    """Build the index in a child process (skipped if built); wall time and the tree's peak memory."""
    record = index.with_name(index.name + ".build.json")
    if (index / "manifest.json").is_file() and record.is_file():
        return json.loads(record.read_text())
    command = [sys.executable, "-m", "retriever", "index", str(shards), "--corpus", str(corpus), "-o", str(index),
               "--index-type", "ivf-ondisk", "--nlist", str(args.nlist), "--train-size", str(args.train_size),
               "--part-size", str(args.part_size), "--ondisk-codes", args.codes, "--target-recall", "0.9",
               "--overwrite"]
    started = time.perf_counter()
    child = subprocess.Popen(command)
    with PeakSampler(child.pid) as sampler:
        if child.wait():
            raise SystemExit(f"index build failed ({child.returncode}): {' '.join(command)}")
    result = {"command": " ".join(["python", "-m", "retriever", *command[3:]]).replace(f"{REPO}/", ""),
              "seconds": round(time.perf_counter() - started, 1), **sampler.summary()}
    write_json(record, result)
    return result


def exact_truth(shards: Path, queries: np.ndarray, path: Path) -> np.ndarray:
    """Exact top-10 labels (shards of one worker: label = row), cached beside the shards."""
    if path.is_file():
        return np.load(path)
    from retriever.shards import list_shards
    from retriever.exact import exact_neighbours

    started = time.perf_counter()
    truth = exact_neighbours(list_shards(shards), queries, 10)
    print(f"exact top-10 of {len(queries)} queries: {time.perf_counter() - started:.0f}s", file=sys.stderr)
    np.save(path, truth)
    return truth


def search(index: Path, queries: Path, truth: Path, args: argparse.Namespace) -> dict:
    """Run the search child under the memory sampler; its JSON report plus what was sampled."""
    command = [sys.executable, str(Path(__file__).resolve().parent / "scale_search.py"), str(index), str(queries),
               str(truth), "--max-nprobe", str(args.max_nprobe), "--seconds", str(args.seconds)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    with PeakSampler(child.pid, interval=0.5) as sampler:
        output, _ = child.communicate()
    if child.returncode:
        raise SystemExit(f"search child failed ({child.returncode})")
    return {**json.loads(output), "sampled": sampler.summary()}


def disk_bytes(path: Path) -> int:
    """Bytes on disk of a file, or of everything in a folder (the BM25 part is a folder)."""
    files = [path] if path.is_file() else [child for child in path.rglob("*") if child.is_file()]
    return sum(child.stat().st_blocks * 512 for child in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000_000, help="collection size")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--shard-size", type=int, default=100_000)
    parser.add_argument("--nlist", type=int, default=4096)
    parser.add_argument("--train-size", type=int, default=200_000)
    parser.add_argument("--part-size", type=int, default=500_000)
    parser.add_argument("--codes", default="sq8")
    parser.add_argument("--max-nprobe", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=5.0, help="batch-1 timing budget per nprobe")
    parser.add_argument("--output", type=Path, default=None, help="report [default: results/scale_<N>.md]")
    args = parser.parse_args()
    header = stamp()
    spec = SyntheticSpec()
    shards, corpus = write_collection(WORK, args.n, args.shard_size, spec)
    index = WORK / f"index-{args.n}-ivf{args.nlist}-{args.codes}"
    built = build(shards, corpus, index, args)
    queries = SyntheticCollection(spec).queries(args.queries)
    queries_path = WORK / f"queries-{args.queries}.npy"
    np.save(queries_path, queries)
    truth_path = WORK / f"truth-{args.n}-{args.queries}.npy"
    exact_truth(shards, queries, truth_path)
    searched = search(index, queries_path, truth_path, args)
    manifest = json.loads((index / "manifest.json").read_text())
    sizes = {path.name: disk_bytes(path) for path in index.iterdir()}
    shard_bytes = sum(path.stat().st_size for path in shards.glob("*.parquet"))
    output = args.output or REPO / "benchmarks" / "results" / f"scale_{args.n}.md"
    write_report(output, header, args, manifest, built, searched, sizes, shard_bytes)
    print(output.read_text())


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(REPO))
    main()
