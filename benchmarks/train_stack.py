"""The Trainer-based training stack against the hand-written loops it replaced.

quality: pooling.py's mean-pooling cells on SciFact (minilm init, and a Condenser pre-trained here
on the new stack), 3 seeds, with pooling.py's Recipe; nDCG@10 is compared with the runs
results/pooling_runs.jsonl recorded on the old loops. Finished runs go to
results/train_stack_runs.jsonl, so a rerun continues.

speed: one-process fine-tuning examples/s of the old loops (a checkout of an older commit, given by
--old-checkout) and the new stack, back to back in one run. Each measurement trains S and S+DELTA
steps in fresh processes and divides DELTA x batch by the difference in wall time, so start-up
(imports, loading, tokenising) cancels out; old and new alternate, --repeats times.

    git worktree add --detach /tmp/old-stack 6edf8f0   # main before the stack landed
    python benchmarks/train_stack.py quality
    python benchmarks/train_stack.py speed --old-checkout /tmp/old-stack
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATASETS, append_records, dataset_path, read_records, stamp  # noqa: E402
from pooling import RESULTS, RUNS_FILE, Recipe, condenser_model, evaluate, fine_tune, log  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STACK_RUNS = RESULTS / "train_stack_runs.jsonl"
SEEDS = (1, 2, 3)
SPEED_RUN = """
import dataclasses, json, sys, time
from retriever.training import TrainConfig, train
settings = json.loads(sys.argv[1])
if "encoder" in {f.name for f in dataclasses.fields(TrainConfig)}:  # checkouts since encoder settings were nested
    names = ("pooling", "normalize", "query_max_length", "passage_max_length")
    settings["encoder"] = {name: settings.pop(name) for name in names if name in settings}
started = time.perf_counter()
train(TrainConfig(**settings))
print(json.dumps({"seconds": time.perf_counter() - started}))
"""


def quality(dataset: Path, work: Path, seeds: tuple[int, ...], inits: tuple[str, ...]) -> dict:
    recipe = Recipe()
    done = {(r["init"], r["seed"]): r for r in read_records(STACK_RUNS)}
    for init in inits:  # minilm first: the Condenser cells wait for its pre-training
        model = "minilm" if init == "minilm" else str(condenser_model(dataset, work, recipe)[0])
        for seed in seeds:
            if (init, seed) in done:
                continue
            output = work / f"{dataset.name}-{init}-mean-seed{seed}"
            log(f"new stack: fine-tuning {init}, mean pooling, seed {seed}")
            row = {"init": init, "seed": seed, **fine_tune(model, "mean", seed, dataset, output, recipe),
                   **evaluate(str(output), "mean", dataset, recipe)}
            done[(init, seed)] = row
            append_records(STACK_RUNS, [row])
    old = read_records(RUNS_FILE)
    table = {}
    for init in inits:
        before = [r["ndcg@10"] for r in old if (r["dataset"], r["init"], r["pooling"], r["mode"]) ==
                  (dataset.name, init, "mean", "fine-tuned") and r["seed"] in SEEDS]
        after = [done[(init, seed)]["ndcg@10"] for seed in SEEDS if (init, seed) in done]
        table[init] = {"old": before, "new": after, "difference": statistics.mean(after) - statistics.mean(before)}
    return table


def _timed(checkout: Path, settings: dict) -> float:
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    finished = subprocess.run([sys.executable, "-c", SPEED_RUN, json.dumps(settings)], capture_output=True,
                              text=True, env=environment, check=False)
    if finished.returncode:
        sys.exit(f"{checkout}: training failed:\n{finished.stderr[-2000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])["seconds"]


def speed(dataset: Path, old_checkout: Path, start: int, delta: int, repeats: int) -> dict:
    recipe = Recipe()
    base = {"dataset": str(dataset), "split": "train", "model": "minilm", "pooling": "mean", "normalize": True,
            "query_max_length": recipe.query_max_length, "passage_max_length": recipe.passage_max_length,
            "batch_size": recipe.batch_size, "learning_rate": recipe.learning_rate, "seed": 1, "save_steps": 10_000,
            "progress": False}
    speeds: dict[str, list[float]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(repeats):
            for name, checkout in (("old", old_checkout), ("new", REPO)):
                seconds = [_timed(checkout, {**base, "max_steps": steps,
                                             "output": f"{scratch}/{name}-{repeat}-{steps}"})
                           for steps in (start, start + delta)]
                speeds[name].append(delta * recipe.batch_size / (seconds[1] - seconds[0]))
                log(f"{name} loop, repeat {repeat + 1}: {speeds[name][-1]:.2f} examples/s")
    return {name: {"runs": [round(v, 2) for v in values], "median": round(statistics.median(values), 2)}
            for name, values in speeds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("quality", "speed"))
    parser.add_argument("--datasets", type=Path, default=DATASETS, help="folder holding scifact/")
    parser.add_argument("--work-dir", type=Path, default=REPO / "benchmarks" / ".work" / "train_stack",
                        help="models of the quality runs (git-ignored)")
    parser.add_argument("--old-checkout", type=Path, help="speed: a checkout of the code before the stack")
    parser.add_argument("--start-steps", type=int, default=4)
    parser.add_argument("--delta-steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="quality: a subset of the seeds")
    parser.add_argument("--inits", nargs="+", choices=("minilm", "condenser"), default=["minilm", "condenser"],
                        help="quality: a subset of the inits (the table covers every seed recorded)")
    args = parser.parse_args()
    dataset = dataset_path("scifact", args.datasets)
    if args.what == "speed" and args.old_checkout is None:
        parser.error("speed needs --old-checkout")
    if args.what == "speed" and not (args.old_checkout / "retriever").is_dir():
        sys.exit(f"{args.old_checkout}: not a checkout of this repository (no retriever/ in it); "
                 "make one with git worktree add --detach")
    print(stamp())
    if args.what == "quality":
        args.work_dir.mkdir(parents=True, exist_ok=True)
        result = quality(dataset, args.work_dir, tuple(args.seeds), tuple(args.inits))
    else:
        result = speed(dataset, args.old_checkout, args.start_steps, args.delta_steps, args.repeats)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
