"""One micro-batch searched: BM25 of hybrid requests runs beside the encoder, and the hits are the searcher's."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from retriever.searching import Searcher
from retriever.serving.batch_search import search_batch
from serving_fixtures import tiny_index  # noqa: F401 - fixture


@dataclass
class Request:
    queries: list[str]
    k: int
    mode: str


def test_bm25_of_a_hybrid_batch_runs_while_the_encoder_does(tiny_index):
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    bm25_started, threads = threading.Event(), []
    ranking = searcher.lexical_ranking

    def lexical_ranking(texts, depth):
        threads.append((threading.current_thread().name, list(texts)))
        bm25_started.set()
        return ranking(texts, depth)

    def encode(texts):  # returns only once BM25 has started: a search that ran it after encoding fails here
        assert bm25_started.wait(10), "BM25 waited for the encoder"
        return searcher.encoder.encode_queries(texts)

    searcher.lexical_ranking = lexical_ranking
    batch = [Request(["hot volcanoes", "honey"], 3, "hybrid"), Request(["river of ice"], 2, "dense"),
             Request(["lava"], 2, "bm25"), Request(["the bee"], 1, "hybrid")]
    with ThreadPoolExecutor(1, thread_name_prefix="bm25-test") as lexical_thread:
        results = search_batch(searcher, batch, encode, lexical_thread)
    # the two hybrid requests are one group: one BM25 call, on the lexical thread; the bm25 request's is rank's own
    assert threads == [("bm25-test_0", ["hot volcanoes", "honey", "the bee"]), ("MainThread", ["lava"])]
    for request, hits in zip(batch, results):  # a padded batch's vectors may differ from one query's in the last bit
        alone = searcher.search(request.queries, request.k, mode=request.mode)
        assert [[h.id for h in row] for row in hits] == [[h.id for h in row] for row in alone]
        assert [h.score for row in hits for h in row] == pytest.approx([h.score for row in alone for h in row])
