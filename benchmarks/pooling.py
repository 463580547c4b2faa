"""Pooling × init: CLS vs pooler vs mean, from plain MiniLM or a Condenser pre-trained on the target corpus.

For one dataset: Condenser pre-training of minilm on its corpus (once), zero-shot MiniLM with each
pooling, then for every init × pooling × seed the same short fine-tuning recipe on the train split,
each model evaluated on the test split with exact search over the whole corpus. Every finished run
is appended to results/pooling_runs.jsonl, so a crash or a second dataset continues where it was;
`--report` turns all recorded runs into results/pooling.md and results/pooling.png.

Run (2 CPU cores; the full grid is 36 fine-tunings plus 2 pre-trainings: with native bf16 ~35 min for
SciFact and ~20 min for SQuAD, several hours on an fp32-only CPU; --poolings/--seeds run a subset and
later calls add the rest):
    python benchmarks/pooling.py --dataset scifact
    python benchmarks/pooling.py --dataset squad
    python benchmarks/pooling.py --report
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import append_records, dataset_path, read_records, stamp  # noqa: E402
from pooling_report import write_report  # noqa: E402

from retriever.corpus import BeirDataset, read_queries  # noqa: E402
from retriever.encoder import Encoder, EncoderSettings  # noqa: E402
from retriever.files import write_json  # noqa: E402
from retriever.answer_recall import answer_recall  # noqa: E402
from retriever.metrics import evaluate_run, trec_order  # noqa: E402
from retriever.texts import passage_text  # noqa: E402
from retriever.training.dev import exact_search, load_dev_set  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
RUNS_FILE = RESULTS / "pooling_runs.jsonl"
POOLINGS = ("cls", "pooler", "mean")
INITS = ("minilm", "condenser")
METRICS = ("ndcg@10", "mrr@10", "recall@10", "recall@100")
ANSWER_KS = (20, 100)


@dataclass(frozen=True)
class Recipe:
    """One recipe for every cell, so differences come from pooling and init alone."""

    pretrain_steps: int = 100
    pretrain_batch_size: int = 32
    pretrain_max_length: int = 128
    pretrain_learning_rate: float = 1e-4
    train_steps: int = 25
    batch_size: int = 32
    learning_rate: float = 5e-5
    query_max_length: int = 64
    passage_max_length: int = 128


def log(message: str) -> None:
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"[{time.strftime('%H:%M:%S')} load {load}] {message}", file=sys.stderr, flush=True)


def run_key(run: dict) -> tuple:
    return run["dataset"], run["init"], run["pooling"], run["mode"], run["seed"]


def evaluate(model: str, pooling: str, dataset: Path, recipe: Recipe) -> dict:
    """Test-split metrics with exact search over the whole corpus (what a flat index gives)."""
    settings = EncoderSettings.for_model(model, pooling=pooling, query_max_length=recipe.query_max_length,
                                         passage_max_length=recipe.passage_max_length)
    encoder = Encoder(settings)
    test = load_dev_set(dataset, "test")
    started = time.perf_counter()
    documents = encoder.encode_passages(test.documents)
    queries = encoder.encode_queries(test.query_texts)
    doc_ids = [d.id for d in test.documents]
    run = exact_search(test.query_ids, queries, documents, doc_ids, k=max(ANSWER_KS))
    scores = dict(evaluate_run(run, test.qrels, METRICS).mean)
    answers = {q.id: list(q.answers) for q in read_queries(BeirDataset.open(dataset).queries_path)
               if q.answers and q.id in run}
    if answers:
        texts = {d.id: passage_text(d.title, d.text) for d in test.documents}
        ranked = {qid: trec_order(hits) for qid, hits in run.items() if qid in answers}
        scores.update(answer_recall(ranked, answers, texts, ks=ANSWER_KS))
    scores["eval_seconds"] = round(time.perf_counter() - started, 1)
    return scores


def condenser_model(dataset: Path, work: Path, recipe: Recipe) -> tuple[Path, dict]:
    """minilm with a Condenser head, pre-trained on this dataset's corpus; reused once made."""
    from retriever.pretraining import PretrainConfig, pretrain

    output = work / f"condenser-{dataset.name}"
    facts_file = output / "benchmark_pretrain.json"
    if facts_file.is_file():
        return output, json.loads(facts_file.read_text(encoding="utf-8"))
    log(f"Condenser pre-training minilm on {dataset.name}: {recipe.pretrain_steps} steps")
    result = pretrain(PretrainConfig(
        corpus=str(BeirDataset.open(dataset).corpus_path), output=str(output), model="minilm",
        max_length=recipe.pretrain_max_length, batch_size=recipe.pretrain_batch_size,
        max_steps=recipe.pretrain_steps, learning_rate=recipe.pretrain_learning_rate, save_steps=50, seed=0))
    losses = [step["loss"] for step in result.history]
    window = max(1, len(losses) // 10)
    facts = {"steps": result.steps, "seconds": round(result.seconds, 1),
             "tokens_per_second": round(result.tokens_per_second), "notes": result.notes,
             "loss_first": round(sum(losses[:window]) / window, 3), "loss_last": round(sum(losses[-window:]) / window, 3)}
    write_json(facts_file, facts)
    return output, facts


def fine_tune(init_model: str, pooling: str, seed: int, dataset: Path, output: Path, recipe: Recipe) -> dict:
    from retriever.training import TrainConfig, train

    result = train(TrainConfig(
        output=str(output), dataset=str(dataset), split="train", model=init_model,
        encoder={"pooling": pooling, "normalize": True, "query_max_length": recipe.query_max_length,
                 "passage_max_length": recipe.passage_max_length},
        max_steps=recipe.train_steps, batch_size=recipe.batch_size, learning_rate=recipe.learning_rate,
        seed=seed, save_steps=10))
    return {"train_seconds": round(result.seconds, 1), "steps": result.steps}


def run_dataset(name: str, seeds: tuple[int, ...], poolings: tuple[str, ...], work: Path, recipe: Recipe) -> None:
    dataset = dataset_path(name)
    done = {run_key(r) for r in read_records(RUNS_FILE)}
    base = {"dataset": name, "recipe": asdict(recipe), "stamp": stamp()}
    for pooling in poolings:
        if (name, "minilm", pooling, "zero-shot", None) not in done:
            log(f"{name}: zero-shot minilm, {pooling} pooling")
            append_records(RUNS_FILE, [{**base, "init": "minilm", "pooling": pooling, "mode": "zero-shot",
                                        "seed": None, **evaluate("minilm", pooling, dataset, recipe)}])
    condenser, pretrain_facts = condenser_model(dataset, work, recipe)
    inits = {"minilm": "minilm", "condenser": str(condenser)}
    for seed in seeds:
        for init in INITS:
            for pooling in poolings:
                if (name, init, pooling, "fine-tuned", seed) in done:
                    continue
                output = work / f"{name}-{init}-{pooling}-seed{seed}"
                log(f"{name}: fine-tuning {init} with {pooling} pooling, seed {seed}")
                training = fine_tune(inits[init], pooling, seed, dataset, output, recipe)
                scores = evaluate(str(output), pooling, dataset, recipe)
                log(f"{name} {init} {pooling} seed {seed}: nDCG@10 {scores['ndcg@10']:.4f}")
                append_records(RUNS_FILE, [{**base, "init": init, "pooling": pooling, "mode": "fine-tuned",
                                            "seed": seed, **training, **scores,
                                            **({"pretrain": pretrain_facts} if init == "condenser" else {})}])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=("scifact", "squad"), help="run every cell for this dataset")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--poolings", nargs="+", choices=POOLINGS, default=list(POOLINGS),
                        help="a subset of the cells (recorded runs are kept; later calls add the rest)")
    parser.add_argument("--work-dir", type=Path, default=Path(__file__).resolve().parent / ".work" / "pooling",
                        help="models and checkpoints (git-ignored; delete to start over)")
    parser.add_argument("--report", action="store_true", help="write pooling.md and pooling.png from recorded runs")
    args = parser.parse_args()
    if not args.dataset and not args.report:
        parser.error("give --dataset, --report or both")
    if args.dataset:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        run_dataset(args.dataset, tuple(args.seeds), tuple(args.poolings), args.work_dir, Recipe())
    if args.report:
        print(write_report(read_records(RUNS_FILE), RESULTS))


if __name__ == "__main__":
    main()
