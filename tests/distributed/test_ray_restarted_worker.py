"""A Ray worker that dies is restarted by Ray, which loads its encoder again from the model folder (on a cluster,
maybe on another node): it must make the vectors the run's shards record, or refuse the part. Its own module: the
pool of test_ray_encoding holds the session's two CPUs while its module runs."""
from __future__ import annotations

import os
import signal

import pytest

from conftest import make_tiny_bert
from retriever.corpus_encoding import encode_corpus
from retriever.distributed.ray_encoding import RayEncoderPool
from retriever.encoder import EncoderSettings
from retriever.errors import RetrieverError
from retriever.shards import list_shards
from test_corpus_encoding import write_corpus


def refused_after_restart(local_ray, tmp_path, change, match: str, encode=None) -> None:
    """A one-worker pool on a tiny model whose worker was killed after ``change(model)`` (Ray restarts it on the
    next call): encoding with it (``encode(pool)``, by default a corpus) raises ``match``."""
    model = make_tiny_bert(tmp_path / "model")
    pool = RayEncoderPool(local_ray, EncoderSettings(model=str(model)), device="cpu", dtype="fp32", workers=1)
    change(model)
    os.kill(pool.pids()[0], signal.SIGKILL)
    try:
        with pytest.raises(RetrieverError, match=match):
            if encode is None:
                encode_corpus(write_corpus(tmp_path / "c.jsonl", 20), tmp_path / "shards", pool, shard_size=10,
                              progress=False)
            else:
                encode(pool)
    finally:
        pool.close()


def test_a_worker_restarted_on_other_weights_is_refused(local_ray, tmp_path):
    """The folder retrained in place mid-run: the restarted worker wrote the new model's vectors under the record
    of the old one, which `index` and `search` then trusted."""
    refused_after_restart(local_ray, tmp_path, lambda model: make_tiny_bert(model, seed=1),
                          "^a Ray worker restarted .* other vectors .*weights_sha256")
    assert not (tmp_path / "shards").exists() or not list_shards(tmp_path / "shards")


def test_a_worker_that_cannot_restart_says_why(local_ray, tmp_path):
    """The model's weights gone mid-run: the restarted worker's encode_part failed with an AttributeError traceback
    (its encoder's own one-line error was kept for a method that was never called)."""
    refused_after_restart(local_ray, tmp_path, lambda model: (model / "model.safetensors").unlink(), "weights")


def test_tuning_queries_encoded_by_a_worker_restarted_on_other_weights_are_refused(local_ray, tmp_path):
    """`build --ray --tuning-queries-file`: actor 0 encoded the tuning queries with no check, so a worker restarted on
    a folder retrained in place tuned the index's search defaults on another model's query vectors."""
    refused_after_restart(local_ray, tmp_path, lambda model: make_tiny_bert(model, seed=1),
                          "^a Ray worker restarted .* other vectors .*weights_sha256",
                          lambda pool: pool.encode_queries(["hot lava rock"]))
