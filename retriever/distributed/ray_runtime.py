"""Connecting to Ray: a local Ray on this machine's cores, or an existing cluster.

Ray is an optional extra, so it is imported here only, when a command asks for it, and a
missing install becomes a one-line error that says how to add it. Every command that takes
``--ray [ADDRESS]`` opens its session through :func:`ray_session`.
"""
from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TypeVar

from retriever.errors import RetrieverError

LOCAL = "local"
# Ray restarts a dead worker (actor or task) and re-runs its unfinished work this many times before the run
# fails (a rerun then resumes after the work already written).
MAX_RETRIES = 3
_Result = TypeVar("_Result")
INSTALL_HINT = "pip install 'retriever[ray]' (in a checkout: pip install -e '.[ray]')"
ADDRESS_HELP = ("Run on Ray. Without a value: a local Ray on this machine's cores; 'auto' joins the cluster this "
                "machine belongs to (`ray start`); 'ray://HOST:10001' or 'HOST:PORT' joins a remote one.")
_ADDRESS = re.compile(r"^(auto|local|ray://[^\s/]+|[\w.-]+:\d+)$")


def require_ray() -> ModuleType:
    """The ray module, or an error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RetrieverError(f"--ray needs Ray, which is not installed; run: {INSTALL_HINT}") from None
    return ray


def check_address(address: str | None) -> str:
    """``local`` for no address; otherwise the address if it has a form Ray accepts."""
    if not address:
        return LOCAL
    if not _ADDRESS.match(address):
        raise RetrieverError(f"--ray {address!r} is not a Ray address; give auto, ray://HOST:PORT or HOST:PORT, "
                             "or no value for a local Ray (put --ray after the corpus, or write --ray=auto)")
    return address


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[ModuleType]:
    """Ray connected for the duration of the block.

    A session already open in this process (a test's, or a caller's) is used as it is and left open;
    a session opened here is shut down on the way out. ``num_cpus`` caps a local Ray only: a cluster
    has the resources it was started with.
    """
    ray = require_ray()
    address = check_address(address)
    if ray.is_initialized():
        yield ray
        return
    options: dict = {"logging_level": logging.WARNING}
    if address == LOCAL:
        options.update(num_cpus=num_cpus, include_dashboard=False)
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as error:  # what ray.init raises for an unreachable cluster
        raise RetrieverError(f"could not connect to Ray at {address!r} ({str(error).splitlines()[0]}); start a "
                             "cluster with `ray start --head`, or pass --ray without a value for a local Ray") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def cluster_cpus_and_gpus(ray: ModuleType) -> tuple[int, int]:
    """Whole CPUs and GPUs the connected cluster offers, to size a worker pool."""
    resources = ray.cluster_resources()
    return int(resources.get("CPU", 0)), int(resources.get("GPU", 0))


def cpu_workers(ray: ModuleType, workers: int | None, cpus_per_worker: int) -> int:
    """How many CPU workers of ``cpus_per_worker`` cores to run: ``workers``, or as many as the cluster holds."""
    cpus, _ = cluster_cpus_and_gpus(ray)
    capacity = cpus // cpus_per_worker
    if capacity < 1:
        raise RetrieverError(f"the Ray cluster has {cpus} CPUs, fewer than --ray-cpus-per-worker {cpus_per_worker}")
    if workers is not None and workers > capacity:
        raise RetrieverError(f"--ray-workers {workers} needs more than the cluster's {cpus} CPUs at {cpus_per_worker} "
                             f"per worker (room for {capacity}); lower --ray-workers or --ray-cpus-per-worker")
    return capacity if workers is None else workers


def unwrapped(ray: ModuleType, call: Callable[[], _Result]) -> _Result:
    """Run ``call``; a RetrieverError raised in a Ray worker comes out as itself, one line, not a remote traceback."""
    try:
        return call()
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, RetrieverError):
            raise error.cause from None
        raise
