"""A Ray worker that dies is restarted by Ray, which loads its encoder again from the model folder (on a cluster,
maybe on another node): it must make the vectors the run's shards record, or refuse the part. Its own module: the
pool of test_ray_encoding holds the session's two CPUs while its module runs."""
from __future__ import annotations

import os
import signal

import pytest

from fixtures_models import make_tiny_bert
from retriever.corpus_encoding import encode_corpus
from retriever.distributed.ray_encoding import RayEncoderPool
from retriever.encoder import EncoderSettings
from retriever.errors import RetrieverError
from retriever.shards import list_shards
from test_corpus_encoding import write_corpus


def started_then_killed(local_ray, folder, change) -> RayEncoderPool:
    """A one-worker pool on a tiny model in ``folder`` whose worker was killed after ``change(model)``: Ray restarts
    it, loading the changed model."""
    model = make_tiny_bert(folder / "model")
    pool = RayEncoderPool(local_ray, EncoderSettings(model=str(model)), device="cpu", dtype="fp32", workers=1)
    change(model)
    os.kill(pool.pids()[0], signal.SIGKILL)
    return pool


def retrained_in_place(model) -> None:
    make_tiny_bert(model, seed=1)


@pytest.fixture(scope="module")
def restarted_on_other_weights(local_ray, tmp_path_factory):
    """A pool whose worker was restarted on the folder retrained in place, for the tests of what it must refuse: a
    refusal leaves the worker as it was, so one restart (seconds of a worker's imports, twice) serves them all."""
    pool = started_then_killed(local_ray, tmp_path_factory.mktemp("retrained"), retrained_in_place)
    yield pool
    pool.close()


OTHER_WEIGHTS = "^a Ray worker restarted .* other vectors .*weights_sha256"


def test_a_worker_restarted_on_other_weights_is_refused(restarted_on_other_weights, tmp_path):
    """The folder retrained in place mid-run: the restarted worker wrote the new model's vectors under the record
    of the old one, which `index` and `search` then trusted."""
    with pytest.raises(RetrieverError, match=OTHER_WEIGHTS):
        encode_corpus(write_corpus(tmp_path / "c.jsonl", 20), tmp_path / "shards", restarted_on_other_weights,
                      shard_size=10, progress=False)
    assert not (tmp_path / "shards").exists() or not list_shards(tmp_path / "shards")


def test_tuning_queries_encoded_by_a_worker_restarted_on_other_weights_are_refused(restarted_on_other_weights):
    """`build --ray --tuning-queries-file`: actor 0 encoded the tuning queries with no check, so a worker restarted on
    a folder retrained in place tuned the index's search defaults on another model's query vectors."""
    with pytest.raises(RetrieverError, match=OTHER_WEIGHTS):
        restarted_on_other_weights.encode_queries(["hot lava rock"])


def test_a_worker_that_cannot_restart_says_why(local_ray, tmp_path):
    """The model's weights gone mid-run: the restarted worker's encode_part failed with an AttributeError traceback
    (its encoder's own one-line error was kept for a method that was never called)."""
    pool = started_then_killed(local_ray, tmp_path, lambda model: (model / "model.safetensors").unlink())
    try:
        with pytest.raises(RetrieverError, match="weights"):
            encode_corpus(write_corpus(tmp_path / "c.jsonl", 20), tmp_path / "shards", pool, shard_size=10,
                          progress=False)
    finally:
        pool.close()
