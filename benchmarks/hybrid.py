"""Hybrid retrieval: BM25, dense and their fusion on every collection in ../shared/datasets.

For each collection: our BM25 alone, zero-shot minilm, a fine-tuned minilm where the collection has
a train split (SciFact, SQuAD: `retriever train`, mean pooling), the same fine-tuning with hard negatives
mined from the first model's index (`retriever mine`, then `--negatives --train-group-size 4`), and each
dense model fused with BM25 by the default untuned RRF (k=60, depth 1000) and, where there is a train split,
by the fusion `retriever bm25 --tune-fusion-on` picks on train. Scored on the test split: nDCG@10,
Recall@100, and query latency (p50 of one query at a time, encoding included, over a sample of
test queries, all modes interleaved query by query so they share the machine's load).

Whether hard negatives belong in the recipe is decided without the test split: `--dev-split NAME` holds
a fifth of NAME's train queries out as a dev split (fixed seed), runs both fine-tuned variants on the
rest and scores them on that dev split.

Indexes and models are cached in benchmarks/.work/ (git-ignored) and built with the CLI when
missing, with the commands printed; every finished row is appended to results/hybrid_runs.jsonl,
and `--report` turns them into results/hybrid.md and results/hybrid.png.

Run (2 CPU cores; encoding is most of the time):
    python benchmarks/hybrid.py --dataset scifact --dataset medline --dataset cranfield --dataset squad
    python benchmarks/hybrid.py --dev-split scifact
    python benchmarks/hybrid.py --report
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import append_records, dataset_path, linked_qrels_folder, qrels_query, stamp, train_qrels  # noqa: E402

from retriever.corpus import BeirDataset, read_queries  # noqa: E402
from retriever.evaluation import judged_split  # noqa: E402
from retriever.fusion import FusionParams, fuse  # noqa: E402
from retriever.fusion_tuning import tune_fusion  # noqa: E402
from retriever.info import index_summary  # noqa: E402
from retriever.metrics import Evaluation, evaluate_run  # noqa: E402
from retriever.searching import Searcher  # noqa: E402

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
RESULTS = HERE / "results"
RUNS_FILE = RESULTS / "hybrid_runs.jsonl"
DEPTH = 1000
LATENCY_QUERIES = 100
BOOTSTRAP_SAMPLES = 2000
# The fine-tuned recipe: minilm, mean pooling, lr 5e-5 (pooling.py's), passages cut at 128 tokens while training
# (half the cost on a CPU), the 2 epochs on every collection with a train split (SciFact 52 steps, SQuAD
# 356; SQuAD had a 25-step cost cut until 2026-11-27). The index is built at minilm's own 256 tokens, not the 128
# the model folder records: zero-shot minilm loses 0.02 nDCG@10 on SciFact at 128 (pooling.md), whose abstracts
# run past 128 tokens.
TRAIN_ARGS = ["--pooling", "mean", "--learning-rate", "5e-5", "--passage-max-length", "128", "--query-max-length", "64",
              "--epochs", "2"]
INDEX_PASSAGE_MAX_LENGTH = "256"
HARD_NEGATIVE_ARGS = ["--train-group-size", "4"]  # the README's second round: 1 positive + 3 mined negatives
DEV_FRACTION, DEV_SEED = 0.2, 12
VARIANTS = ("minilm", "ft", "hn")


def retriever_cli(*args: str) -> None:
    command = [sys.executable, "-m", "retriever", *args]
    print("$ retriever " + " ".join(args), file=sys.stderr, flush=True)
    subprocess.run(command, check=True)


def fine_tuned_model(data: Path, tag: str, variant: str) -> Path:
    """The cached fine-tuned model (ft: in-batch negatives; hn: plus negatives mined with the ft index)."""
    model = WORK / f"model-{variant}-{tag}"
    if (model / "retriever.json").is_file():
        return model
    extra = []
    if variant == "hn":
        negatives = WORK / f"negatives-{tag}.jsonl"
        if not negatives.is_file():
            retriever_cli("mine", str(dense_index(data, tag, "ft")), "--dataset", str(data), "--split", "train",
                          "-o", str(negatives))
        extra = ["--negatives", str(negatives), *HARD_NEGATIVE_ARGS]
    retriever_cli("train", "--dataset", str(data), "--split", "train", "--model", "minilm", *TRAIN_ARGS, *extra,
                  "-o", str(model))
    return model


def dense_index(data: Path, tag: str, variant: str) -> Path:
    """The cached index of ``variant`` (minilm, ft or hn) on ``data``, built (with BM25) when missing; a cached BM25
    part split otherwise than today's code would split it is rebuilt, so the rows measure the current BM25."""
    index = WORK / f"dense-{variant}-{tag}"
    if not (index / "manifest.json").is_file():
        model_args = [] if variant == "minilm" else ["--model", str(fine_tuned_model(data, tag, variant)),
                                                     "--passage-max-length", INDEX_PASSAGE_MAX_LENGTH]
        retriever_cli("build", str(data), "-o", str(index), *model_args)
    if not json.loads((index / "manifest.json").read_text()).get("lexical"):
        retriever_cli("bm25", str(index))
    elif index_summary(index)["bm25"]["current_splitting"] is False:
        retriever_cli("bm25", str(index), "--overwrite")
    return index


