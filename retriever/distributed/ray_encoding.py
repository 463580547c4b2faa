"""Encoding on Ray: a pool of actors, each holding one encoder, fed the parts of ``encode_corpus``.

The driver streams the corpus and cuts it into the same parts, with the same names and metadata,
as a one-process run; each actor runs the same per-part step (:func:`retriever.corpus_encoding.encode_part`),
so the shards are the files one process would have written. At most one part per actor is in
flight, so the driver never holds more than that many parts. An actor whose process dies is
restarted by Ray and its part retried; a part whose shard exists is reused, as in one process.
Actors write the shards themselves, so on a cluster ``--output`` must be a folder every node sees. Actors
do not run in the driver's working directory, so they are handed absolute paths (shards, a local model
folder), and each shard an actor reports is checked to be in ``--output`` as the driver sees it.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from retriever.corpus import Document
from retriever.device import parsed_device, resolve_batch_size, resolve_dtype
from retriever.corpus_encoding import PartJob, encode_part
from retriever.distributed.ray_capacity import (check_local_cpus, cluster_cpus_and_gpus, cpu_workers, default_workers,
                                                say_if_waiting)
from retriever.distributed.ray_runtime import MAX_RETRIES, ray_session, starts_local_ray, unwrapped
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError, home_expanded
from retriever.model_names import MODEL_ALIASES
from retriever.shards import differing_fields
from retriever.texts import whole_number

# How long closing a pool waits for its actors' CPUs (GPUs) to come back: a local Ray frees them within a second,
# and on a busy cluster other work may take them at once, so they never show as free.
RELEASE_SECONDS = 3.0
# An actor's encode_part result: (outcome, rows, the shard's size and mtime as the actor sees them).
PartResult = tuple[str, int, int, float]


class EncoderActor:
    """One encoder in one Ray worker process."""

    def __init__(self, settings: dict, device: str, dtype: str, batch_size: int | None, threads: int) -> None:
        if threads:
            import torch

            torch.set_num_threads(threads)
        try:
            self.encoder = Encoder(EncoderSettings(**settings), device=device, dtype=dtype, batch_size=batch_size)
        except RetrieverError as error:  # raised from a method, Ray hands the driver the error itself
            self.error = error
        else:
            self.error = None

    def metadata(self) -> dict:
        return self._loaded().metadata()

    def _loaded(self) -> Encoder:
        """The encoder, or the one-line error that stopped it loading: Ray restarts a dead worker by running
        ``__init__`` again, so the error can come at any part, not only at the pool's start."""
        if self.error is not None:
            raise self.error
        return self.encoder

    def pid(self) -> int:
        return os.getpid()

    def encode_part(self, part: list[Document], path: str, metadata: dict) -> PartResult:
        """``encode_part`` here, by an encoder that makes the vectors ``metadata`` records (``_agreeing``)."""
        outcome = encode_part(self._agreeing(metadata), part, Path(path), metadata)
        written = os.stat(path)
        return outcome, len(part), written.st_size, written.st_mtime

    def encode_queries(self, texts: list[str], metadata: dict) -> np.ndarray:
        """Query vectors (a build's tuning queries) to search the shards ``metadata`` records with (``_agreeing``)."""
        return self._agreeing(metadata).encode_queries(texts)

    def _agreeing(self, metadata: dict) -> Encoder:
        """The encoder, if it makes the vectors ``metadata`` records. Agreed at the pool's start, a worker restarted
        since loaded the model again (on a cluster, maybe on another node): a folder retrained in place wrote the new
        model's vectors under the old one's record, and tuned the index on the new model's query vectors."""
        diffs = differing_fields(metadata, self._loaded().metadata())
        if diffs:
            raise RetrieverError(f"a Ray worker restarted during the run would make other vectors than its shards "
                                 f"record ({'; '.join(diffs)}): the model folder changed, or differs on the node it "
                                 "restarted on; restore the model the run started with on every node and rerun the "
                                 "same command to resume (finished parts are kept)")
        return self.encoder


def actor_settings(settings: EncoderSettings) -> dict:
    """The settings as actors get them: a local model folder by its absolute path (an alias or hub id as is)."""
    values = settings.to_dict()
    model = home_expanded(values["model"])
    if values["model"] not in MODEL_ALIASES and model.exists():
        values["model"] = os.path.abspath(model)
    return values


