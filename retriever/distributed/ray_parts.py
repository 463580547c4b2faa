"""Filling the parts of an ``ivf-ondisk`` build as Ray tasks (``retriever index --ray``).

Each task runs the same per-part step as a worker process (:func:`retriever.ivfparts.fill_part`):
it reads its shards and the trained quantizer from the paths it is given and writes its part file
under a temporary name, then renames it. So on a cluster the shards and the index's ``--output``
must be on a filesystem every node sees. A task whose worker dies is retried by Ray; at most
``workers`` tasks are in flight, each holding one part's codes.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from retriever.distributed.ray_capacity import cpu_workers, tasks_per_node
from retriever.distributed.ray_runtime import MAX_RETRIES, ray_session, unwrapped
from retriever.ivfparts import fill_part


def fill_parts_on_ray(address: str, jobs: list[tuple], workers: int | None, cpus_per_worker: int,
                      finished: Callable[[], None], task: Callable = fill_part) -> None:
    """Run ``task(*job, cpus_per_worker, sharing, "--ray-workers")`` for each job as a Ray task; call ``finished`` as
    each ends. ``sharing``: the most tasks one node runs at once, which share its memory in the part's memory check
    (each task checked its part against all of it, so tasks that fit alone started together and ran it out)."""
    with ray_session(address) as ray:
        workers = cpu_workers(ray, workers, cpus_per_worker)
        sharing = tasks_per_node(ray, min(workers, len(jobs)), cpus_per_worker)
        remote = ray.remote(task).options(num_cpus=cpus_per_worker, max_retries=MAX_RETRIES)
        waiting, running = list(reversed(jobs)), {}  # running: the task's ref -> the part file it writes
        while waiting or running:
            while waiting and len(running) < workers:
                job = waiting.pop()
                running[remote.remote(*job, cpus_per_worker, sharing, "--ray-workers")] = Path(str(job[-1])).name
            [done], _ = ray.wait(list(running), num_returns=1)
            unwrapped(ray, lambda: ray.get(done), f"filling part {running.pop(done)}")
            finished()