def dev_split(name: str) -> Path:
    """``name`` with its train qrels split into train and dev by query (DEV_FRACTION held out, DEV_SEED):
    the corpus and queries are linked, not copied; dev.tsv, written last, marks the split complete."""
    source, folder = dataset_path(name), WORK / f"{name}-dev"
    if (folder / "qrels" / "dev.tsv").is_file():
        return folder
    header, rows = train_qrels(source)
    query_ids = sorted({qrels_query(row) for row in rows})
    random.Random(DEV_SEED).shuffle(query_ids)
    cut = int(len(query_ids) * DEV_FRACTION)
    return linked_qrels_folder(source, folder, header, rows,
                               {"train": set(query_ids[cut:]), "dev": set(query_ids[:cut])})


def metrics_of(searcher: Searcher, ids: list[str], ranked: tuple[np.ndarray, np.ndarray], qrels: dict) -> Evaluation:
    return evaluate_run(searcher.as_run(ids, *ranked), qrels, ("ndcg@10", "recall@100"))


def gain_interval(fused: Evaluation, singles: list[Evaluation], samples: int = BOOTSTRAP_SAMPLES) -> list[float]:
    """95% paired-bootstrap interval, over queries, of fused nDCG@10 minus the better single system's (the one
    better on all queries): how precisely a collection's queries pin the gain down (Medline has 30)."""
    best = max(singles, key=lambda evaluation: evaluation.mean["ndcg@10"])
    gains = np.array([fused.per_query[q]["ndcg@10"] - best.per_query[q]["ndcg@10"] for q in fused.per_query])
    draws = np.random.default_rng(0).integers(0, len(gains), size=(samples, len(gains)))
    return [round(float(v), 4) for v in np.percentile(gains[draws].mean(axis=1), [2.5, 97.5])]


def latencies(searcher: Searcher, texts: list[str], fusions: dict[str, FusionParams],
              queries: int = LATENCY_QUERIES) -> dict[str, float]:
    """p50 ms of one query at a time per system, interleaved query by query."""
    times: dict[str, list[float]] = {name: [] for name in ["bm25", "dense", *fusions]}
    for text in texts[:queries]:
        for name in times:
            searcher.fusion = fusions.get(name, searcher.fusion)
            mode = name if name in ("bm25", "dense") else "hybrid"
            started = time.perf_counter()
            searcher.search([text], k=10, mode=mode)
            times[name].append(time.perf_counter() - started)
    return {name: round(float(np.median(values)) * 1000, 2) for name, values in times.items()}


