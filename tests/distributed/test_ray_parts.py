"""ivf-ondisk parts as tasks on a real local Ray (2 CPUs, shared by the session): the same index as
worker processes, a task whose worker dies is retried, and a task's own error comes back as one line."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from retriever.distributed.ray_parts import fill_parts_on_ray
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, build_index
from retriever.searching import Searcher
from fixtures_ondisk import ONDISK_PARAMS, ondisk_hits


def test_parts_built_as_ray_tasks_equal_the_process_build(local_ray, ondisk_shards, ondisk_corpus, ondisk_index,
                                                          tmp_path):
    params = IndexParams(**{**ONDISK_PARAMS, "parallel_parts": None}, ray_address="local", ray_workers=2)
    manifest = build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", params, progress=False)
    assert manifest["index"]["parts"] == 4 and not (tmp_path / "idx.parts").exists()
    for name in ("index.ivfdata", "docstore.arrow", "ids.sorted.arrow"):
        assert (tmp_path / "idx" / name).read_bytes() == (ondisk_index / name).read_bytes(), name
    assert ondisk_hits(Searcher(tmp_path / "idx", device="cpu"), 8) == ondisk_hits(Searcher(ondisk_index, device="cpu"),
                                                                                    8)


def test_a_task_whose_worker_dies_is_retried(local_ray, tmp_path):
    def dies_the_first_time(marker: str, threads: int, *sharing) -> int:
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies mid-task, as with SIGKILL or a lost node
        return threads

    finished = []
    fill_parts_on_ray("local", [(str(tmp_path / "died"),)], None, 1, lambda: finished.append(1),
                      task=dies_the_first_time)
    assert (tmp_path / "died").exists() and finished == [1]


def test_a_tasks_error_is_one_line(local_ray, tmp_path):
    def refuses(path: str, threads: int, *sharing) -> int:
        raise RetrieverError(f"{path}: not a readable Parquet shard")

    with pytest.raises(RetrieverError, match="x.parquet: not a readable Parquet shard"):
        fill_parts_on_ray("local", [("x.parquet",)], 1, 1, lambda: None, task=refuses)


def test_more_tasks_than_the_cluster_holds_is_refused(local_ray):
    with pytest.raises(RetrieverError, match="--ray-workers 3 needs more than the cluster's 2 CPUs"):
        fill_parts_on_ray("local", [], 3, 1, lambda: None)


def test_a_part_its_memory_cannot_hold_is_refused_in_one_line_through_ray(local_ray, tmp_path):
    """The part worker's refusal of a part its memory cannot hold (``part_memory.check_filling_memory``), as it
    reaches the user from a Ray task: the line itself, not Ray's traceback of the task around it."""
    from retriever.ivfparts import fill_part

    [(trained, slices, part)] = _part_jobs(tmp_path, 1)

    def under_a_limit(trained_path: str, slices: list, output: str, *threads_and_sharing) -> int:
        import retriever.train_memory as train_memory

        real, train_memory.memory_left = train_memory.memory_left, lambda: [(0, "the limit leaves", True)]
        try:
            return fill_part(trained_path, slices, output, *threads_and_sharing)
        finally:
            train_memory.memory_left = real

    with pytest.raises(RetrieverError) as refused:
        fill_parts_on_ray("local", [(trained, slices, part)], 1, 1, lambda: None, task=under_a_limit)
    message = str(refused.value)
    assert message.startswith(f"{part}: filling this part of 50 vectors needs about "), message
    assert "the limit leaves 0 MiB: a part holds whole shards" in message and "\n" not in message, message
    assert type(refused.value) is RetrieverError and not Path(part).exists()


def _part_jobs(folder: Path, parts: int) -> list[tuple[str, list, str]]:
    """``parts`` fill_part jobs of one 50-vector shard each, on a trained IVF2,Flat of dimension 8."""
    import faiss
    import numpy as np

    from retriever.ivfparts import ShardSlice, write_record
    from retriever.shards import write_shard

    vectors = np.random.default_rng(0).standard_normal((50 * parts, 8), dtype=np.float32)
    index = faiss.index_factory(8, "IVF2,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    faiss.write_index(index, str(folder / "trained.faiss"))
    write_record(folder / "trained.faiss", [folder / "trained.faiss"])  # a filled part records what it copies
    jobs = []
    for number in range(parts):
        shard = folder / f"embeddings-w000of001-{number:05d}.parquet"
        write_shard(shard, [f"d{number}-{row}" for row in range(50)], vectors[50 * number:50 * (number + 1)],
                    {"dim": 8, "shard": {"worker": 0, "num_workers": 1, "part": number, "rows": 50, "shard_size": 50}})
        jobs.append((str(folder / "trained.faiss"), [ShardSlice(str(shard), 50 * number, 1)], str(folder / f"p{number}")))
    return jobs


def test_ray_tasks_filling_parts_at_once_share_the_memory_left(local_ray, tmp_path):
    """Local part workers share the memory left among the parts filled at once; Ray tasks each checked their part
    against all of it, so two that fit alone were started together on one machine that holds only one."""
    jobs = _part_jobs(tmp_path, 2)

    def _with_room_for_one_part(trained_path: str, slices: list, output: str, *threads_and_sharing) -> int:
        """``fill_part`` where the memory left holds one such part being filled, not two (a nested function: Ray
        ships it by value, where a module-level one would be imported from this test module, which workers lack)."""
        import retriever.train_memory as train_memory
        from retriever.ivfparts import fill_part, read_part_file
        from retriever.part_memory import _filling_bytes

        one = _filling_bytes(read_part_file(trained_path), 50, 50)
        real, train_memory.memory_left = train_memory.memory_left, lambda: [(one * 3 // 2, "the machine has "
                                                                                          "available", False)]
        try:  # the worker process serves the session's later tests
            return fill_part(trained_path, slices, output, *threads_and_sharing)
        finally:
            train_memory.memory_left = real

    with pytest.raises(RetrieverError, match=r"p[01]: filling this part of 50 vectors needs about .*, and 2 parts are "
                                             r"filled at once \(--ray-workers\), and the machine has available .*"
                                             r"\(or fewer --ray-workers\)"):
        fill_parts_on_ray("local", jobs, 2, 1, lambda: None, task=_with_room_for_one_part)
    assert not any(Path(part).exists() for _, _, part in jobs)
    fill_parts_on_ray("local", jobs, 1, 1, lambda: None, task=_with_room_for_one_part)  # one at a time fits
    assert all(Path(part).exists() for _, _, part in jobs)
