"""Sizing a Ray worker pool before and after connecting (``retriever.distributed.ray_capacity``)."""
from __future__ import annotations

import pytest

from fixtures_system import too_many
from retriever.distributed.ray_capacity import check_local_cpus, default_workers
from retriever.errors import RetrieverError


def test_the_local_cpu_check_uses_a_given_count_and_the_cpus_per_worker(no_ray_start):
    with pytest.raises(RetrieverError, match=r"^--ray-workers 3 needs more than the cluster's 2 CPUs at 1 per worker "
                                             r"\(room for 2\)"):
        check_local_cpus(None, 3, 1, num_cpus=2)
    with pytest.raises(RetrieverError, match="the Ray cluster has 2 CPUs, fewer than --ray-cpus-per-worker 3"):
        check_local_cpus("local", None, 3, num_cpus=2)
    check_local_cpus(None, 2, 1, num_cpus=2)
    check_local_cpus(None, None, 1, num_cpus=2)


def test_a_cluster_or_an_open_session_is_checked_once_connected(no_ray_start, monkeypatch):
    """An address's CPUs are the cluster's, known only once connected; an open session's, too; and an environment
    overriding Ray's resources gives the local Ray another count than the machine's."""
    check_local_cpus("auto", too_many(), 1)
    check_local_cpus("10.0.0.5:6379", too_many(), 1)
    monkeypatch.setenv("RAY_OVERRIDE_RESOURCES", '{"CPU": 10000}')
    check_local_cpus(None, too_many(), 1)
    monkeypatch.delenv("RAY_OVERRIDE_RESOURCES")
    monkeypatch.setattr(no_ray_start, "is_initialized", lambda: True)
    check_local_cpus(None, too_many(), 1)


def test_default_workers_fit_the_room_the_cluster_has_now():
    assert default_workers(8, 6) == 6
    assert default_workers(8, 8) == 8
    assert default_workers(8, 0) == 8  # no room now: all of them, and they wait
