"""BM25 queries at the size limits: very long queries, repeated terms, every method."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retriever.indexing import DOCSTORE_FILE
from retriever.lexical import METHODS, LexicalParams, build_lexical
from retriever.lexical_index import LexicalIndex

WORDS = [f"w{i}x" for i in range(60)]


@pytest.fixture()
def folder(tmp_path):
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 10)) for _ in range(500)]
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(500)], "title": [""] * 500, "text": texts}),
                   tmp_path / DOCSTORE_FILE)
    return tmp_path


class CountingArray(np.ndarray):
    """An array that counts the slices taken of it: how often a posting list is read."""

    reads = 0

    def __getitem__(self, key):
        if isinstance(key, slice):
            CountingArray.reads += 1
        return np.asarray(super().__getitem__(key))


def exact_scores(index: LexicalIndex, terms: dict[str, int]) -> np.ndarray:
    """Each document's score in float64: a term's posting weight times how often the query holds it."""
    data, indices, indptr = (np.asarray(index.model.scores[name]) for name in ("data", "indices", "indptr"))
    total = np.zeros(index.count)
    for term, count in terms.items():
        term_id = index.term_id(term)
        total[indices[indptr[term_id]:indptr[term_id + 1]]] += count * data[indptr[term_id]:indptr[term_id + 1]]
    return total


def test_a_query_repeating_terms_reads_each_posting_list_once_and_ranks_by_exact_counts(folder):
    """A 1M-character query of a few words read a term's posting list once per occurrence (minutes on a large
    index) and summed them in float32, which reordered the top hits; now once per distinct term."""
    index = LexicalIndex(folder, build_lexical(folder / DOCSTORE_FILE, folder / "bm25", progress=False))
    terms = {"w1x": 40_000, "w2x": 39_999, "w3x": 25_000, "w4x": 7}
    query = " ".join(" ".join([term] * count) for term, count in terms.items())
    data, indices, indptr = index._postings  # the arrays search reads (views of bm25s's, made once)
    index._postings = (data.view(CountingArray), indices, indptr)
    CountingArray.reads = 0
    scores, rows = index.search([query], k=50)
    assert 0 < CountingArray.reads <= len(terms)
    exact = exact_scores(index, terms)
    ranked = exact[rows[0]]  # in exact order, up to float32 rounding; none left out scores more
    assert (ranked[1:] <= ranked[:-1] * (1 + 1e-6)).all()
    assert np.delete(exact, rows[0]).max() <= ranked.min() * (1 + 1e-6)
    np.testing.assert_allclose(scores[0], ranked, rtol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_queries_without_repeats_score_as_bm25s_does(folder, method):
    """Counting terms changes nothing for the usual query: the scores are bm25s's own, bit for bit."""
    index = LexicalIndex(folder, build_lexical(folder / DOCSTORE_FILE, folder / "bm25", LexicalParams(method=method),
                                               progress=False))
    for query in ("w1x w2x w3x", "w5x w9x", "w7x"):
        ids, counts = index.term_counts(index.tokenize(query))
        assert counts == [1] * len(ids)
        assert np.array_equal(index.scores(ids, counts), index.model.get_scores_from_ids(ids))
