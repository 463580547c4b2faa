"""A cluster whose CPUs other work holds (another run, another user's job): the pool starts the workers there is
room for, and workers that must wait say so, where the run waited in silence for as long as the other work ran."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from retriever.distributed.ray_encoding import RayEncoderPool, plan_workers
from retriever.encoder import EncoderSettings


def hold_cpus(ray, count: int) -> list:
    """Actors holding ``count`` of the session's CPUs, started."""
    class Holder:  # nested, so Ray ships it by value: workers cannot import test modules
        def ping(self) -> int:
            return 1

    holders = [ray.remote(num_cpus=1)(Holder).remote() for _ in range(count)]
    ray.get([holder.ping.remote() for holder in holders], timeout=60)
    return holders


def test_workers_fit_the_cpus_other_work_leaves_free(local_ray):
    holders = hold_cpus(local_ray, 1)
    try:
        assert plan_workers(local_ray, "cpu", None, 1) == (1, 0, "cpu")  # both were started, one waited
        assert plan_workers(local_ray, "cpu", 2, 1) == (2, 0, "cpu")  # as many as asked for
    finally:
        for holder in holders:
            local_ray.kill(holder)


def test_workers_that_must_wait_for_the_cluster_say_so(local_ray, tiny_model_dir, capsys):
    holders = hold_cpus(local_ray, 2)
    started: dict = {}
    start = threading.Thread(target=lambda: started.update(pool=RayEncoderPool(
        local_ray, EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32", workers=1)))
    start.start()
    said, deadline = "", time.monotonic() + 10
    while start.is_alive() and time.monotonic() < deadline and "wait for CPUs" not in said:
        said += capsys.readouterr().err
        time.sleep(0.1)
    waited = start.is_alive()
    for holder in holders:
        local_ray.kill(holder)
    start.join(timeout=120)
    started["pool"].close()
    assert waited, "the worker must wait while the CPUs are held"
    assert "1 of 1 Ray encoder workers wait for CPUs that other work on the cluster holds (0 CPUs free)" in said


def test_gpu_workers_fit_the_gpus_other_work_leaves_free():
    def cluster(free_gpus: int) -> SimpleNamespace:  # 4 GPUs, `free_gpus` of them free now
        return SimpleNamespace(cluster_resources=lambda: {"CPU": 8, "GPU": 4},
                               available_resources=lambda: {"CPU": 8, "GPU": free_gpus})

    assert [plan_workers(cluster(free), "auto", None, 1)[0] for free in (4, 1, 0)] == [4, 1, 4]
    assert plan_workers(cluster(0), "auto", 3, 1) == (3, 1, "auto")
