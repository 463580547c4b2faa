"""ivf-ondisk parts as tasks on a real local Ray (2 CPUs, shared by the session): the same index as
worker processes, a task whose worker dies is retried, and a task's own error comes back as one line."""
from __future__ import annotations

import os

import pytest

from retriever.distributed.ray_parts import fill_parts_on_ray
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, build_index
from retriever.searching import Searcher
from test_ondisk import ONDISK, corpus, encoder, hits, ondisk, shards  # noqa: F401  (fixtures)


def test_parts_built_as_ray_tasks_equal_the_process_build(local_ray, shards, corpus, ondisk, tmp_path):
    params = IndexParams(**{**ONDISK, "parallel_parts": None}, ray_address="local", ray_workers=2)
    manifest = build_index(shards, corpus, tmp_path / "idx", params, progress=False)
    assert manifest["index"]["parts"] == 4 and not (tmp_path / "idx.parts").exists()
    for name in ("index.ivfdata", "docstore.arrow", "ids.sorted.arrow"):
        assert (tmp_path / "idx" / name).read_bytes() == (ondisk / name).read_bytes(), name
    assert hits(Searcher(tmp_path / "idx", device="cpu"), 8) == hits(Searcher(ondisk, device="cpu"), 8)


def test_a_task_whose_worker_dies_is_retried(local_ray, tmp_path):
    def dies_the_first_time(marker: str, threads: int) -> int:
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies mid-task, as with SIGKILL or a lost node
        return threads

    finished = []
    fill_parts_on_ray("local", [(str(tmp_path / "died"),)], None, 1, lambda: finished.append(1),
                      task=dies_the_first_time)
    assert (tmp_path / "died").exists() and finished == [1]


def test_a_tasks_error_is_one_line(local_ray, tmp_path):
    def refuses(path: str, threads: int) -> int:
        raise RetrieverError(f"{path}: not a readable Parquet shard")

    with pytest.raises(RetrieverError, match="x.parquet: not a readable Parquet shard"):
        fill_parts_on_ray("local", [("x.parquet",)], 1, 1, lambda: None, task=refuses)


def test_more_tasks_than_the_cluster_holds_is_refused(local_ray):
    with pytest.raises(RetrieverError, match="--ray-workers 3 needs more than the cluster's 2 CPUs"):
        fill_parts_on_ray("local", [], 3, 1, lambda: None)


def test_a_part_its_memory_cannot_hold_is_refused_in_one_line_through_ray(local_ray, tmp_path):
    """The part worker's refusal of a part its memory cannot hold (``part_memory.check_filling_memory``), as it
    reaches the user from a Ray task: the line itself, not Ray's traceback of the task around it."""
    import faiss
    import numpy as np

    from retriever.ivfparts import ShardSlice, fill_part
    from retriever.shards import write_shard

    shard, trained, part = tmp_path / "embeddings-w000of001-00000.parquet", tmp_path / "trained.faiss", tmp_path / "p"
    vectors = np.random.default_rng(0).standard_normal((50, 8), dtype=np.float32)
    write_shard(shard, [f"d{row}" for row in range(50)], vectors,
                {"dim": 8, "shard": {"worker": 0, "num_workers": 1, "part": 0, "rows": 50, "shard_size": 50}})
    index = faiss.index_factory(8, "IVF2,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    faiss.write_index(index, str(trained))

    def under_a_limit(trained_path: str, slices: list, output: str, threads: int) -> int:
        import retriever.train_memory as train_memory

        real, train_memory.memory_left = train_memory.memory_left, lambda: [(0, "the limit leaves", True)]
        try:
            return fill_part(trained_path, slices, output, threads)
        finally:
            train_memory.memory_left = real

    with pytest.raises(RetrieverError) as refused:
        fill_parts_on_ray("local", [(str(trained), [ShardSlice(str(shard), 0, 1)], str(part))], 1, 1, lambda: None,
                          task=under_a_limit)
    message = str(refused.value)
    assert message.startswith(f"{part}: filling this part of 50 vectors needs about "), message
    assert "the limit leaves 0 MiB: a part holds whole shards" in message and "\n" not in message, message
    assert type(refused.value) is RetrieverError and not part.exists()
