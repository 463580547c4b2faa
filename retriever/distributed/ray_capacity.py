"""Sizing a Ray worker pool: the CPUs (GPUs) a cluster offers, or a local Ray will, how many workers fit, and
saying when some of them must wait for room other work holds. Connecting is ``ray_runtime``'s."""
from __future__ import annotations

import os
import sys
from types import ModuleType

from retriever.distributed.ray_runtime import starts_local_ray
from retriever.errors import RetrieverError


def cluster_cpus_and_gpus(ray: ModuleType) -> tuple[int, int]:
    """Whole CPUs and GPUs the connected cluster offers, to size a worker pool."""
    resources = ray.cluster_resources()
    return int(resources.get("CPU", 0)), int(resources.get("GPU", 0))


def cpu_workers(ray: ModuleType, workers: int | None, cpus_per_worker: int) -> int:
    """How many CPU workers of ``cpus_per_worker`` cores to run: ``workers``, or as many as the cluster holds."""
    return _cpu_capacity(cluster_cpus_and_gpus(ray)[0], workers, cpus_per_worker)


def local_cpus(num_cpus: int | None = None) -> int | None:
    """The CPUs a local Ray started by ``ray_session`` will offer, known before starting it: ``num_cpus`` when given,
    else Ray's own count (the machine's, or a container's CPU quota); None when the environment overrides Ray's
    resources, or Ray no longer has that function (then only the cluster says, once started)."""
    if num_cpus is not None:
        return num_cpus
    if os.environ.get("RAY_OVERRIDE_RESOURCES"):
        return None
    try:
        from ray._private.utils import get_num_cpus  # what ray.init counts; private, hence the fallback
        return int(get_num_cpus(override_docker_cpu_warning=True))
    except (ImportError, AttributeError, TypeError):
        return None


def check_local_cpus(address: str | None, workers: int | None, cpus_per_worker: int,
                     num_cpus: int | None = None) -> None:
    """``cpu_workers``' refusal before a local Ray is started (no address, no session open), with the same words:
    refused after the start, it came after many seconds. A cluster's CPUs are known only once connected."""
    if not starts_local_ray(address):
        return
    cpus = local_cpus(num_cpus)
    if cpus is not None:
        _cpu_capacity(cpus, workers, cpus_per_worker)


def _cpu_capacity(cpus: int, workers: int | None, cpus_per_worker: int) -> int:
    """``cpu_workers`` on a count of ``cpus``: refuse more workers than fit."""
    capacity = cpus // cpus_per_worker
    if capacity < 1:
        raise RetrieverError(f"the Ray cluster has {cpus} CPUs, fewer than --ray-cpus-per-worker {cpus_per_worker}")
    if workers is not None and workers > capacity:
        raise RetrieverError(f"--ray-workers {workers} needs more than the cluster's {cpus} CPUs at {cpus_per_worker} "
                             f"per worker (room for {capacity}); lower --ray-workers or --ray-cpus-per-worker")
    return capacity if workers is None else workers


def tasks_per_node(ray: ModuleType, tasks: int, cpus_per_worker: int) -> int:
    """The most of ``tasks`` running at once (each of ``cpus_per_worker`` CPUs) that Ray can place on one node: those
    share that node's memory. The largest live node's room, so a cluster of small nodes is not counted as one."""
    room = max((int(node.get("Resources", {}).get("CPU", 0)) // cpus_per_worker for node in ray.nodes()
                if node.get("Alive")), default=tasks)
    return max(1, min(tasks, room))


def default_workers(capacity: int, free: int) -> int:
    """Workers to start when --ray-workers is not given: as many as the cluster has room for now, when other work
    (another run, another user's job) holds part of it; as many as it holds when it has room for none now (they
    wait, and the pool says so). Sized on the totals alone, the workers other work left no room for waited for it
    in silence, and the others with them."""
    return free if 1 <= free < capacity else capacity


def say_if_waiting(ray: ModuleType, workers: int, what: str, resource: str, per_worker: int) -> None:
    """Say on stderr, before starting them, how many of ``workers`` will wait for CPUs (GPUs) that other work on the
    cluster holds: Ray waits for them as long as that takes, and the run showed nothing meanwhile."""
    free = int(ray.available_resources().get(resource, 0))
    waiting = workers - free // per_worker
    if waiting > 0:
        print(f"{min(waiting, workers)} of {workers} Ray {what} wait for {resource}s that other work on the cluster "
              f"holds ({free} {resource}s free): they start when it lets go (or stop with Ctrl-C; a rerun resumes)",
              file=sys.stderr)
