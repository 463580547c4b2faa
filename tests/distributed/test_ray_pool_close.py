"""A run stopped while parts are on the actors (a corpus error, Ctrl-C, SIGTERM): closing the pool cancels the
parts in flight before it kills the actors, so Ray does not announce that they "will be retried" as the run
stops. Its own module: the pool of test_ray_encoding holds the session's two CPUs while its module runs."""
from __future__ import annotations

import time

import pytest

from retriever.corpus import Document
from retriever.corpus_encoding import part_metadata
from retriever.distributed.ray_encoding import RayEncoderPool
from retriever.encoder import EncoderSettings
from retriever.errors import RetrieverError
from retriever.shards import shard_name


def test_closing_mid_part_cancels_the_parts_in_flight(local_ray, tiny_model_dir, tmp_path, capfd):
    pool = RayEncoderPool(local_ray, EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32",
                          workers=1)
    part = [Document(f"d{i}", " ".join(["the river and the mountain"] * 30)) for i in range(300)]

    def jobs():  # one part handed out, then the corpus turns out bad, as a malformed line does
        yield part, tmp_path / shard_name(0, 1, 0), part_metadata(pool.metadata(), part, 0, 1, 0, len(part))
        raise RetrieverError("c.jsonl:301: malformed JSON")

    with pytest.raises(RetrieverError, match="malformed"):
        list(pool.run_parts(jobs(), lambda rows: None))
    [in_flight] = pool._running
    pool.close()
    with pytest.raises(local_ray.exceptions.TaskCancelledError):
        local_ray.get(in_flight, timeout=60)
    time.sleep(2)  # Ray's workers' lines reach the driver's stderr a moment later
    assert "will be retried" not in capfd.readouterr().err


def test_a_closed_pool_has_given_its_cpus_back(local_ray, tiny_model_dir, capfd):
    """ray.kill returns before the worker has gone: a pool started next in the session (a library loop encoding
    several corpora) found the CPUs still held, said its workers wait for other work, and was sized on what was
    free then (one worker of two)."""
    settings = EncoderSettings(model=str(tiny_model_dir))
    # one actor left holding its CPU is enough to size the next pool at one worker (a second costs seconds to start)
    RayEncoderPool(local_ray, settings, device="cpu", dtype="fp32", workers=1).close()
    pool = RayEncoderPool(local_ray, settings, device="cpu", dtype="fp32")
    assert len(pool.actors) == 2
    pool.close()
    assert "wait for CPUs" not in capfd.readouterr().err


def test_a_pool_whose_encoders_cannot_start_lets_its_actors_go(local_ray, tiny_model_dir, tmp_path):
    """Its actors were left holding the session's CPUs after the one-line error: in a library session kept open (a
    notebook retrying with the model fixed), the next pool's workers waited for CPUs that no work used."""
    import shutil

    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    (model / "model.safetensors").unlink()
    with pytest.raises(RetrieverError, match="weights"):
        RayEncoderPool(local_ray, EncoderSettings(model=str(model)), device="cpu", dtype="fp32", workers=1)
    deadline = time.monotonic() + 10
    while local_ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert local_ray.available_resources().get("CPU", 0) == 2
