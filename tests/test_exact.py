import numpy as np

from retriever.exact import exact_neighbours, exact_top_k
from retriever.shards import write_shard
from test_tuning import clustered


def test_exact_neighbours_streams_shards(tmp_path):
    vectors = clustered(300)
    for part in range(3):
        rows = vectors[part * 100:(part + 1) * 100]
        write_shard(tmp_path / f"s{part}.parquet", [str(i) for i in range(len(rows))], rows, {})
    queries = clustered(7, seed=1)
    truth = exact_neighbours([tmp_path / f"s{p}.parquet" for p in range(3)], queries, 5)
    expected = np.argsort(-(queries @ vectors.T), axis=1)[:, :5]
    assert truth.tolist() == expected.tolist()  # best first


def test_excluded_rows_are_skipped_and_the_rest_numbered_as_in_an_index_without_them(tmp_path):
    vectors = clustered(300)
    for part in range(3):
        rows = vectors[part * 100:(part + 1) * 100]
        write_shard(tmp_path / f"s{part}.parquet", [str(i) for i in range(len(rows))], rows, {})
    held = np.array([5, 99, 100, 250])
    queries = vectors[held]
    truth = exact_neighbours([tmp_path / f"s{p}.parquet" for p in range(3)], queries, 5, exclude_rows=held)
    kept = np.delete(vectors, held, axis=0)
    expected = np.argsort(-(queries @ kept.T), axis=1)[:, :5]
    assert truth.tolist() == expected.tolist()


def test_blocks_smaller_than_k_and_fewer_vectors_than_k():
    vectors = clustered(5)
    queries = clustered(3, seed=1)
    scores, rows = exact_top_k(queries, [vectors[:2], vectors[2:2], vectors[2:]], 7)
    expected = np.argsort(-(queries @ vectors.T), axis=1)
    assert rows[:, :5].tolist() == expected.tolist() and (rows[:, 5:] == -1).all()
    assert np.allclose(scores[:, :5], np.sort(queries @ vectors.T, axis=1)[:, ::-1], atol=1e-6)