def search_latency(name: str, queries: int = 300) -> dict:
    """p50 ms of the search alone (query vectors encoded beforehand) per mode, one query at a time,
    modes interleaved: what hybrid adds to a dense query, without the encoder's load-sensitive time.
    Each query runs three times per mode and its fastest is kept, so a preemption on a shared machine
    does not count as search time."""
    searcher = Searcher(dense_index(dataset_path(name), name, "minilm"))
    texts = [q.text for q in read_queries(BeirDataset.open(dataset_path(name)).queries_path)][:queries]
    vectors = searcher.encoder.encode_queries(texts)
    times: dict[str, list[float]] = {"dense": [], "bm25": [], "hybrid": []}
    for row, text in enumerate(texts):
        for mode in times:
            fastest = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                scores, labels = searcher.rank([text], 10, mode, vectors[row:row + 1])
                searcher.hits(scores[0], labels[0])
                fastest = min(fastest, time.perf_counter() - started)
            times[mode].append(fastest)
    return {"dataset": name, "system": "search only (no encoding)", "queries": len(texts),
            **{f"{mode}_p50_ms": round(float(np.median(v)) * 1000, 3) for mode, v in times.items()},
            **{f"{mode}_p90_ms": round(float(np.percentile(v, 90)) * 1000, 3) for mode, v in times.items()}}


def evaluate_variant(data: Path, tag: str, variant: str, latency_queries: int = LATENCY_QUERIES,
                     split: str = "test") -> list[dict]:
    """BM25, dense and hybrid rows of one dense model on one collection's ``split``."""
    beir = BeirDataset.open(data)
    queries, qrels = judged_split(beir, split)
    ids, texts = [q.id for q in queries], [q.text for q in queries]
    searcher = Searcher(dense_index(data, tag, variant))
    dense, lexical = searcher.rank(texts, DEPTH, "dense"), searcher.rank(texts, DEPTH, "bm25")
    fusions = {"hybrid rrf (untuned)": FusionParams(depth=DEPTH)}
    tuned = None
    if (data / "qrels" / "train.tsv").is_file():
        tuned = tune_fusion(searcher, data, "train")
        fusions["hybrid tuned on train"] = FusionParams.from_record(tuned)
    systems = {"bm25": lexical, "dense": dense,
               **{label: fuse(dense, lexical, params, DEPTH) for label, params in fusions.items()}}
    latency = latencies(searcher, texts, fusions, latency_queries)
    evaluations = {system: metrics_of(searcher, ids, ranked, qrels) for system, ranked in systems.items()}
    rows = []
    for system, evaluation in evaluations.items():
        row = {"dataset": tag, "split": split, "dense_model": variant, "system": system, "queries": len(ids),
               **{metric: round(value, 4) for metric, value in evaluation.mean.items()}, "p50_ms": latency[system]}
        if system.startswith("hybrid"):
            row["gain_ci95"] = gain_interval(evaluation, [evaluations["bm25"], evaluations["dense"]])
        if system == "hybrid tuned on train":
            row["fusion"] = {k: tuned[k] for k in ("method", "rrf_k", "alpha")}
        rows.append(row)
    return rows


def record(rows: list[dict]) -> None:
    append_records(RUNS_FILE, [{**row, "stamp": stamp()} for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", default=[], help="Collection(s) to run (repeatable).")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="Dense models: minilm (zero-shot), ft (fine-tuned) and/or hn (fine-tuned with mined "
                             "hard negatives); ft and hn only where there is a train split.")
    parser.add_argument("--dev-split", action="append", default=[],
                        help="Collection(s) whose ft and hn models to compare on a dev split held out of train.")
    parser.add_argument("--report", action="store_true", help="Write results/hybrid.md and .png from the runs.")
    parser.add_argument("--search-latency", action="append", default=[],
                        help="Collection(s) whose search-only latency per mode to measure (repeatable).")
    parser.add_argument("--latency-queries", type=int, default=LATENCY_QUERIES,
                        help="Test queries timed one at a time per system (each encodes its query).")
    args = parser.parse_args()
    for name in args.search_latency:
        row = search_latency(name)
        record([row])
        print(json.dumps(row), flush=True)
    variants = args.variants.split(",")
    runs = [(dataset_path(name), name, variant, "test") for name in args.dataset for variant in variants]
    runs += [(dev_split(name), f"{name}-dev", variant, "dev") for name in args.dev_split for variant in ("ft", "hn")]
    for data, tag, variant, split in runs:
        if variant != "minilm" and not (data / "qrels" / "train.tsv").is_file():
            continue
        rows = evaluate_variant(data, tag, variant, args.latency_queries, split)
        record(rows)
        for row in rows:
            print(json.dumps(row), flush=True)
    if args.report:
        from hybrid_report import write_report

        print(write_report(RUNS_FILE, RESULTS))


if __name__ == "__main__":
    main()
