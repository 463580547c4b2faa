"""Ray actors do not run in the driver's working directory: relative paths given to `encode --ray` must still
mean what they mean to the driver (shards in --output, the model folder found), on a real local Ray."""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from retriever.corpus_encoding import encode_corpus
from retriever.distributed.ray_encoding import RayEncoderPool, actor_settings, check_shard
from retriever.encoder import EncoderSettings
from retriever.errors import RetrieverError
from retriever.shards import done_marker, list_shards
from test_corpus_encoding import write_corpus


def worker_cwd(ray) -> Path:
    def working_directory() -> str:  # nested, so Ray ships it by value: workers cannot import test modules
        return os.getcwd()

    return Path(ray.get(ray.remote(num_cpus=0)(working_directory).remote()))


def test_relative_output_and_model_are_the_drivers(local_ray, tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "bert").symlink_to(tiny_model_dir)
    write_corpus(tmp_path / "c.jsonl", 25)
    monkeypatch.chdir(tmp_path)  # the driver moves; the actors stay where Ray started them
    actors_folder = worker_cwd(local_ray)
    assert actors_folder != tmp_path
    output = f"shards-{uuid.uuid4().hex}/cl"
    try:
        pool = RayEncoderPool(local_ray, EncoderSettings(model="bert"), device="cpu", dtype="fp32", workers=1)
        try:
            result = encode_corpus("c.jsonl", output, pool, shard_size=10, progress=False)
        finally:
            pool.close()
        assert (result.documents, result.encoded, result.shards) == (25, 25, 3)
        assert len(list_shards(tmp_path / output)) == 3 and done_marker(tmp_path / output, 0, 1).is_file()
        assert not (actors_folder / output).exists()
    finally:
        shutil.rmtree(actors_folder / Path(output).parent, ignore_errors=True)  # what a wrong run leaves


def test_actors_get_a_local_model_by_its_absolute_path(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "bert").symlink_to(tiny_model_dir)
    monkeypatch.chdir(tmp_path)
    assert actor_settings(EncoderSettings(model="bert"))["model"] == str(tmp_path / "bert")
    assert actor_settings(EncoderSettings(model=str(tiny_model_dir)))["model"] == str(tiny_model_dir)


def test_a_shard_the_driver_does_not_see_is_refused(tmp_path):
    shard = tmp_path / "embeddings-w000of001-00000.parquet"
    with pytest.raises(RetrieverError, match="driver does not see it there; --output must be a folder"):
        check_shard(shard, 10, 0.0)
    shard.write_bytes(b"0123456789")
    check_shard(shard, 10, shard.stat().st_mtime)
    with pytest.raises(RetrieverError, match="driver does not see it"):  # an older shard of the same name
        check_shard(shard, 10, shard.stat().st_mtime + 3600)
