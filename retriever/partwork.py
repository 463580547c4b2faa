"""The work folder of an ``ivf-ondisk`` build, ``OUTPUT.parts/``, which makes the build resumable.

The trained quantizer and each finished part are kept there until the index is in place, beside
a record of the build's inputs (shards, encoder, factory, sample and part settings). A rerun
after a crash reuses what the record says is the same and skips the finished parts; a record
that differs means other inputs, and the folder is emptied and rebuilt, never reused.
Parts are filled by Ray tasks with ``--ray``, else by worker processes.
"""
from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from retriever.errors import RetrieverError
from retriever.ivfparts import ShardSlice, fill_part
from retriever.files import atomic_write, read_json, write_json
from retriever.shards import VECTOR_FIELDS, read_shard_metadata

_PR_SET_PDEATHSIG = 1
INPUTS_FILE = "inputs.json"
TRAINED_FILE = "trained.faiss"


def parts_folder(output: Path) -> Path:
    return output.with_name(output.name + ".parts")


def inputs_record(shards: list[Path], encoder: dict, spec: str, params, held: np.ndarray) -> dict:
    """What the trained quantizer and the parts depend on: equal records, interchangeable parts."""
    records = [read_shard_metadata(shard)["shard"] for shard in shards]
    return {"shards": [[shard.name, shard.stat().st_size, record["rows"], record["content_sha256"]]
                       for shard, record in zip(shards, records)],
            "encoder": {name: encoder.get(name) for name in VECTOR_FIELDS}, "factory": spec,
            "train_size": params.train_size, "seed": params.seed, "part_size": params.part_size,
            "held_rows_sha256": hashlib.sha256(np.asarray(held, np.int64).tobytes()).hexdigest(),
            "faiss": faiss.__version__}


class PartsFolder:
    """``OUTPUT.parts/`` for one set of inputs: emptied first if it holds another build's parts."""

    def __init__(self, folder: Path, inputs: dict) -> None:
        self.folder = folder
        if folder.is_dir() and any(folder.iterdir()):
            recorded = self._recorded()
            if recorded is None:
                raise RetrieverError(f"{folder}: exists and is not the parts folder of an ivf-ondisk build; "
                                     "move it away or choose another --output")
            if recorded != inputs:
                print(f"{folder}: its parts were built from other inputs (shards or index settings); rebuilding "
                      "them", file=sys.stderr)
                shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for leftover in folder.glob(".*.tmp-*"):  # a killed worker's unfinished file (see files.temporary_path)
            leftover.unlink()
        write_json(folder / INPUTS_FILE, inputs)

    def _recorded(self) -> dict | None:
        try:
            return read_json(self.folder / INPUTS_FILE)
        except RetrieverError:  # missing or unreadable: the parts are rebuilt
            return None

    @property
    def trained(self) -> Path:
        return self.folder / TRAINED_FILE

    def save_trained(self, index: faiss.Index) -> None:
        atomic_write(self.trained, lambda tmp: faiss.write_index(index, str(tmp)))

    def part(self, number: int) -> Path:
        return self.folder / f"part-{number:05d}.faiss"


def check_part_settings(params) -> None:
    if params.part_size < 1 or (params.parallel_parts is not None and params.parallel_parts < 1):
        raise RetrieverError("--part-size and --parallel-parts must be at least 1")
    if params.ray_address is not None and params.parallel_parts is not None:
        raise RetrieverError("--parallel-parts sets worker processes on this machine; with --ray, parts are Ray tasks: "
                             "use --ray-workers and --ray-cpus-per-worker instead")
    if params.ray_address is not None:  # before the corpus pass and training, not after
        from retriever.distributed.ray_runtime import check_address, require_ray

        require_ray()
        check_address(params.ray_address)


def fill_parts(work: PartsFolder, parts: list[list[ShardSlice]], params, progress: bool = True) -> list[str]:
    """Fill the parts not finished yet (Ray tasks with ``params.ray_address``, else processes); return
    every part's file, in order."""
    # absolute paths: a Ray worker (on another node, too) does not run in this process's folder
    todo = [(str(work.trained.resolve()), slices, str(work.part(number).resolve()))
            for number, slices in enumerate(parts) if not work.part(number).is_file()]
    if len(todo) < len(parts):
        print(f"resuming: {len(parts) - len(todo)} of {len(parts)} parts already built in {work.folder}",
              file=sys.stderr)
    with tqdm(total=len(parts), initial=len(parts) - len(todo), desc="fill parts", unit="part", file=sys.stderr,
              disable=not progress) as bar:
        if todo and params.ray_address is not None:
            from retriever.distributed.ray_parts import fill_parts_on_ray

            fill_parts_on_ray(params.ray_address, todo, params.ray_workers, params.ray_cpus_per_worker,
                              lambda: bar.update(1))
        elif todo:
            fill_in_processes(todo, min(params.parallel_parts or os.cpu_count() or 1, len(todo)),
                              lambda: bar.update(1))
    return [str(work.part(number)) for number in range(len(parts))]


def fill_in_processes(jobs: list[tuple], workers: int, finished: Callable[[], None]) -> None:
    """``fill_part`` for each job in ``workers`` processes (here, for one), each with its share of the cores."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    if workers == 1:
        for job in jobs:
            fill_part(*job, threads)
            finished()
        return
    # spawn, not fork: a forked child of a process that already ran OpenMP (training) can hang.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=die_with_parent,
                             initargs=(os.getpid(),)) as pool:
        for future in as_completed([pool.submit(fill_part, *job, threads) for job in jobs]):
            future.result()
            finished()


def die_with_parent(parent: int) -> None:
    """A part worker's initializer: exit when the build that started it dies. A killed parent (SIGKILL, OOM)
    cannot stop its pool, and the workers would otherwise wait for work, or keep filling parts, for ever.
    Linux kills the worker with the parent (``PR_SET_PDEATHSIG``); elsewhere a thread watches the parent id."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (AttributeError, OSError):
            pass
    if os.getppid() != parent:  # died before the request above: nothing will signal it now
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="watch-parent").start()


def _watch_parent(parent: int, every: float = 1.0) -> None:
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)
