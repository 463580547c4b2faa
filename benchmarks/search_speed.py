"""Search speed: flat vs HNSW vs IVF-PQ (plain and re-ranked) on SciFact and a hard synthetic set.

Indexes are made the way the engine makes them (``factory_string`` + ``index_factory``, training
on a ``train_size`` sample, ``apply_search_params``), so the numbers describe the product, not a
hand-tuned FAISS. Recall@10 is measured against exact (flat) search on held-out queries; QPS and
latency at batch 1 and batch 64 use every FAISS thread. Writes results/search_speed.md and
results/search_recall_qps.png.

Run: python benchmarks/search_speed.py            # SciFact + synthetic 1M × 384 (20-35 min on 2 shared cores)
     python benchmarks/search_speed.py --quick    # SciFact + synthetic 100k, a smoke check
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, `synthetic` from any cwd

from common import dataset_path, stamp  # noqa: E402
from synthetic import SyntheticCollection, SyntheticSpec  # noqa: E402

from search_report import Row, plot, report_lines  # noqa: E402
from search_timing import K, index_bytes, loadavg, log, measure  # noqa: E402

from retriever.faiss_index import IndexParams, factory_string, new_index  # noqa: E402
from retriever.files import atomic_write_text  # noqa: E402
from retriever.shards import sample_rows  # noqa: E402
from retriever.search_settings import apply_search_params  # noqa: E402
from retriever.tuning import choose_search_params  # noqa: E402

HNSW_EF = (16, 32, 64, 128, 256, 512)
NPROBE = (1, 2, 4, 8, 16, 32, 64, 128, 256)
REFINE_K_FACTOR = 50   # re-score K * 50 PQ candidates exactly: k_factor 10 stalls at recall 0.90 on 1M
RESULTS = Path(__file__).resolve().parent / "results"


def build(spec: str, params: IndexParams, vectors: np.ndarray,
          tuning_set: tuple[np.ndarray, np.ndarray] | None = None,
          target: float | None = None) -> tuple[faiss.Index, float, dict | None]:
    """Build as retriever.indexing.build_index does: ``new_index``, sampled training, add; with a
    target, the last ``len(tuning_set[0])`` vectors are held out, tuned on, then added."""
    started = time.perf_counter()
    index = new_index(spec, vectors.shape[1], params)
    if not index.is_trained:
        index.train(vectors[sample_rows(len(vectors), params.train_size, params.seed)])
    held = len(tuning_set[0]) if tuning_set is not None and target is not None else 0
    for start in range(0, len(vectors) - held, 100_000):
        index.add(vectors[start:min(start + 100_000, len(vectors) - held)])
        if len(vectors) > 100_000:
            log(f"  {spec}: added {min(start + 100_000, len(vectors) - held)}/{len(vectors)}")
    tuning = None
    if held:
        tuned_at = time.perf_counter()
        tuning = choose_search_params(index, *tuning_set, target)
        started += time.perf_counter() - tuned_at  # build time excludes the tuning sweep
        index.add(vectors[len(vectors) - held:])
    return index, time.perf_counter() - started, tuning


def held_out_order(n: int, params: IndexParams) -> np.ndarray:
    """Row order with build_index's tuning sample last, so 'add the rest, tune, add them' is a slice."""
    held = sample_rows(n, min(params.tuning_queries, n // 2), params.seed + 1)
    return np.concatenate([np.setdiff1d(np.arange(n), held), held])


def target_row(index: faiss.Index, name: str, tuning: dict, queries: np.ndarray, truth: np.ndarray, base: dict,
               budgets: tuple[float, float]) -> Row:
    """What ``IndexParams(target_recall=R)`` picks, tuned on held-out own vectors as build_index does,
    and the recall it really gives on the benchmark's queries."""
    apply_search_params(index, **{tuning["parameter"]: tuning["value"]})
    label = f"{tuning['parameter']}={tuning['value']} (target {tuning['target_recall']}; " \
            f"{tuning['measured_recall']:.3f} on {tuning['sample_queries']} held-out own vectors)"
    return measure(index, queries, truth, {**base, "index": f"{name} target", "params": label, "kind": "target"},
                   budgets)[0]


def with_tuning_sample_last(vectors: np.ndarray, params: IndexParams, target: float | None
                            ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """Vectors reordered so build_index's tuning sample comes last, and that sample with its exact
    neighbours among the rest (None without a target)."""
    if target is None:
        return vectors, None
    n, dim = vectors.shape
    vectors = vectors[held_out_order(n, params)]
    held = min(params.tuning_queries, n // 2)
    rest = faiss.IndexFlatIP(dim)
    rest.add(vectors[:n - held])
    return vectors, (vectors[n - held:], rest.search(vectors[n - held:], params.tuning_k)[1])


@dataclasses.dataclass
class Workload:
    """One collection's vectors and queries, the exact answers, and how long to time each setting."""
    dataset: str
    vectors: np.ndarray
    queries: np.ndarray
    budgets: tuple[float, float]
    target: float | None
    tuning_set: tuple[np.ndarray, np.ndarray] | None = None
    truth: np.ndarray | None = None


def sweep(work: Workload, params: IndexParams, parameter: str, values, label) -> tuple[list[Row], faiss.Index]:
    """Build one index family, one row per search setting, then the row for what the target-recall
    tuner picked."""
    n, dim = work.vectors.shape
    spec = factory_string(params, dim, n)  # a factory string such as "<ivfpq>,RFlat" comes back as it is
    log(f"{work.dataset}: building {spec} on {n} vectors")
    index, seconds, tuning = build(spec, params, work.vectors, work.tuning_set, work.target)
    base = dict(dataset=work.dataset, build_s=seconds, size_mb=index_bytes(index) / 2**20)
    rows = []
    for value in values(index):
        apply_search_params(index, **{parameter: value})
        rows.append(measure(index, work.queries, work.truth, {**base, "index": spec, "params": label(value)},
                            work.budgets)[0])
    if tuning is not None:
        rows.append(target_row(index, spec, tuning, work.queries, work.truth, base, work.budgets))
    return rows, index


def exact_row(work: Workload, label: str, size_mb: float | None = None) -> tuple[Row, np.ndarray]:
    flat, seconds, _ = build("Flat", IndexParams("flat"), work.vectors)
    size = index_bytes(flat) / 2**20 if size_mb is None else size_mb
    return measure(flat, work.queries, work.truth, dict(dataset=work.dataset, index=label, params="-", build_s=seconds,
                                                        size_mb=size, kind="exact"), work.budgets)


def benchmark(dataset: str, vectors: np.ndarray, queries: np.ndarray, ef_construction: int,
              budgets: tuple[float, float], target: float | None) -> tuple[list[Row], dict]:
    """Every index type on one collection, each with IndexParams of its own type (IndexParams refuses a setting its
    type does not use); returns rows and facts for the notes."""
    facts: dict = {"n": len(vectors), "queries": len(queries), "load_start": loadavg()}
    vectors, tuning_set = with_tuning_sample_last(vectors, IndexParams(), target)  # tuning_queries and seed: any type
    work = Workload(dataset, vectors, queries, budgets, target, tuning_set)
    exact, work.truth = exact_row(work, "flat (exact)")
    rows = [exact]

    params = IndexParams("hnsw", ef_construction=ef_construction)
    found, hnsw = sweep(work, params, "ef_search", lambda _: HNSW_EF, lambda ef: f"efSearch={ef}")
    rows += found
    facts["hnsw"] = f"{found[0].index}, efConstruction {params.ef_construction}: {found[0].build_s:.0f} s"
    del hnsw

    def nprobes(index: faiss.Index) -> list[int]:
        return [p for p in NPROBE if p <= faiss.extract_index_ivf(index).nlist]

    params = IndexParams("ivfpq")
    found, ivfpq = sweep(work, params, "nprobe", nprobes, lambda nprobe: f"nprobe={nprobe}")
    rows += found
    facts["coarse_nprobe1"] = coarse_recall(ivfpq, vectors, queries, work.truth)
    facts["ivfpq"] = found[0].index
    del ivfpq

    # Re-ranked variant, as `--index-type "<factory>,RFlat"` builds it (k_factor from IndexParams).
    params = IndexParams(f"{facts['ivfpq']},RFlat", refine_k_factor=REFINE_K_FACTOR)
    rows += sweep(work, params, "nprobe", nprobes, lambda nprobe: f"nprobe={nprobe}, k_factor={REFINE_K_FACTOR}")[0]
    rows.append(exact_row(work, "flat (exact, again at end)", exact.size_mb)[0])
    facts["load_end"] = loadavg()
    return rows, facts


def coarse_recall(index: faiss.Index, vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray) -> float:
    """Recall@10 an IVF-Flat with the same lists would have at nprobe=1: share of the exact
    neighbours that sit in the query's own list (PQ error excluded, partition difficulty only)."""
    quantizer = faiss.extract_index_ivf(index).quantizer
    _, query_list = quantizer.search(queries, 1)
    _, neighbour_list = quantizer.search(vectors[truth.ravel()], 1)
    return float(np.mean(neighbour_list.reshape(truth.shape) == query_list))


def scifact_data(index_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """SciFact passage vectors from the engine's flat index (built if absent) and encoded test queries."""
    from retriever.corpus import BeirDataset
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.evaluation import judged_split
    from retriever.indexing import encode_and_index

    dataset = BeirDataset.open(dataset_path("scifact"))
    encoder = Encoder(EncoderSettings.for_model("minilm"))
    if not (index_dir / "index.faiss").is_file():
        log(f"{index_dir} missing: encoding and indexing SciFact (about 3 minutes)")
        encode_and_index(dataset.corpus_path, index_dir, encoder, IndexParams("flat"), overwrite=True)
    stored = faiss.read_index(str(index_dir / "index.faiss"))
    vectors = stored.reconstruct_n(0, stored.ntotal)
    queries, _ = judged_split(dataset, "test")
    return np.ascontiguousarray(vectors), np.ascontiguousarray(encoder.encode_queries([q.text for q in queries]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="synthetic 100k, 300 queries, short timings")
    parser.add_argument("--n", type=int, help="synthetic collection size (default 1,000,000; 100,000 with --quick)")
    parser.add_argument("--queries", type=int, help="synthetic held-out queries (default 1000; 300 with --quick)")
    parser.add_argument("--ef-construction", type=int, default=200, help="HNSW efConstruction for the synthetic set")
    parser.add_argument("--target-recall", type=float, default=0.95, help="0 skips the target-recall rows")
    parser.add_argument("--scifact-index", type=Path, default=Path("/tmp/idx/scifact"),
                        help="flat SciFact index folder; built with the engine if absent")
    parser.add_argument("--skip-scifact", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    n = args.n or (100_000 if args.quick else 1_000_000)
    nq = args.queries or (300 if args.quick else 1000)
    budgets = (1.0, 0.5) if args.quick else (3.0, 1.0)
    target = args.target_recall or None
    faiss.omp_set_num_threads(args.threads)
    started, load_start = time.perf_counter(), loadavg()
    results: dict[str, list[Row]] = {}
    facts: dict[str, dict] = {}
    if not args.skip_scifact:
        vectors, queries = scifact_data(args.scifact_index)
        name = f"SciFact ({len(vectors):,} × {vectors.shape[1]}, MiniLM)"
        results[name], facts[name] = benchmark(name, vectors, queries, IndexParams.ef_construction, budgets, target)
        del vectors
    if not args.skip_synthetic:
        spec = SyntheticSpec()
        t0 = time.perf_counter()
        collection = SyntheticCollection(spec)
        vectors, queries = collection.vectors(n), collection.queries(nq)
        log(f"generated synthetic {n} × {spec.dim} in {time.perf_counter() - t0:.0f} s")
        name = f"synthetic ({n:,} × {spec.dim}, hard)"
        results[name], facts[name] = benchmark(name, vectors, queries, args.ef_construction, budgets, target)
        facts[name]["spec"] = spec
        del vectors
    runtime = time.perf_counter() - started

    RESULTS.mkdir(exist_ok=True)
    suffix = "_quick" if args.quick else ""
    png = RESULTS / f"search_recall_qps{suffix}.png"
    plot(results, png)
    header = [stamp(), f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} FAISS threads "
              f"(batch-1 searches run on one thread: FAISS parallelises over queries); "
              f"/proc/loadavg at start {load_start}, at end {loadavg()} — the machine was shared, "
              f"so QPS is noisy; runtime {runtime / 60:.1f} min", "", "# Search speed: flat vs HNSW vs IVF-PQ", "",
              f"Recall@10 is measured against exact inner-product search (flat) on held-out queries; QPS counts "
              f"queries per second of search calls; latency is per call (1 query, or 64). Batch 1 times at most "
              f"{budgets[0]:g} s (≥ 30 queries) per setting, batch 64 one full pass and ≥ {budgets[1]:g} s. "
              f"Sizes are serialised index bytes. Indexes come from `factory_string`/`new_index`/"
              f"`apply_search_params` of the engine; the re-ranked IVF-PQ is `--index-type '<factory>,RFlat'` "
              f"with `--refine-k-factor {REFINE_K_FACTOR}` (the exact vectors re-score the top {REFINE_K_FACTOR * K} "
              f"PQ candidates). **Bold** rows are what `IndexParams(target_recall={target})` picks, tuned on "
              f"held-out own vectors as `build_index` does, measured on the benchmark's queries.", ""]
    text = "\n".join(report_lines(header, results, facts, png.name))
    md = RESULTS / f"search_speed{suffix}.md"
    atomic_write_text(md, text)
    print(text)
    log(f"wrote {md} and {png} in {runtime / 60:.1f} min")


if __name__ == "__main__":
    main()
