"""A ``Searcher``'s batch runs: every query's top-k scores, for run files and evaluation, searched a batch at a time.

Held apart from ``searching`` (one search's ranking) as what turns its result rows into runs and bounds the hits a
batch holds; ``Searcher`` takes these methods as its own.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from retriever.errors import RetrieverError
from retriever.runs import Run
from retriever.search_settings import RUN_MODE, bounded, check_call_settings
from retriever.texts import check_k, check_queries, check_query_ids

BATCH_HITS = 256 * 1000  # most hits a batch search holds at once (its default batch at the default depth)


class BatchRuns:
    """``run`` and its batches, for ``Searcher`` (whose ``rank``, ``ranked``, ``fusion_depth``, ``mode`` and ``index``
    they use)."""

    def run(self, query_ids: Sequence[str], query_texts: Sequence[str], k: int = 1000, nprobe: int | None = None,
            ef_search: int | None = None, batch_size: int = 256,
            progress: Callable[[int], None] | None = None, unknown_found: list | None = None) -> Run:
        """Scores of the top-k documents per query, for run files and evaluation (``unknown_found`` as
        ``run_batches``')."""
        parts = self.run_batches(query_ids, query_texts, k, nprobe, ef_search, batch_size, progress, unknown_found)
        return {qid: hits for part in parts for qid, hits in part.items()}

    def run_batches(self, query_ids: Sequence[str], query_texts: Sequence[str], k: int = 1000,
                    nprobe: int | None = None, ef_search: int | None = None, batch_size: int = 256,
                    progress: Callable[[int], None] | None = None, unknown_found: list | None = None) -> Iterator[Run]:
        """``run`` one batch of queries at a time, each as soon as it is searched: a writer taking them holds one
        batch, not queries × k hits (about 60 bytes a hit: 100k queries × 1000 hits held 6 GB), and a batch at most
        ``BATCH_HITS`` hits per list (256 queries × 100,000 hits took 2.8 GB, and 3 GB at --fusion-depth 10**9).
        ``unknown_found`` (``rank``'s) gets each searched query's flag from the tokenization that made its vector."""
        query_ids, query_texts = check_query_ids(query_ids), check_queries(query_texts)
        if len(query_ids) != len(query_texts):
            raise RetrieverError(f"{len(query_ids)} query ids for {len(query_texts)} query texts")
        k, batch_size = check_k(k), bounded(batch_size, BATCH_HITS, "batch_size")
        check_call_settings(nprobe, ef_search, RUN_MODE)  # run has no mode of its own: it searches in self.mode
        if progress is not None and not callable(progress):  # it failed after the first batch was searched
            raise RetrieverError(f"progress must be a function called with each batch's query count, not "
                                 f"{type(progress).__name__} {progress!r:.40}")
        batch_size = self.queries_per_batch(self.fusion_depth(k) if self.mode == "hybrid" else k, batch_size)
        for start in range(0, len(query_ids), batch_size):
            texts = list(query_texts[start:start + batch_size])
            part = self.as_run(query_ids[start:start + batch_size],
                               *self.rank(texts, k, nprobe=nprobe, ef_search=ef_search, keep_unknown=True,
                                          unknown_found=unknown_found))
            if progress is not None:
                progress(len(texts))
            yield part

    def queries_per_batch(self, depth: int, batch_size: int = 256) -> int:
        """Deep searches take fewer queries at once, so a batch holds at most as many hits per list as 256 queries ×
        1000 (hybrid holds each engine's top --fusion-depth)."""
        return max(1, min(batch_size, BATCH_HITS // min(depth, max(int(self.index.ntotal), 1))))

    def as_run(self, query_ids: Sequence[str], scores: np.ndarray, labels: np.ndarray) -> Run:
        """Result rows (``rank``'s output) as a run, each query's hits in rank order."""
        run: Run = {}
        for qid, row_scores, row_labels in zip(query_ids, scores, labels):
            ids, ranked_scores, _ = self.ranked(row_scores, row_labels)
            run[qid] = dict(zip(ids, ranked_scores))
        return run
