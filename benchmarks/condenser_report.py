"""Table, seed-paired differences against plain init, reading and plot of the Condenser recipe benchmark."""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from retriever.files import atomic_write_text

SIZES = ("100", "all")


def _cells(runs: list[dict]) -> dict[tuple, dict[int, dict]]:
    """(backbone, dataset, init, pooling, size) -> seed -> run; the newest run of a seed wins."""
    cells: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for run in runs:
        cells[(run["backbone"], run["dataset"], run["init"], run["pooling"], run["size"])][run["seed"]] = run
    return cells


def _mean_std(values: list[float]) -> str:
    if not values:
        return "not filled"
    std = f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.4f}{std} ({len(values)})"


def paired_difference(cell: dict[int, dict], plain: dict[int, dict], metric: str = "ndcg@10") -> tuple | None:
    """Mean and std over seeds of (init - plain) with the same fine-tuning seed; None below 2 shared seeds."""
    diffs = [cell[seed][metric] - plain[seed][metric] for seed in sorted(set(cell) & set(plain))]
    if len(diffs) < 2:
        return None
    return statistics.fmean(diffs), statistics.stdev(diffs), len(diffs)


def verdict(difference: tuple | None) -> str:
    if difference is None:
        return "-"
    mean, std, _ = difference
    if abs(mean) > 2 * std:
        return "**better**" if mean > 0 else "**worse**"
    return "within noise"


def _difference_text(difference: tuple | None) -> str:
    if difference is None:
        return "-"
    return f"{difference[0]:+.4f} ± {difference[1]:.4f} {verdict(difference)}"


def tables(runs: list[dict], pretrainings: list[dict]) -> list[str]:
    cells = _cells(runs)
    seconds = {(p["backbone"], p["dataset"], p["init"]): p["seconds"] for p in pretrainings}
    lines: list[str] = []
    for backbone, dataset in sorted({key[:2] for key in cells}):
        lines += [f"### {backbone} on {dataset}", "", "nDCG@10 mean ± std (seeds); Δ = init − plain per seed, "
                  "mean ± std; better/worse when |Δ| > 2 std. R@100 mean.", "",
                  "| init | pooling | pre-train s | 100 q nDCG@10 | 100 q Δ | 100 q R@100 | all nDCG@10 | all Δ | "
                  "all R@100 |", "|---|---|---|---|---|---|---|---|---|"]
        keys = sorted({key[2:4] for key in cells if key[:2] == (backbone, dataset)},
                      key=lambda k: (k[1], k[0] != "plain", k[0]))
        for init, pooling in keys:
            row = [init, pooling, f"{seconds.get((backbone, dataset, init), 0):.0f}" if init != "plain" else "-"]
            for size in SIZES:
                cell = cells.get((backbone, dataset, init, pooling, size), {})
                plain = cells.get((backbone, dataset, "plain", pooling, size), {})
                row += [_mean_std([r["ndcg@10"] for r in cell.values()]),
                        _difference_text(paired_difference(cell, plain)) if init != "plain" else "-",
                        f"{statistics.fmean(r['recall@100'] for r in cell.values()):.4f}" if cell else "not filled"]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return lines


def reading(runs: list[dict]) -> list[str]:
    """Each pre-trained init against plain in the low-data cells, and whether one beats it everywhere there."""
    cells = _cells(runs)
    lines, winners = [], []
    for backbone, init, pooling in sorted({(k[0], k[2], k[3]) for k in cells if k[2] != "plain"}):
        low = {dataset: paired_difference(cells[(b, dataset, i, p, "100")], cells.get((b, dataset, "plain", p, "100"),
                                                                                       {}))
               for (b, dataset, i, p, s) in cells if (b, i, p, s) == (backbone, init, pooling, "100")}
        parts = [f"{dataset} {_difference_text(diff)}" for dataset, diff in sorted(low.items())]
        lines.append(f"- {backbone} {init} ({pooling}), 100 queries: " + "; ".join(parts))
        if len(low) == 2 and all(verdict(diff) == "**better**" for diff in low.values()):
            winners.append(f"{backbone} {init} ({pooling})")
    lines += ["", "Beats plain init by more than 2 std of the seed-paired difference in every low-data cell: "
              + (", ".join(winners) if winners else "none")]
    return lines


def plot(runs: list[dict], pretrainings: list[dict], path: Path) -> None:
    """Top: MLM loss of the backbone while pre-training; bottom: nDCG@10 Δ against plain, 100 queries and all."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(p["backbone"], p["dataset"]) for p in pretrainings} | {(r["backbone"], r["dataset"])
                                                                            for r in runs})
    if not panels:
        return
    fig, axes = plt.subplots(2, len(panels), figsize=(5 * len(panels), 8), squeeze=False)
    cells = _cells(runs)
    for column, (backbone, dataset) in enumerate(panels):
        ax = axes[0][column]
        for index, p in enumerate(q for q in pretrainings if (q["backbone"], q["dataset"]) == (backbone, dataset)):
            steps = [entry["step"] for entry in p["curve"]]
            ax.plot(steps, [entry["backbone_mlm"] for entry in p["curve"]], color=f"C{index}", label=p["init"])
            if "head_mlm" in p["curve"][0]:
                ax.plot(steps, [entry["head_mlm"] for entry in p["curve"]], color=f"C{index}", linestyle=":")
        ax.set_title(f"{backbone} / {dataset}: MLM loss (solid backbone, dotted head)", fontsize=9)
        ax.set_xlabel("pre-training step")
        ax.legend(fontsize=7)
        ax = axes[1][column]
        keys = sorted({(k[2], k[3], k[4]) for k in cells if k[:2] == (backbone, dataset) and k[2] != "plain"})
        for position, (init, pooling, size) in enumerate(keys):
            diff = paired_difference(cells[(backbone, dataset, init, pooling, size)],
                                     cells.get((backbone, dataset, "plain", pooling, size), {}))
            if diff:
                ax.bar(position, diff[0], yerr=2 * diff[1], capsize=3, color="C0" if size == "100" else "C1")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(keys)), [f"{i}\n{p} {s}" for i, p, s in keys], fontsize=6, rotation=60)
        ax.set_ylabel("nDCG@10 − plain (± 2 std of Δ)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def write_report(runs: list[dict], pretrainings: list[dict], results: Path) -> str:
    """condenser.md and condenser.png from every recorded run; returns the Markdown."""
    if not runs and not pretrainings:
        return "no recorded runs: run benchmarks/condenser.py --backbone ... --dataset ... first"
    stamps = sorted({r["stamp"] for r in runs + pretrainings})
    recipes = {r["backbone"]: r["recipe"] for r in runs}
    text = ["# Condenser pre-training recipes × backbone × training size", "",
            "Runs were made by (one line per invocation):", "", "```", *stamps, "```", "",
            *[f"Recipe for {backbone} (`Recipe` in benchmarks/condenser.py): {recipe}." for backbone, recipe
              in sorted(recipes.items())], "",
            *tables(runs, pretrainings), "## Low-data cells against plain init (computed from the table)", "",
            *reading(runs), "", "![MLM loss and nDCG@10 against plain](condenser.png)", ""]
    markdown = "\n".join(text)
    plot(runs, pretrainings, results / "condenser.png")
    atomic_write_text(results / "condenser.md", markdown)
    return markdown
