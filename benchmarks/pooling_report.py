"""Tables, reading and bar chart of the pooling × init benchmark, from its recorded runs."""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from retriever.files import atomic_write_text

POOLINGS = ("cls", "pooler", "mean")
COLUMNS = ("ndcg@10", "mrr@10", "recall@10", "recall@100", "answer_recall@20", "answer_recall@100")


def _cells(runs: list[dict]) -> dict[tuple, list[dict]]:
    """Runs grouped by (dataset, init, mode, pooling); the newest run of a seed wins."""
    latest: dict[tuple, dict] = {}
    for run in runs:
        latest[(run["dataset"], run["init"], run["mode"], run["pooling"], run["seed"])] = run
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for (dataset, init, mode, pooling, _), run in latest.items():
        cells[(dataset, init, mode, pooling)].append(run)
    return cells


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _format(values: list[float]) -> str:
    if not values:
        return "-"
    mean, std = mean_std(values)
    return f"{mean:.4f}" if len(values) == 1 else f"{mean:.4f} ± {std:.4f}"


def tables(runs: list[dict]) -> list[str]:
    cells = _cells(runs)
    lines: list[str] = []
    for dataset in sorted({key[0] for key in cells}):
        columns = [c for c in COLUMNS if any(c in r for key, rs in cells.items() if key[0] == dataset for r in rs)]
        lines += [f"### {dataset} (test split, exact search over the whole corpus)", "",
                  "| init | mode | pooling | seeds | " + " | ".join(columns) + " | train s | eval s |",
                  "|---|---|---|---:|" + "---:|" * (len(columns) + 2)]
        for mode in ("zero-shot", "fine-tuned"):
            for init in ("minilm", "condenser"):
                for pooling in POOLINGS:
                    group = cells.get((dataset, init, mode, pooling), [])
                    if not group:
                        continue
                    train = [r["train_seconds"] for r in group if "train_seconds" in r]
                    row = [init, mode, pooling, str(len(group))]
                    row += [_format([r[c] for r in group if c in r]) for c in columns]
                    row += [f"{statistics.fmean(train):.0f}" if train else "-",
                            f"{statistics.fmean(r['eval_seconds'] for r in group):.0f}"]
                    lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return lines


def reading(runs: list[dict], metric: str = "ndcg@10") -> list[str]:
    """Which pooling wins per dataset, init and mode, by how much, and whether that beats seed noise."""
    cells = _cells(runs)
    lines = []
    for dataset, init, mode in sorted({key[:3] for key in cells}):
        scores = {p: [r[metric] for r in cells.get((dataset, init, mode, p), [])] for p in POOLINGS}
        scores = {p: v for p, v in scores.items() if v}
        if len(scores) < 2:
            continue
        ranked = sorted(scores, key=lambda p: statistics.fmean(scores[p]), reverse=True)
        best, second = ranked[:2]
        gap = statistics.fmean(scores[best]) - statistics.fmean(scores[second])
        noise = (mean_std(scores[best])[1] ** 2 + mean_std(scores[second])[1] ** 2) ** 0.5
        if len(scores[best]) > 1:
            verdict = (f"{gap / noise:.1f}× the seed noise (√(σ₁²+σ₂²) = {noise:.4f})" if noise > 0
                       else "seed noise is zero")
            verdict = ("beyond seed noise: " if gap > 2 * noise else "within seed noise: ") + verdict
        else:
            verdict = "deterministic (no seeds)"
        order = " > ".join(f"{p} {statistics.fmean(scores[p]):.4f}" for p in ranked)
        lines.append(f"- {dataset}, {init}, {mode}: {order}; {best} leads {second} by {gap:+.4f} {metric} "
                     f"({verdict}).")
    for dataset in sorted({key[0] for key in cells}):
        for pooling in POOLINGS:
            plain = [r[metric] for r in cells.get((dataset, "minilm", "fine-tuned", pooling), [])]
            condenser = [r[metric] for r in cells.get((dataset, "condenser", "fine-tuned", pooling), [])]
            if plain and condenser:
                gap = statistics.fmean(condenser) - statistics.fmean(plain)
                lines.append(f"- {dataset}, {pooling}: Condenser init minus minilm init, fine-tuned: {gap:+.4f} {metric}")
    return lines


def plot(runs: list[dict], path: Path, metric: str = "ndcg@10") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = _cells(runs)
    datasets = sorted({key[0] for key in cells})
    groups = [("minilm", "zero-shot"), ("minilm", "fine-tuned"), ("condenser", "fine-tuned")]
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4.5), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        width = 0.26
        for offset, pooling in enumerate(POOLINGS):
            positions, means, errors = [], [], []
            for i, (init, mode) in enumerate(groups):
                values = [r[metric] for r in cells.get((dataset, init, mode, pooling), [])]
                if values:  # a cell not run yet gets no bar rather than a misleading zero
                    positions.append(i + (offset - 1) * width)
                    means.append(mean_std(values)[0])
                    errors.append(mean_std(values)[1])
            bars = ax.bar(positions, means, width, yerr=errors, capsize=4, label=pooling, color=f"C{offset}")
            ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=2)
        ax.set_xticks(range(len(groups)), [f"{init}\n{mode}" for init, mode in groups])
        ax.set_ylabel(f"{metric} (test), mean ± std over seeds")
        ax.set_title(dataset)
        ax.legend(title="pooling")
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(runs: list[dict], results: Path) -> str:
    """pooling.md and pooling.png from every recorded run; returns the Markdown."""
    if not runs:
        return "no recorded runs: run benchmarks/pooling.py --dataset scifact first"
    stamps = sorted({r["stamp"] for r in runs})
    recipe = runs[-1]["recipe"]
    text = ["# Pooling × init: CLS vs pooler vs mean", "",
            "Runs were made by (one line per invocation):", "", "```", *stamps, "```", "",
            f"Recipe (`Recipe` in benchmarks/pooling.py): {recipe}.", "",
            *tables(runs), "## Reading (computed from the table)", "", *reading(runs), "",
            "![pooling bar chart](pooling.png)", ""]
    markdown = "\n".join(text)
    plot(runs, results / "pooling.png")
    atomic_write_text(results / "pooling.md", markdown)
    return markdown
