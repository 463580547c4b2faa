"""Encoding on a real local Ray (2 CPUs, shared by the session): same shards as one process, resumable, and
surviving a killed worker."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from retriever.corpus_encoding import encode_corpus
from retriever.distributed.ray_encoding import RayEncoderPool, plan_workers
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.shards import done_marker, list_shards, read_shard, read_shard_metadata
from test_corpus_encoding import write_corpus


@pytest.fixture(scope="module")
def settings(tiny_model_dir) -> EncoderSettings:
    return EncoderSettings(model=str(tiny_model_dir))


@pytest.fixture(scope="module")
def pool(local_ray, settings):
    pool = RayEncoderPool(local_ray, settings, device="cpu", dtype="fp32", batch_size=8, workers=2)
    yield pool
    pool.close()


def one_process(settings, corpus, output, shard_size):
    encoder = Encoder(settings, device="cpu", dtype="fp32", batch_size=8)
    return encode_corpus(corpus, output, encoder, shard_size=shard_size, progress=False)


def _record(path) -> dict:
    """A shard's metadata but its vectors' hash, which follows the vectors' low bits (compared to 1e-6 below)."""
    metadata = read_shard_metadata(path)
    return {**metadata, "shard": {k: v for k, v in metadata["shard"].items() if k != "vectors_sha256"}}


def assert_same_shards(folder, reference) -> None:
    """Same files, same ids in each, same metadata, vectors equal to 1e-6."""
    assert [p.name for p in list_shards(folder)] == [p.name for p in list_shards(reference)]
    for path, expected in zip(list_shards(folder), list_shards(reference)):
        assert _record(path) == _record(expected)
        ids, vectors = read_shard(path)
        expected_ids, expected_vectors = read_shard(expected)
        assert ids == expected_ids
        np.testing.assert_allclose(vectors, expected_vectors, rtol=0, atol=1e-6)
    assert done_marker(folder, 0, 1).is_file()


def test_ray_shards_equal_one_process_shards(pool, settings, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 230)
    one_process(settings, corpus, tmp_path / "reference", shard_size=20)
    result = encode_corpus(corpus, tmp_path / "ray", pool, shard_size=20, progress=False)
    assert (result.documents, result.encoded, result.skipped, result.shards) == (230, 230, 0, 12)
    assert_same_shards(tmp_path / "ray", tmp_path / "reference")


def test_ray_run_skips_parts_already_on_disk(pool, settings, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 95)
    one_process(settings, corpus, tmp_path / "reference", shard_size=10)
    one_process(settings, corpus, tmp_path / "resumed", shard_size=10)
    shards = list_shards(tmp_path / "resumed")
    for path in shards[3:7]:
        path.unlink()
    done_marker(tmp_path / "resumed", 0, 1).unlink()
    kept = {path.name: path.stat().st_mtime_ns for path in shards[:3] + shards[7:]}
    result = encode_corpus(corpus, tmp_path / "resumed", pool, shard_size=10, progress=False)
    assert (result.encoded, result.skipped) == (40, 55)
    assert {name: (tmp_path / "resumed" / name).stat().st_mtime_ns for name in kept} == kept
    assert_same_shards(tmp_path / "resumed", tmp_path / "reference")


def test_sigkill_of_a_worker_midway_still_gives_identical_shards(pool, settings, tmp_path):
    size, parts = 20, 30
    corpus = write_corpus(tmp_path / "c.jsonl", size * parts, words=80)
    one_process(settings, corpus, tmp_path / "reference", shard_size=size)
    output = tmp_path / "ray"
    victim = pool.pids()[0]
    outcome: dict = {}
    run = threading.Thread(target=lambda: outcome.update(
        result=encode_corpus(corpus, output, pool, shard_size=size, progress=False)))
    run.start()
    deadline = time.monotonic() + 120
    while not (output.is_dir() and list_shards(output)) and time.monotonic() < deadline:
        time.sleep(0.02)
    written_before_kill = len(list_shards(output))
    os.kill(victim, signal.SIGKILL)
    run.join(timeout=300)
    assert 0 < written_before_kill < parts, "the kill must land while parts remain"
    assert "result" in outcome, "the run must finish after Ray restarts the worker"
    assert victim not in pool.pids(), "Ray restarted the killed worker in a new process"
    assert_same_shards(output, tmp_path / "reference")


def test_more_workers_than_the_cluster_holds_is_refused(local_ray):
    assert plan_workers(local_ray, "auto", None, 1) == (2, 0, "cpu")
    with pytest.raises(RetrieverError, match="--ray-workers 3 needs more"):
        plan_workers(local_ray, "auto", 3, 1)
    with pytest.raises(RetrieverError, match="fewer than --ray-cpus-per-worker 4"):
        plan_workers(local_ray, "cpu", None, 4)
    with pytest.raises(RetrieverError, match="no GPU"):
        plan_workers(local_ray, "cuda", None, 1)


