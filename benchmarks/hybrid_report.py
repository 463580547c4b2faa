"""Turn results/hybrid_runs.jsonl into the Markdown table, the acceptance checks and the plot."""
from __future__ import annotations

from pathlib import Path

from common import read_records

from retriever.files import atomic_write_text

PYSERINI_BM25_SCIFACT = 0.679
SYSTEM_ORDER = ("bm25", "dense", "hybrid rrf (untuned)", "hybrid tuned on train")
MODEL_NAMES = {"minilm": "minilm zero-shot", "ft": "minilm fine-tuned", "hn": "minilm fine-tuned, hard negatives"}


def latest(runs_file: Path) -> dict[tuple[str, str, str], dict]:
    """The last recorded row of each (dataset, dense model, system)."""
    return {(row["dataset"], row.get("dense_model", "minilm"), row["system"]): row
            for row in read_records(runs_file)}


def latency_lines(rows: dict) -> list[str]:
    found = [row for (_, _, system), row in sorted(rows.items()) if system == "search only (no encoding)"]
    if not found:
        return []
    lines = ["| collection | queries | dense p50 ms | bm25 p50 ms | hybrid p50 ms | hybrid - dense p50 ms |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in found:
        lines.append(f"| {row['dataset']} | {row['queries']} | {row['dense_p50_ms']:.2f} | {row['bm25_p50_ms']:.2f} "
                     f"| {row['hybrid_p50_ms']:.2f} | {row['hybrid_p50_ms'] - row['dense_p50_ms']:+.2f} |")
    return ["", "Search alone (query vectors encoded beforehand), one query at a time, modes interleaved:", "",
            *lines]


def label(model: str, system: str) -> str:
    return "BM25" if system == "bm25" else f"{system} ({MODEL_NAMES.get(model, model)})"


def table(rows: dict) -> list[str]:
    lines = ["| collection | system | nDCG@10 | Recall@100 | p50 ms/query |", "|---|---|---:|---:|---:|"]
    for dataset in sorted({key[0] for key in rows}):
        shown_bm25 = False
        for model in MODEL_NAMES:
            for system in SYSTEM_ORDER:
                row = rows.get((dataset, model, system))
                if row is None or "ndcg@10" not in row or (system == "bm25" and shown_bm25):
                    continue
                shown_bm25 |= system == "bm25"
                extra = ""
                if "fusion" in row:
                    fusion = row["fusion"]
                    extra = (f" [rrf k={fusion['rrf_k']:g}]" if fusion["method"] == "rrf"
                             else f" [convex alpha={fusion['alpha']:g}]")
                lines.append(f"| {dataset} | {label(model, system)}{extra} | {row['ndcg@10']:.4f} | "
                             f"{row['recall@100']:.4f} | {row['p50_ms']:.1f} |")
    return lines


def rrf_gain(rows: dict, dataset: str, model: str, lines: list[str]) -> float | None:
    """Untuned RRF minus the better of BM25 and ``model``'s dense run (None when not measured), as a line."""
    parts = [rows.get((dataset, model, s)) for s in ("bm25", "dense", "hybrid rrf (untuned)")]
    if None in parts:
        return None
    best = max(parts[0]["ndcg@10"], parts[1]["ndcg@10"])
    gain = parts[2]["ndcg@10"] - best
    interval = parts[2].get("gain_ci95")
    spread = f" (95% CI over its {parts[2]['queries']} queries {interval[0]:+.4f}..{interval[1]:+.4f})" if interval else ""
    lines.append(f"- {dataset}: untuned RRF {parts[2]['ndcg@10']:.4f} vs max(BM25, {MODEL_NAMES[model]} dense) "
                 f"{best:.4f}: {gain:+.4f}{spread}" + (" (below max - 0.005)" if gain < -0.005 else ""))
    return gain


def checks(rows: dict, dev_rows: dict) -> list[str]:
    lines = []
    bm25 = rows.get(("scifact", "minilm", "bm25"))
    if bm25:
        gap = bm25["ndcg@10"] - PYSERINI_BM25_SCIFACT
        lines.append(f"- BM25 on SciFact test: {bm25['ndcg@10']:.4f} vs Pyserini {PYSERINI_BM25_SCIFACT} "
                     f"({gap:+.4f}; bound 0.01: {'holds' if abs(gap) <= 0.01 else 'FAILS'}).")
    datasets = sorted({key[0] for key, row in rows.items() if "ndcg@10" in row})
    gains = {dataset: rrf_gain(rows, dataset, "minilm", lines) for dataset in datasets}
    lines.append(win_count(gains, "zero-shot dense everywhere"))
    recipe = recipe_model(dev_rows)
    for dataset in datasets:  # the same check with the fine-tuned dense models, where there are some
        for model in ("ft", "hn"):
            gain = rrf_gain(rows, dataset, model, lines)
            if model == recipe and gain is not None:
                gains[dataset] = gain
    lines.append(win_count(gains, f"each collection's recipe dense ({MODEL_NAMES[recipe]} where there is a train "
                                  "split, as the issue's table reads SciFact; zero-shot elsewhere)"))
    return lines


def win_count(gains: dict[str, float | None], reading: str) -> str:
    measured = [gain for gain in gains.values() if gain is not None]
    wins, below = sum(gain >= 0.01 for gain in measured), sum(gain < -0.005 for gain in measured)
    return (f"- {reading}: untuned hybrid >= max + 0.01 on {wins} of {len(gains)} collections (bound: 3); "
            f"below max - 0.005 on {below} (bound: none).")


def recipe_model(dev_rows: dict) -> str:
    """The fine-tuned model of the recipe: hard negatives only if they won on SciFact's dev split (never test)."""
    dev = {model: dev_rows.get(("scifact-dev", model, "hybrid tuned on train")) for model in ("ft", "hn")}
    return "hn" if dev["ft"] and dev["hn"] and dev["hn"]["ndcg@10"] > dev["ft"]["ndcg@10"] else "ft"


def recipe_lines(rows: dict, dev_rows: dict) -> list[str]:
    """SciFact's best recipe: hard negatives are in it only if they won on the dev split held out of train."""
    tuned = "hybrid tuned on train"
    dev = {model: dev_rows.get(("scifact-dev", model, tuned)) for model in ("ft", "hn")}
    lines = []
    model = recipe_model(dev_rows)
    if dev["ft"] and dev["hn"]:
        lines.append(f"- Hard negatives on SciFact's dev split (tuned hybrid): {dev['hn']['ndcg@10']:.4f} vs "
                     f"{dev['ft']['ndcg@10']:.4f} without: {'in' if model == 'hn' else 'not in'} the recipe.")
    best = rows.get(("scifact", model, tuned))
    if best:
        verdict = "reached" if best["ndcg@10"] >= 0.73 else "NOT reached"
        lines.append(f"- SciFact best recipe ({MODEL_NAMES[model]} dense + BM25, fusion tuned on train): "
                     f"{best['ndcg@10']:.4f} nDCG@10 (target 0.73: {verdict}).")
    return lines


def plot(rows: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({key[0] for key in rows})
    systems = [(m, s) for m in MODEL_NAMES for s in SYSTEM_ORDER if not (m != "minilm" and s == "bm25")]
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(max(8, 2.6 * len(datasets)), 6.0))
    for offset, (model, system) in enumerate(systems):
        positions, values = [], []
        for i, dataset in enumerate(datasets):
            row = rows.get((dataset, model, system))
            if row is not None:
                positions.append(i + (offset - (len(systems) - 1) / 2) * width)
                values.append(row["ndcg@10"])
        if values:
            bars = ax.bar(positions, values, width, label=label(model, system), color=f"C{offset}")
            ax.bar_label(bars, fmt="%.3f", fontsize=6, padding=1, rotation=90)
    ax.set_xticks(range(len(datasets)), datasets)
    ax.set_ylabel("nDCG@10 (test)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(runs_file: Path, results: Path) -> str:
    rows = latest(runs_file)
    stamps = sorted({row["stamp"] for row in rows.values()})
    quality = {key: row for key, row in rows.items() if "ndcg@10" in row and row.get("split", "test") == "test"}
    dev = {key: row for key, row in rows.items() if "ndcg@10" in row and row.get("split") == "dev"}
    dev_table = ["", "Dev splits held out of train (`--dev-split`; the fusion tuned on the rest of train):", "",
                 *table(dev)] if dev else []
    text = "\n".join(["# Hybrid retrieval (test splits)", "", *table(quality), *latency_lines(rows), *dev_table, "",
                      "Acceptance checks:", *checks(quality, dev), *recipe_lines(quality, dev),
                      "", "Runs:", *[f"```\n{s}\n```" for s in stamps], ""])
    atomic_write_text(results / "hybrid.md", text)
    plot(quality, results / "hybrid.png")
    return text
