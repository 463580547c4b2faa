"""One micro-batch searched: a request waiting for its batch (``Request``), and the batch's one encoder pass and
searches (``search_batch``), each request getting its own rows, k and refusal."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from retriever.errors import IndexDamaged, RetrieverError
from retriever.searching import Searcher


@dataclass
class Request:
    queries: list[str]
    k: int
    future: Future
    mode: str = "dense"
    cut_at: list = field(default_factory=list)  # per query: the tokens it was cut to, or None
    listed: bool = False  # a POST body's list: refusals name a query "queries.N" (``unknown_words.refusal``)
    warm_up: bool = False  # the warm-up's own: searched however the model reads it, never refused as a client's
    enqueued: float = field(default_factory=time.perf_counter)


def search_batch(searcher: Searcher, batch: list[Request], encode: Callable) -> list:
    """One encoder pass (``encode(texts, cut_at, unknown)``) for every query that needs a vector, then one search per
    group (``_group``). A dense request of a query holding no word the model knows gets its refusal
    (``Searcher.refuse_unknown``, from the tokenization its vectors used) in place of hits and is left out, so its
    batch mates are not searched again alone."""
    encoded = [i for i, request in enumerate(batch) if request.mode != "bm25"]
    cut_at, unknown = [], []  # the encoder's word on each query: cut, and holding no known word
    vectors = encode([t for i in encoded for t in batch[i].queries], cut_at, unknown) if encoded else None
    rows, row, results, unknown = {}, 0, [[] for _ in batch], np.array(unknown, dtype=bool)
    for i in encoded:
        start, row = row, row + len(batch[i].queries)
        rows[i], batch[i].cut_at[:] = np.arange(start, row), cut_at[start:row] or batch[i].cut_at
        if batch[i].mode == "dense" and not batch[i].warm_up:
            results[i] = _refusal(searcher, unknown[rows[i]], batch[i])
    keys = [_group(searcher, request) if not isinstance(results[i], RetrieverError) else None
            for i, request in enumerate(batch)]
    for key in dict.fromkeys(key for key in keys if key is not None):
        group, mode = [i for i in range(len(batch)) if keys[i] == key], key[0]
        picked = None if mode == "bm25" else np.concatenate([rows[i] for i in group])
        scores, labels = searcher.rank([t for i in group for t in batch[i].queries],
                                       max(batch[i].k for i in group), mode,
                                       None if picked is None else vectors[picked],
                                       unknown=None if picked is None else unknown[picked],
                                       keep_unknown=True)  # refused per request above, the warm-up kept
        row = 0
        for i in group:
            k = batch[i].k
            results[i] = _finite([searcher.hits(scores[j, :k], labels[j, :k])
                                  for j in range(row, row + len(batch[i].queries))], searcher, mode)
            row += len(batch[i].queries)
    return results


def _finite(results: list[list], searcher: Searcher, mode: str) -> list[list] | IndexDamaged:
    """A request's hits, or the damage a score of inf or NaN shows (no undamaged index gives one): a BM25 part whose
    stored weights were overwritten at their size was served as `"score": Infinity`, which is not JSON, with a 200."""
    for hits in results:
        for hit in hits:
            if not math.isfinite(hit.score):
                return IndexDamaged(f"{searcher.index_dir}: its {mode} search scored document {hit.id!r} {hit.score}, "
                                    "which no undamaged index does; find the damaged file with `retriever info "
                                    f"{searcher.index_dir} --verify`")
    return results


def _refusal(searcher: Searcher, unknown: np.ndarray, request: Request) -> RetrieverError | list:
    """A dense request's refusal of its queries of no known word, numbered within it; else no hits yet."""
    try:
        searcher.refuse_unknown(unknown, request.queries, request.cut_at, request.listed)
    except RetrieverError as error:
        return error
    return []


def _group(searcher: Searcher, request: Request) -> tuple[str, int]:
    """Requests searched together: one mode, and in hybrid one fusion depth. Hybrid fuses the engines' top
    ``max(k, --fusion-depth)``, so a k=200 query batched with a k=5 one deepened its lists and changed its hits."""
    deeper = request.mode == "hybrid" and request.k > searcher.fusion.depth
    return request.mode, request.k if deeper else 0
