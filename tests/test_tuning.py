from __future__ import annotations

import faiss
import numpy as np
import pytest

from retriever.errors import RetrieverError
from retriever.search_settings import apply_search_params
from retriever.tuning import choose_search_params, recall_at_k


def clustered(count: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim))
    vectors = centres[rng.integers(0, 20, count)] + rng.normal(scale=1.0, size=(count, dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32)


def test_smallest_nprobe_reaching_target_is_chosen():
    vectors = clustered(2000)
    index = faiss.index_factory(16, "IVF32,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    queries = vectors[:200]
    flat = faiss.IndexFlatIP(16)
    flat.add(vectors)
    _, truth = flat.search(queries, 10)
    choice = choose_search_params(index, queries, truth, target_recall=0.9)
    assert choice["parameter"] == "nprobe" and choice["reached"]
    assert choice["lower_bound"] >= 0.9 and choice["measured_recall"] > choice["lower_bound"]
    previous = [s for s in choice["sweep"] if s["value"] < choice["value"]]
    assert previous and all(s["lower_bound"] < 0.9 for s in previous)
    apply_search_params(index, nprobe=choice["value"])
    _, found = index.search(queries, 10)
    assert recall_at_k(found, truth) == pytest.approx(choice["measured_recall"], abs=1e-4)


def test_target_recall_must_be_a_fraction():
    index = faiss.IndexFlatIP(4)
    with pytest.raises(RetrieverError):
        choose_search_params(index, np.zeros((1, 4), np.float32), np.zeros((1, 1), np.int64), 1.5)


def trained_with_truth(factory: str, vectors: np.ndarray, queries: int):
    """An index of ``vectors`` and the exact top 10 of its first ``queries`` vectors."""
    index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    return index, flat.search(vectors[:queries], 10)[1]


def test_unreachable_target_keeps_the_cheapest_best_setting():
    vectors = clustered(2000)
    index, truth = trained_with_truth("IVF8,PQ2x4", vectors, 100)
    choice = choose_search_params(index, vectors[:100], truth, target_recall=1.0)
    best = max(step["recall"] for step in choice["sweep"])
    assert not choice["reached"] and choice["measured_recall"] == best
    assert choice["value"] == min(step["value"] for step in choice["sweep"] if step["recall"] == best)
    assert choice["value"] < choice["sweep"][-1]["value"]  # coarse codes: more lists stop helping


def test_the_sweep_reaches_every_list_when_nlist_is_no_candidate():
    """nprobe = nlist searches every list, exactly for Flat codes: with 40 lists the sweep stopped at 32, the
    candidate below, and said no setting reached a recall of 1.0 (rebuild, it advised)."""
    vectors = np.random.default_rng(0).standard_normal((4000, 32)).astype(np.float32)  # no clusters: 32 lists miss
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index, truth = trained_with_truth("IVF40,Flat", vectors, 300)
    choice = choose_search_params(index, vectors[:300], truth, target_recall=1.0)
    assert choice["reached"] and choice["measured_recall"] == 1.0 and 32 < choice["value"] <= 40


def test_rows_tied_with_the_kth_true_neighbour_count_as_found(tmp_path):
    """60 copies of one passage: exact search keeps 10 of them, HNSW returns others, each as near. Counted by
    row, recall stayed below the target at any efSearch and the build warned that no setting reached it."""
    from retriever.faiss_index import IndexParams
    from retriever.shards import write_shard
    from retriever.tuning import GIVEN, true_neighbours, tune

    vectors = np.concatenate([clustered(200), np.repeat(clustered(1, seed=3), 60, axis=0)])
    shards = [tmp_path / "s0.parquet", tmp_path / "s1.parquet"]
    for part, shard in enumerate(shards):
        write_shard(shard, [f"{part}-{i}" for i in range(130)], vectors[part * 130:(part + 1) * 130], {})
    index = faiss.index_factory(16, "HNSW32,Flat", faiss.METRIC_INNER_PRODUCT)
    index.add(vectors)
    queries = np.concatenate([vectors[200:205], clustered(20, seed=1)])
    held = np.empty(0, dtype=np.int64)
    truth = true_neighbours(shards, queries, 10, held)
    assert sorted(truth[0][truth[0] >= 0].tolist()) == list(range(200, 260))  # every copy is a true neighbour
    assert (truth[5:, 10:] == -1).all()  # no tie at the cut: the exact top 10 alone
    tuning = tune(index, shards, queries, held, IndexParams(index_type="HNSW32,Flat", target_recall=0.99), GIVEN)
    assert tuning["reached"] and tuning["measured_recall"] == 1.0


def test_the_exact_neighbour_pass_of_a_tuning_shows_its_progress(tmp_path, capsys):
    """Tuning reads every shard to find the queries' exact neighbours (15 GB of Parquet at 10M vectors) and said
    nothing on stderr until its `target recall` line."""
    from retriever.faiss_index import IndexParams, new_index
    from retriever.shards import write_shard
    from retriever.tuning import tune_build

    shards, vectors = [], np.random.default_rng(0).random((60, 8), dtype=np.float32)
    for part in range(3):
        shards.append(tmp_path / f"embeddings-w000of001-{part:05d}.parquet")
        write_shard(shards[-1], [f"d{part}-{row}" for row in range(20)], vectors[part * 20:(part + 1) * 20], {})
    index = new_index("IVF2,Flat", 8, IndexParams())
    index.train(vectors)
    index.add(vectors)
    params = IndexParams("IVF2,Flat", target_recall=0.5, tuning_k=3)
    assert tune_build(index, shards, vectors[:4], np.empty((0, 8), np.float32), np.empty(0, np.int64), params)
    bar = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("exact")]
    assert bar and "3/3" in bar[-1], bar
    tune_build(index, shards, vectors[:4], np.empty((0, 8), np.float32), np.empty(0, np.int64), params,
               progress=False)
    assert "exact" not in capsys.readouterr().err


def test_a_tuning_without_progress_prints_its_result_only_when_it_is_a_warning(tmp_path, capsys):
    """A library build with progress=False still printed 'target recall@k ...: ... measured ...' on stderr; the
    result is in the manifest it returns. A target no setting reaches is still a warning."""
    from retriever.faiss_index import IndexParams, new_index
    from retriever.shards import write_shard
    from retriever.tuning import tune_build

    vectors = np.random.default_rng(0).random((40, 8), dtype=np.float32)
    shards = [tmp_path / "embeddings-w000of001-00000.parquet"]
    write_shard(shards[0], [f"d{row}" for row in range(40)], vectors, {})
    index = new_index("IVF2,PQ1x2", 8, IndexParams())
    index.train(vectors)
    index.add(vectors)
    held, none = np.empty((0, 8), np.float32), np.empty(0, np.int64)
    for target, reached in ((0.01, True), (1.0, False)):
        params = IndexParams("IVF2,PQ1x2", target_recall=target, tuning_k=3)
        assert tune_build(index, shards, vectors[:4], held, none, params, progress=False)["reached"] is reached
        err = capsys.readouterr().err
        assert "target recall@" not in err and ("warning: no search setting reaches" in err) is not reached
        tune_build(index, shards, vectors[:4], held, none, params, progress=True)
        assert "target recall@3" in capsys.readouterr().err


@pytest.mark.parametrize("given, tuning_queries, documents, said", [
    (1, 1000, 40, "on 1 given query, too few to trust (fewer than 30): tune on a --tuning-queries-file of at least 30"),
    (1, 1, 40, "on 1 given query, too few to trust (fewer than 30): tune on a --tuning-queries-file of at least 30"),
    (0, 1, 60, "on 1 held-out own vector, too few to trust (fewer than 30): raise --tuning-queries to at least 30"),
    # it said "raise --tuning-queries to at least 30", which no --tuning-queries reaches on 40 documents
    (0, 1, 40, "on 1 held-out own vector, too few to trust (fewer than 30): a build holds out at most half the "
               "corpus's documents (20 of 40); tune on a --tuning-queries-file of at least 30"),
    (0, 1000, 40, "on 20 held-out own vectors, too few to trust (fewer than 30): a build holds out at most half the "
                  "corpus's documents (20 of 40); tune on a --tuning-queries-file of at least 30"),
])
def test_a_tuning_on_too_few_queries_is_warned_of(tmp_path, capsys, given, tuning_queries, documents, said):
    """`--target-recall 0.95 --tuning-queries 1` tuned on one held-out vector without a word, its two-standard-error
    margin gone (no error from one query): on 40 draws of one query the nprobe picked missed the target on other
    queries half the time (recall as low as 0.43); on 30 queries none did."""
    from retriever.faiss_index import IndexParams, new_index
    from retriever.shards import write_shard
    from retriever.tuning import held_out_rows, tune_build

    vectors = clustered(documents, dim=8)
    shards = [tmp_path / "embeddings-w000of001-00000.parquet"]
    write_shard(shards[0], [f"d{row}" for row in range(documents)], vectors, {})
    params = IndexParams("IVF2,Flat", target_recall=0.5, tuning_k=3, tuning_queries=tuning_queries)
    held = held_out_rows(documents, params) if not given else np.empty(0, np.int64)
    index = new_index("IVF2,Flat", 8, IndexParams())
    index.train(vectors)
    index.add(np.delete(vectors, held, axis=0))
    tune_build(index, shards, vectors[:given] if given else None, vectors[held], held, params)
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if "too few" in line]
    assert len(warnings) == 1 and said in warnings[0] and warnings[0].startswith("warning: recall was measured "), (
        warnings)
    sample = said.split(", too few")[0]  # the result line counts it alike: it said "on 1 held-out own vectors"
    assert [line for line in err if line.startswith("target recall@3")][0].endswith(sample), err
    tune_build(index, shards, vectors[:30], vectors[held], held, params, progress=False)
    assert "too few" not in capsys.readouterr().err
