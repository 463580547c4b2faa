"""Encoding on a local Ray with N workers against one process, in one run: same shards, and speed.

Both runs use the same encoder, dtype, batch size and --shard-size, so they must give the same
files with the same ids; the script reports the largest vector difference and each run's docs/s
(encoding only, and wall time including Ray's start and the actors' model loading). One process
runs twice, on --cpus-per-worker threads as each Ray worker does, and on every core: in bf16 the
thread count changes the kernels' summation order and so the low bits of the vectors.
Run: python benchmarks/ray_encode.py [--dataset scifact | PATH] [--workers 2] [--shard-size 500]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from common import dataset_path, stamp
from retriever.corpus_encoding import encode_corpus
from retriever.distributed.ray_encoding import ray_encoder_pool
from retriever.encoder import Encoder, EncoderSettings
from retriever.shards import list_shards, read_shard, read_shard_metadata


def one_process(corpus: Path, output: Path, settings: EncoderSettings, args, threads: int) -> dict:
    torch.set_num_threads(threads)
    started = time.perf_counter()
    encoder = Encoder(settings, dtype=args.dtype, batch_size=args.batch_size)
    result = encode_corpus(corpus, output, encoder, shard_size=args.shard_size)
    return {"docs": result.encoded, "encode_s": result.seconds, "wall_s": time.perf_counter() - started,
            "dtype": encoder.dtype}


def on_ray(corpus: Path, output: Path, settings: EncoderSettings, args) -> dict:
    started = time.perf_counter()
    with ray_encoder_pool(None, settings, "cpu", args.dtype, args.batch_size, args.workers,
                          args.cpus_per_worker) as pool:
        result = encode_corpus(corpus, output, pool, shard_size=args.shard_size)
        dtype = pool.metadata()["dtype"]
    return {"docs": result.encoded, "encode_s": result.seconds, "wall_s": time.perf_counter() - started,
            "dtype": dtype}


def compare(ray_folder: Path, reference: Path) -> tuple[bool, bool, float]:
    """(same file names, same ids in each file, max |vector difference|)."""
    ray_shards, reference_shards = list_shards(ray_folder), list_shards(reference)
    same_names = [p.name for p in ray_shards] == [p.name for p in reference_shards]
    same_ids, max_diff = same_names, 0.0
    for path, expected in zip(ray_shards, reference_shards):
        ids, vectors = read_shard(path)
        expected_ids, expected_vectors = read_shard(expected)
        same_ids = same_ids and ids == expected_ids and read_shard_metadata(path) == read_shard_metadata(expected)
        max_diff = max(max_diff, float(np.abs(vectors - expected_vectors).max()))
    return same_names, same_ids, max_diff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scifact", help="name under ../shared/datasets, or a BEIR folder")
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--shard-size", type=int, default=500, help="parts are what the Ray workers share out")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cpus-per-worker", type=int, default=1)
    args = parser.parse_args()
    corpus = Path(args.dataset) if Path(args.dataset).is_dir() else dataset_path(args.dataset)
    settings = EncoderSettings.for_model(args.model)
    print(stamp())
    print(f"load average before: {os.getloadavg()[0]:.1f} (the machine is shared with other jobs)")
    print(f"corpus: {corpus}, shard size {args.shard_size}; the runs go one after the other, each once")
    print("| run | dtype | docs | encode s | docs/s (encode) | wall s (incl. start-up) | docs/s (wall) |")
    print("|---|---|---|---|---|---|---|", flush=True)
    cores = os.cpu_count()
    with tempfile.TemporaryDirectory() as work:
        ray_folder = Path(work) / "ray"
        report(f"Ray, {args.workers} workers x {args.cpus_per_worker} core",
               on_ray(corpus, ray_folder, settings, args))
        for threads in (args.cpus_per_worker, cores):  # the slow one last: oversubscribed threads spin
            folder = Path(work) / f"threads-{threads}"
            name = f"one process, {threads} thread{'s' if threads > 1 else ''}"
            report(name, one_process(corpus, folder, settings, args, threads))
            same_names, same_ids, max_diff = compare(ray_folder, folder)
            print(f"    Ray vs {name}: same shard files: {same_names}; same ids and metadata in each: {same_ids}; "
                  f"max |vector difference|: {max_diff:.2e}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def report(name: str, run: dict) -> None:
    print(f"| {name} | {run['dtype']} | {run['docs']} | {run['encode_s']:.1f} | {run['docs'] / run['encode_s']:.1f} | "
          f"{run['wall_s']:.1f} | {run['docs'] / run['wall_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