class _GpuCluster:
    """Just enough of the ray module for a pool to be planned and started on a cluster of 2 GPUs, without Ray."""

    exceptions = type("exceptions", (), {"RayTaskError": type("RayTaskError", (Exception,), {})})

    def __init__(self, metadata: dict) -> None:
        self.metadata, self.started = metadata, []

    def cluster_resources(self) -> dict:
        return {"CPU": 8, "GPU": 2}

    available_resources = cluster_resources

    def remote(self, actor_class):
        cluster = self

        class Handle:
            def options(self, **options):
                return self

            def remote(self, settings, device, dtype, batch_size, threads):
                cluster.started.append(device)
                method = type("method", (), {"remote": lambda _: cluster.metadata})()
                return type("actor", (), {"metadata": method})()
        return Handle()

    def get(self, refs):
        return refs

    def kill(self, actor) -> None:
        pass


def test_a_gpu_cluster_with_the_default_device_starts_its_pool(settings):
    """`encode --ray` on a cluster with GPUs and the default --device auto died of torch's RuntimeError ("Expected one
    of cpu, cuda, ... device type at start of device string: auto") while sizing the actors' batches (probe 17)."""
    cluster = _GpuCluster({"dim": 32})
    pool = RayEncoderPool(cluster, settings)
    assert cluster.started == ["auto", "auto"] and pool.batch_size == 128  # one actor per GPU, a GPU's batches


def test_a_numbered_gpu_on_a_ray_cluster_is_refused_before_any_actor_starts():
    """Ray gives each encoder actor one GPU of its own, which it sees as cuda:0: `--device cuda:1` failed in every
    actor saying 'this machine has 1 CUDA GPU(s), numbered from 0' of a machine that has more (probe 17)."""
    with pytest.raises(RetrieverError, match=r"^--device cuda:1 names a GPU of this machine; on Ray each encoder worker "
                                             r"is given a GPU of its own: pass --device cuda"):
        plan_workers(_GpuCluster({}), "cuda:1", None, 1)
    assert plan_workers(_GpuCluster({}), "cuda:0", None, 1) == (2, 1, "cuda:0")  # the GPU each actor sees


class _CpuCluster(_GpuCluster):
    def cluster_resources(self) -> dict:
        return {"CPU": 2}

    available_resources = cluster_resources


@pytest.mark.parametrize("device, dtype, refusal", [
    ("tpu", "auto", r"^unknown device 'tpu'; use auto, cpu, cuda or cuda:N$"),
    ("cpu", "fp16", r"^fp16 is not supported on the CPU; use --dtype bf16 or fp32$"),
    ("auto", "fp16", r"^fp16 is not supported on the CPU; use --dtype bf16 or fp32$")])
def test_a_device_or_dtype_cpu_actors_cannot_take_is_refused_before_any_actor_starts(settings, device, dtype, refusal):
    """`encode --ray --device tpu` encoded on the CPUs, exit 0, where `encode --device tpu` is refused; fp16 on CPU
    actors was refused by each actor as it started (probe 19)."""
    cluster = _CpuCluster({"dim": 32})
    with pytest.raises(RetrieverError, match=refusal):
        RayEncoderPool(cluster, settings, device=device, dtype=dtype)
    assert cluster.started == []


@pytest.mark.parametrize("device, dtype", [("tpu", "auto"), ("cpu", "fp16"), ("auto", "fp16")])
def test_a_local_ray_is_not_started_for_a_device_or_dtype_its_actors_cannot_take(no_ray_start, settings, device,
                                                                                 dtype, monkeypatch):
    """The same refusals before a local Ray starts on a machine without CUDA (it took seconds, and a model per actor)."""
    from retriever.distributed.ray_encoding import ray_encoder_pool

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(RetrieverError, match="^unknown device 'tpu'|^fp16 is not supported on the CPU"):
        with ray_encoder_pool(None, settings, device, dtype, workers=1):
            pass


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_a_gpu_asked_of_a_local_ray_without_cuda_is_refused_for_the_device_first(no_ray_start, settings, dtype,
                                                                               monkeypatch):
    """`encode --ray --device cuda --dtype fp16` said fp16 is not supported on the CPU, a CPU never asked for, and
    with --dtype fp32 then started Ray to say the cluster has no GPU."""
    from retriever.distributed.ray_encoding import ray_encoder_pool

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(RetrieverError, match=r"^--device cuda was asked for but this machine has no GPU \(CUDA is not "
                                             r"available\) for the local Ray started here; use --device cpu$"):
        with ray_encoder_pool(None, settings, "cuda", dtype, workers=1):
            pass