def check_shard(shard: Path, size: int, mtime: float) -> None:
    """That the shard an actor reports writing is the file the driver sees at ``shard``."""
    try:
        seen = shard.stat()
    except OSError:
        seen = None
    if seen is None or seen.st_size != size or abs(seen.st_mtime - mtime) > 2:
        raise RetrieverError(f"{shard}: a Ray worker wrote this shard but the driver does not see it there; --output "
                             "must be a folder the driver and every Ray node see at the same path (e.g. NFS)")


def plan_workers(ray: ModuleType, device: str, workers: int | None, cpus_per_worker: int) -> tuple[int, int, str]:
    """(workers, GPUs per worker, actor device): one GPU per actor where the cluster has GPUs, else CPUs."""
    _, gpus = cluster_cpus_and_gpus(ray)
    if gpus and device != "cpu":
        if device.startswith("cuda:") and device != "cuda:0":  # an actor sees only the GPU Ray gives it, as cuda:0
            raise RetrieverError(f"--device {device} names a GPU of this machine; on Ray each encoder worker is given a "
                                 "GPU of its own: pass --device cuda (or leave --device out)")
        if workers is not None and workers > gpus:
            raise RetrieverError(f"--ray-workers {workers} needs more than the cluster's {gpus} GPUs; "
                                 "lower --ray-workers")
        return workers if workers is not None else default_workers(gpus, _free(ray, "GPU", 1)), 1, device
    if device.startswith("cuda"):
        raise _no_gpu(device, "the Ray cluster has no GPU")
    count = cpu_workers(ray, workers, cpus_per_worker)
    return count if workers is not None else default_workers(count, _free(ray, "CPU", cpus_per_worker)), 0, "cpu"


def _no_gpu(device: str, where: str) -> RetrieverError:
    return RetrieverError(f"--device {device} was asked for but {where}; use --device cpu")


def check_actor_encoding(device: str, dtype: str, cpu_actors: bool, no_gpu: bool = False) -> None:
    """Refuse a --device no node can have (a name but auto, cpu, cuda and cuda:N: ``plan_workers`` took any such as the
    CPU, and encoded there, exit 0), a GPU when ``no_gpu`` (a local Ray on a machine without CUDA), and, for
    ``cpu_actors``, a --dtype the CPU lacks (fp16: each actor refused it as it started, after Ray had), as one
    process refuses them (``device``), before any actor starts."""
    if device != "auto":
        parsed_device(device)
    if no_gpu and device.startswith("cuda"):  # before the dtype: fp16 is no fault of a GPU's
        raise _no_gpu(device, "this machine has no GPU (CUDA is not available) for the local Ray started here")
    if cpu_actors:
        resolve_dtype(dtype, torch.device("cpu"))


def pool_size(workers: object, cpus_per_worker: object) -> tuple[int | None, int]:
    """``workers`` (None: as many as fit) and ``cpus_per_worker`` as whole numbers of at least 1, as the CLI's flags
    take them: from the library, 0 workers started Ray and failed on the metadata of no actors (IndexError), and 0 CPUs
    a worker divided by zero."""
    return (None if workers is None else whole_number(workers, "--ray-workers", 1),
            whole_number(cpus_per_worker, "--ray-cpus-per-worker", 1))


def _free(ray: ModuleType, resource: str, per_worker: int) -> int:
    """Workers of ``per_worker`` CPUs (GPUs) the cluster has room for now."""
    return int(_available(ray, resource)) // per_worker


