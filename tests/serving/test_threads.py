"""A server's thread pools: sized for the cores this process may use, and a warning when they outnumber them."""
from __future__ import annotations

import faiss
import torch

from fixtures_system import fake_cgroup_tree
from retriever import cgroups
from retriever.serving.threads import configure_threads, oversubscription_warning


def test_serve_sizes_its_threads_and_warns_on_the_quota(tmp_path, many_cores, monkeypatch):
    """The defaults share out the quota's cores; 2 x 31 threads is warned of as past them."""
    fs, membership = fake_cgroup_tree(tmp_path, "0::/\n", {"cpu.max": "200000 100000"})
    monkeypatch.setattr(cgroups, "CGROUPS", fs)
    monkeypatch.setattr(cgroups, "MEMBERSHIP", membership)
    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    try:
        used = configure_threads()
    finally:
        torch.set_num_threads(before[0])
        faiss.omp_set_num_threads(before[1])
    assert (used["cores"], used["workers"], used["torch"]) == (2, 2, 1)
    assert "62 threads for the 2 cores" in oversubscription_warning({**used, "torch": 31})
