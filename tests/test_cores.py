"""The cores a process may use: its affinity mask and its cgroup's CPU quota, read from a fake cgroup tree."""
from __future__ import annotations

import os

import pytest

from fixtures_system import fake_cgroup_tree
from retriever import cgroups
from retriever.cores import usable_cores


@pytest.mark.parametrize("membership, files, expected", [
    ("0::/\n", {"cpu.max": "200000 100000\n"}, 2),  # docker --cpus 2, cgroup v2 (a private cgroup namespace)
    ("0::/\n", {"cpu.max": "150000 100000\n"}, 2),  # --cpus 1.5: rounded up
    ("0::/\n", {"cpu.max": "max 100000\n"}, 64),  # no quota
    ("0::/system.slice/docker-1.scope\n", {"system.slice/docker-1.scope/cpu.max": "300000 100000",
                                           "system.slice/cpu.max": "800000 100000"}, 3),  # the host's namespace
    ("0::/kubepods/pod1/c1\n", {"kubepods/pod1/cpu.max": "400000 100000",
                                "kubepods/pod1/c1/cpu.max": "max 100000"}, 4),  # the pod's quota binds its container
    ("5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n", {"cpu/docker/abc/cpu.cfs_quota_us": "200000\n",
                                                            "cpu/docker/abc/cpu.cfs_period_us": "100000\n"}, 2),  # v1
    ("5:cpuacct,cpu:/\n", {"cpuacct,cpu/cpu.cfs_quota_us": "50000", "cpuacct,cpu/cpu.cfs_period_us": "100000"}, 1),
    ("5:cpu,cpuacct:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, 64),  # v1, no quota
    ("0::/\n", {"cpu.max": "garbled"}, 64), ("0::/\n", {"cpu.max": "200000 0"}, 64),
    ("0::/\n", {"cpu.max": "²00000 100000"}, 64), ("0::/\n", {}, 64), ("garbled\n", {"cpu.max": "1 1"}, 64),
    ("0::/../..\n", {"cpu.max": "200000 100000"}, 2),  # a cgroup outside the namespace: the mount's own quota
    ("5:cpu:/a\n", {"cpu/a/cpu.cfs_quota_us": "200000"}, 64),  # no period file
])
def test_a_cgroup_cpu_quota_caps_the_cores_counted(tmp_path, many_cores, membership, files, expected):
    """In `docker run --cpus 2` on a 64-core host, the affinity mask counted 64 cores: serve's defaults ran
    2 workers x 31 torch threads on two cores' worth of time, and its oversubscription warning did not fire."""
    assert usable_cores(*fake_cgroup_tree(tmp_path, membership, files)) == expected


def test_no_cgroup_files_at_all_count_the_affinity_mask(tmp_path, many_cores):
    assert usable_cores(tmp_path / "none", tmp_path / "no-such-file") == 64


@pytest.mark.parametrize("quota, given, expected", [("200000 100000", None, "2"), ("max 100000", None, None),
                                                     ("200000 100000", "8", "8")])
def test_the_cli_caps_openmp_pools_at_the_quota_unless_told(tmp_path, many_cores, monkeypatch, quota, given, expected):
    """Encoding, training and FAISS's own searches and training use torch's and OpenMP's default pools, sized on the
    affinity mask: 64 threads on two cores' worth of quota. OMP_NUM_THREADS, set before they load, sizes them all;
    one the user set stands."""
    from click.testing import CliRunner

    from retriever.cli import main

    fs, membership = fake_cgroup_tree(tmp_path, "0::/\n", {"cpu.max": quota})
    monkeypatch.setattr(cgroups, "CGROUPS", fs)
    monkeypatch.setattr(cgroups, "MEMBERSHIP", membership)
    monkeypatch.setenv("OMP_NUM_THREADS", given or "")
    if given is None:
        monkeypatch.delenv("OMP_NUM_THREADS")
    assert CliRunner().invoke(main, ["--help"]).exit_code == 0
    assert os.environ.get("OMP_NUM_THREADS") == expected