class RayEncoderPool:
    """Encoder actors that take parts as ``encode_corpus`` streams them; passed where an Encoder would be."""

    def __init__(self, ray: ModuleType, settings: EncoderSettings, device: str = "auto", dtype: str = "auto",
                 batch_size: int | None = None, workers: int | None = None, cpus_per_worker: int = 1) -> None:
        self.ray = ray
        workers, cpus_per_worker = pool_size(workers, cpus_per_worker)
        workers, gpus_per_worker, actor_device = plan_workers(ray, device, workers, cpus_per_worker)
        check_actor_encoding(device, dtype, cpu_actors=not gpus_per_worker)
        actor_class = ray.remote(EncoderActor).options(
            num_cpus=0 if gpus_per_worker else cpus_per_worker, num_gpus=gpus_per_worker,
            max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES)
        threads = 0 if gpus_per_worker else cpus_per_worker
        # as each actor's encoder has it: a GPU actor's device may be "auto", which it resolves to its GPU
        self.batch_size = resolve_batch_size(batch_size, torch.device("cuda" if gpus_per_worker else "cpu"))
        self._held = ("GPU", 1) if gpus_per_worker else ("CPU", cpus_per_worker)  # by each actor
        say_if_waiting(ray, workers, "encoder workers", *self._held)
        self.actors = [actor_class.remote(actor_settings(settings), actor_device, dtype, batch_size, threads)
                       for _ in range(workers)]
        self._running: dict = {}  # parts in flight: the task's ref -> (its actor, its shard)
        try:
            self._metadata = self._agreed_metadata()
        except BaseException:  # no caller holds the pool to close it: its actors kept their CPUs in an open session
            self.close()
            raise

    def _agreed_metadata(self) -> dict:
        records = unwrapped(self.ray, lambda: self.ray.get([actor.metadata.remote() for actor in self.actors]),
                            "starting its encoder")
        for record in records[1:]:
            diffs = differing_fields(records[0], record)
            if diffs:
                raise RetrieverError(f"Ray workers would make different vectors ({'; '.join(diffs)}); pass --dtype "
                                     "and --device so every node encodes alike")
        return records[0]

    def metadata(self) -> dict:
        return self._metadata

    def pids(self) -> list[int]:
        return self.ray.get([actor.pid.remote() for actor in self.actors])

    def run_parts(self, jobs: Iterator[PartJob], progress: Callable[[int], None]) -> Iterator[tuple[str, int]]:
        """Encode each job's part on some actor; yield (outcome, rows) per part as parts finish, in any order.

        A new part is read from ``jobs`` only when an actor is free, so the driver holds one part per actor.
        """
        free, running = list(self.actors), {}
        self._running = running  # what close() cancels
        for part, path, metadata in jobs:
            if not free:
                yield self._next_finished(running, free, progress)
            actor, shard = free.pop(), Path(path).absolute()  # absolute: actors run in another folder
            running[actor.encode_part.remote(list(part), str(shard), metadata)] = (actor, shard)
        while running:
            yield self._next_finished(running, free, progress)

    def _next_finished(self, running: dict, free: list, progress: Callable[[int], None]) -> tuple[str, int]:
        [ready], _ = self.ray.wait(list(running), num_returns=1)
        actor, shard = running.pop(ready)
        free.append(actor)
        outcome, rows, size, mtime = unwrapped(self.ray, lambda: self.ray.get(ready), f"encoding part {shard.name}")
        check_shard(shard, size, mtime)
        progress(rows)
        return outcome, rows

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return unwrapped(self.ray, lambda: self.ray.get(self.actors[0].encode_queries.remote(list(texts),
                                                                                          self._metadata)),
                         "encoding queries")

    def close(self) -> None:
        """Let the actors go, and wait (up to ``RELEASE_SECONDS``) for their CPUs (GPUs) to be free again: ray.kill
        returns before they are, and a pool started next in the session was sized on the CPUs still held. Parts
        still in flight (a run stopped by an error, Ctrl-C or SIGTERM) are cancelled first: killed under them, Ray
        printed that each part "will be retried" as the run stopped."""
        for ref in self._running:
            self.ray.cancel(ref)
        self._running.clear()
        resource, per_actor = self._held
        freed = _available(self.ray, resource) + per_actor * len(self.actors)
        for actor in self.actors:
            self.ray.kill(actor)
        deadline = time.monotonic() + RELEASE_SECONDS
        while _available(self.ray, resource) < freed and time.monotonic() < deadline:
            time.sleep(0.05)


def _available(ray: ModuleType, resource: str) -> float:
    return ray.available_resources().get(resource, 0)


@contextlib.contextmanager
def ray_encoder_pool(address: str | None, settings: EncoderSettings, device: str = "auto", dtype: str = "auto",
                     batch_size: int | None = None, workers: int | None = None,
                     cpus_per_worker: int = 1) -> Iterator[RayEncoderPool]:
    """Connect to Ray (see :func:`ray_session`) and start the encoder actors for the duration of the block."""
    workers, cpus_per_worker = pool_size(workers, cpus_per_worker)  # before Ray starts, which takes seconds
    no_gpu = not torch.cuda.is_available() and starts_local_ray(address)  # a local Ray with CPU actors alone
    check_actor_encoding(device, dtype, cpu_actors=device == "cpu" or (device == "auto" and no_gpu), no_gpu=no_gpu)
    if device == "cpu" or not torch.cuda.is_available():  # CPU actors then, on a local Ray's known cores
        check_local_cpus(address, workers, cpus_per_worker)
    with ray_session(address) as ray:
        pool = RayEncoderPool(ray, settings, device, dtype, batch_size, workers, cpus_per_worker)
        try:
            yield pool
        finally:
            pool.close()
