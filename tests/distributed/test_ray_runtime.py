from __future__ import annotations

import sys

import pytest

from retriever.distributed.ray_runtime import check_address, cluster_cpus_and_gpus, ray_session, require_ray
from retriever.errors import RetrieverError


def test_missing_ray_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    with pytest.raises(RetrieverError, match=r"pip install 'retriever\[ray\]'"):
        require_ray()
    with pytest.raises(RetrieverError, match="not installed"), ray_session():
        pass


@pytest.mark.parametrize("address", [None, "", "auto", "local", "ray://head:10001", "10.0.0.5:6379"])
def test_addresses_ray_accepts(address):
    assert check_address(address) == (address or "local")


@pytest.mark.parametrize("address", ["corpus.jsonl", "ray://", "http://head:8265", "data/scifact"])
def test_other_values_are_refused(address):
    with pytest.raises(RetrieverError, match="not a Ray address"):
        check_address(address)


def test_an_open_session_is_reused_and_left_open(local_ray):
    with ray_session("ray://unreachable:1") as ray:  # the address is not used: a session is already open
        assert ray is local_ray
        assert cluster_cpus_and_gpus(ray) == (2, 0)
    assert local_ray.is_initialized()
