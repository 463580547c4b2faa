"""One micro-batch searched: one encoder pass for every query that needs a vector, then one search per group.

Hybrid requests need BM25's ranking too, which does not depend on the query vectors, so it runs on a
lexical thread while the encoder's forward pass runs (torch releases the GIL in its kernels, and a
served forward uses one core of its own: ``configure_threads``). A hybrid query then costs a dense
one plus the fusion, not plus BM25 as well.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Protocol

import numpy as np

from retriever.searching import Hit, Searcher


class Request(Protocol):
    queries: list[str]
    k: int
    mode: str


def group_key(searcher: Searcher, request: Request) -> tuple[str, int]:
    """Requests searched together: one mode, and in hybrid one fusion depth. Hybrid fuses the engines' top
    ``max(k, --fusion-depth)``, so a k over the depth searched with smaller ones deepened their lists too and
    changed their hits (a k=5 query batched with a k=200 one under --fusion-depth 10)."""
    deeper = request.mode == "hybrid" and request.k > searcher.fusion.depth
    return request.mode, request.k if deeper else 0


def search_batch(searcher: Searcher, batch: Sequence[Request], encode: Callable[[list[str]], np.ndarray],
                 lexical_thread: Executor) -> list[list[list[Hit]]]:
    """Hits per query of each request; ``encode`` turns texts into query vectors (raising for bad input)."""
    keys = [group_key(searcher, request) for request in batch]
    groups = {key: [i for i in range(len(batch)) if keys[i] == key] for key in dict.fromkeys(keys)}
    texts = {key: [t for i in group for t in batch[i].queries] for key, group in groups.items()}
    k = {key: max(batch[i].k for i in group) for key, group in groups.items()}
    lexical: dict[tuple[str, int], Future] = {
        key: lexical_thread.submit(searcher.lexical_ranking, texts[key], searcher.fusion_depth(k[key]))
        for key in groups if key[0] == "hybrid"}
    encoded = [i for i, request in enumerate(batch) if request.mode != "bm25"]
    vectors = encode([t for i in encoded for t in batch[i].queries]) if encoded else None
    first_row, row = {}, 0
    for i in encoded:
        first_row[i], row = row, row + len(batch[i].queries)
    results: list[list[list[Hit]]] = [[] for _ in batch]
    for key, group in groups.items():
        group_vectors = None if key[0] == "bm25" else np.concatenate(
            [vectors[first_row[i]:first_row[i] + len(batch[i].queries)] for i in group])
        lexical_top = lexical[key].result() if key in lexical else None
        scores, labels = searcher.rank(texts[key], k[key], key[0], group_vectors, lexical_top=lexical_top)
        row = 0
        for i in group:
            results[i] = [searcher.hits(scores[j, :batch[i].k], labels[j, :batch[i].k])
                          for j in range(row, row + len(batch[i].queries))]
            row += len(batch[i].queries)
    return results
