"""Pick nprobe / efSearch for a target recall, measured rather than guessed.

Queries are a sample of the collection's own vectors, held out of the index while it is tuned
and added afterwards, and the truth is an exact search over the other vectors, so the choice fits
this collection's geometry. Held out, because a vector already in the index is the easiest query
there is: HNSW reaches its node and that node's links lead straight to its neighbours, so even
with the self-match left out the recall measured that way overstated real queries' (0.960 vs
0.938 on a hard 100k set; held out: 0.957 vs 0.949 on 20k). The smallest setting that reaches
the target (with a two-standard-error margin for the sample) is kept: the fastest one that does.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import faiss
import numpy as np

from retriever.errors import RetrieverError
from retriever.exact import exact_top_k, kept_vectors
from retriever.search_settings import apply_search_params, ivf_part, taken_setting
from retriever.shards import sample_rows
from retriever.tie_cut import MAX_EXTRA
from retriever.wording import counted

if TYPE_CHECKING:
    from retriever.faiss_index import IndexParams

# Steps of about 1.5x, so the chosen nprobe does not overshoot the target by a whole doubling.
NPROBE_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
                     3072, 4096)
EF_SEARCH_CANDIDATES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048)
# The fewest tuning queries whose measured recall is trusted without a warning: on 40 draws of a sample from 2000
# clustered queries (IVF256 over 20k vectors, target 0.95), the nprobe picked on 1 query fell short of the target on
# the other queries in 53% of draws (recall as low as 0.43), on 5 in 15%, on 30 in none
MIN_TUNING_QUERIES = 30


def per_query_recall(found: np.ndarray, truth: np.ndarray, k: int | None = None) -> np.ndarray:
    """Each query's share of its top ``k`` (default: truth's width) that the approximate search returned; a truth
    row wider than k also lists the rows tied with the k-th (``true_neighbours``), -1 padded."""
    k = k or truth.shape[1]
    return np.array([len(set(f[:k].tolist()) & set(t[t >= 0].tolist())) / k for f, t in zip(found, truth)])


def recall_at_k(found: np.ndarray, truth: np.ndarray, k: int | None = None) -> float:
    """Mean share of the exact top-k that the approximate search returned."""
    return float(np.mean(per_query_recall(found, truth, k)))


def true_neighbours(shards: list[Path], queries: np.ndarray, k: int, held: np.ndarray, progress: bool = True
                    ) -> np.ndarray:
    """Each query's exact top-k rows, widened (-1 padded) by every row whose score ties the k-th, up to MAX_EXTRA
    more: an index returning one of those found a true neighbour as much as the one exact search kept (duplicated
    passages measured 0.89 at any efSearch and warned that no setting reached the target). Each pass over the
    shards draws a bar with ``progress``: it reads them all (gigabytes) for a few rows per query."""
    scores, rows = exact_top_k(queries, kept_vectors(shards, held, "exact neighbours" if progress else None), k + 1)
    floor = scores[:, k - 1] - 1e-6 * np.abs(scores[:, k - 1])  # one vector's dot product may round otherwise
    tied = np.flatnonzero((rows[:, k] >= 0) & (scores[:, k] >= floor))
    if not len(tied):
        return rows[:, :k]
    deep_scores, deep_rows = exact_top_k(queries[tied], kept_vectors(shards, held, "exact neighbours, ties"
                                                                     if progress else None), k + MAX_EXTRA)
    truth = np.full((len(queries), deep_rows.shape[1]), -1, dtype=rows.dtype)
    truth[:, :k] = rows[:, :k]
    truth[tied] = np.where(deep_scores >= floor[tied, None], deep_rows, -1)
    return truth


def tunable_parameter(index: faiss.Index) -> tuple[str, tuple[int, ...]] | None:
    """The setting to sweep and its candidates. An IVF's end at its lists (all probed: exact with Flat codes)
    when they are within the candidates' range: ending at the candidate below (32 of 40 lists), a sweep said no
    setting reached a target that probing all 40 reaches."""
    name = taken_setting(index)
    if name == "nprobe":
        nlist = ivf_part(index).nlist
        every_list = (nlist,) if nlist <= NPROBE_CANDIDATES[-1] else ()
        return "nprobe", tuple(n for n in NPROBE_CANDIDATES if n < nlist) + every_list
    return None if name is None else (name, EF_SEARCH_CANDIDATES)


def choose_search_params(index: faiss.Index, queries: np.ndarray, truth: np.ndarray,
                         target_recall: float, k: int | None = None) -> dict:
    """The smallest nprobe/efSearch whose recall@k reaches the target with ~97.5% confidence.

    A setting counts only if its measured mean minus two standard errors (over the sample
    queries) reaches the target, so sampling luck does not pick a setting that falls short on
    real queries. When none does, the smallest one with the best recall is kept, not the slowest.
    """
    if not 0 < target_recall <= 1:
        raise RetrieverError("--target-recall must be in (0, 1]")
    k = k or truth.shape[1]

    def measured() -> dict:
        recalls = per_query_recall(index.search(queries, k)[1], truth, k)
        error = float(recalls.std(ddof=1) / np.sqrt(len(recalls))) if len(recalls) > 1 else 0.0
        mean = float(recalls.mean())
        return {"recall": round(mean, 4), "lower_bound": round(mean - 2 * error, 4)}

    base = {"target_recall": target_recall, "k": k, "sample_queries": len(queries)}
    tunable = tunable_parameter(index)
    if tunable is None:
        result = measured()
        return {"parameter": None, "value": None, "measured_recall": result["recall"], **base,
                "reached": result["recall"] >= target_recall}
    name, candidates = tunable

    def step(value: int) -> dict:
        apply_search_params(index, **{name: value})
        sweep.append({"value": value, **measured()})
        return sweep[-1]

    sweep: list[dict] = []
    for value in candidates:
        if step(value)["lower_bound"] >= target_recall:
            break
    reached = sweep[-1]["lower_bound"] >= target_recall
    best = max(entry["recall"] for entry in sweep)
    chosen = sweep[-1] if reached else next(entry for entry in sweep if entry["recall"] == best)
    if reached and len(sweep) > 1:
        # Bisect between the last candidate that fell short and the first that reached, so the
        # setting lands near the target instead of a whole candidate step above it.
        low = sweep[-2]["value"]
        while chosen["value"] - low > 1:
            middle = step((low + chosen["value"]) // 2)
            low, chosen = (low, middle) if middle["lower_bound"] >= target_recall else (middle["value"], chosen)
        sweep.sort(key=lambda entry: entry["value"])
    apply_search_params(index, **{name: chosen["value"]})
    return {"parameter": name, "value": chosen["value"], "measured_recall": chosen["recall"],
            "lower_bound": chosen["lower_bound"], **base, "reached": reached, "sweep": sweep}


def check_held_out(count: int, params: IndexParams, source: str = "the corpus has") -> None:
    """Refuse, from the count before any encoding (``build``) or corpus pass (``index``), a --target-recall measured
    on the collection's own vectors when it has fewer than 2: one is held out as the query, one must be found (it
    was refused only after the doc store and BM25 were made)."""
    if params.target_recall is not None and count < 2:
        raise RetrieverError(f"--target-recall needs at least 2 vectors to measure recall on (own vectors held out as "
                             f"queries), and {source} {count}; tune on real queries with --tuning-queries-file, or "
                             "drop --target-recall")


def held_out_rows(count: int, params: IndexParams) -> np.ndarray:
    """Rows kept out of the index until --target-recall tuning is done (none without it)."""
    if params.target_recall is None:
        return np.empty(0, dtype=np.int64)
    check_held_out(count, params)
    return sample_rows(count, min(params.tuning_queries, count // 2), params.seed + 1)


def tune_build(index: faiss.Index, shards: list[Path], given_queries: np.ndarray | None, held_vectors: np.ndarray,
               held: np.ndarray, params: IndexParams, labels_of_rows=None, progress: bool = True) -> dict | None:
    """A build's tuning: on the given query vectors, else on the held-out rows' vectors; None with neither."""
    if given_queries is not None:
        return tune(index, shards, given_queries, held, params, GIVEN, labels_of_rows, progress)
    if len(held):
        return tune(index, shards, held_vectors, held, params, HELD_OUT, labels_of_rows, progress)
    return None


# What a tuning measured recall on, as the manifest records it, and one of each as messages count them
GIVEN, HELD_OUT = "given queries", "held-out own vectors"
_ONE = {GIVEN: "given query", HELD_OUT: "held-out own vector"}


def few_queries_warning(sample: int, source: str, setting: str | None, corpus: int) -> str | None:
    """The warning for a recall measured on fewer than ``MIN_TUNING_QUERIES`` queries (None for enough), with how to
    get more: a --tuning-queries below it, unless the ``corpus`` (documents, held out ones too) is too small to hold
    out that many (half of it at most), else a --tuning-queries-file of more queries. One query has no standard
    error, so the margin the choice keeps was none."""
    if sample >= MIN_TUNING_QUERIES:
        return None
    fix = f"tune on a --tuning-queries-file of at least {MIN_TUNING_QUERIES} queries"
    if source == HELD_OUT and corpus // 2 >= MIN_TUNING_QUERIES:
        fix = f"raise --tuning-queries to at least {MIN_TUNING_QUERIES}"
    elif source == HELD_OUT:
        fix = f"a build holds out at most half the corpus's documents ({corpus // 2} of {corpus}); {fix}"
    return (f"warning: recall was measured on {counted(sample, _ONE[source])}, too few to trust (fewer than "
            f"{MIN_TUNING_QUERIES}): {fix}; the {setting or 'setting'} chosen may miss the target on other queries")


def tune(index: faiss.Index, shards: list[Path], queries: np.ndarray, held: np.ndarray, params: IndexParams,
         source: str, labels_of_rows=None, progress: bool = True) -> dict:
    """Measure recall against exact search over the indexed rows; pick nprobe/efSearch.

    ``labels_of_rows`` maps exact search's row numbers to the index's labels where they differ."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(params.tuning_k, int(index.ntotal))
    truth = true_neighbours(shards, queries, k, held, progress)
    if labels_of_rows is not None:
        truth = labels_of_rows(truth)
    tuning = {**choose_search_params(index, queries, truth, params.target_recall, k), "queries": source}
    outcome = "measured" if tuning["reached"] else "NOT REACHED; best measured"
    setting = f"{tuning['parameter']}={tuning['value']}" if tuning["parameter"] else "nothing to tune"
    if progress:  # the manifest holds the result; a library build with progress=False keeps stderr quiet
        print(f"target recall@{tuning['k']} {params.target_recall}: {setting} {outcome} "
              f"{tuning['measured_recall']:.4f} on {counted(len(queries), _ONE[source])}", file=sys.stderr)
    few = few_queries_warning(len(queries), source, tuning["parameter"], int(index.ntotal) + len(held))
    if few:
        print(few, file=sys.stderr)
    if not tuning["reached"]:
        print("warning: no search setting reaches the target recall; rebuild with more lists/links, a finer code "
              "(e.g. an RFlat refinement) or a flat index", file=sys.stderr)
    return tuning
