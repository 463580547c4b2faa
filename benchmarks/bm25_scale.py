"""BM25 part at scale: memory and time of `retriever bm25 INDEX` building it, and of opening and searching it.

The passages are the scale benchmark's short synthetic texts ("synthetic passage number N", one distinct
term per passage: N distinct terms at N passages). `retriever bm25` needs an index folder with a doc store,
and reads nothing else of it, so the folder is built by the product's own `retriever index --index-type
ivf-ondisk --no-bm25` (the scale benchmark's index type: the same mapped Arrow doc store) over shards of
8-dimensional synthetic vectors: no encoder, and a dense part too small to matter. Steps, each skipped when
its output exists (a reusable cache under benchmarks/.work/bm25_scale; delete it when done):
  1. corpus + 8-dim shards (benchmarks/scale_data.py);
  2. `retriever index ... --no-bm25` (the folder BM25 is added to);
  3. `retriever bm25 INDEX --overwrite` in a child process, its tree's RssAnon/VmHWM sampled (procmem.py);
  4. a child (bm25_scale_search.py) that opens the part as search does and times single BM25 queries, and one
     that times loading bm25s's JSON vocabulary (the open of parts built before the sorted vocabulary);
  5. with --bm25s-own, the part built again by bm25s's own Tokenizer + BM25.index (the code before
     retriever/lexical_build.py), sampled the same way, and its files compared.

Run: nice -n 10 python benchmarks/bm25_scale.py                  # 10M passages
     python benchmarks/bm25_scale.py --passages 100000          # smoke test
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling modules from any cwd

from common import REPO, stamp  # noqa: E402
from procmem import PeakSampler, Sampling  # noqa: E402
from scale_data import write_collection  # noqa: E402
from synthetic import SyntheticSpec  # noqa: E402

WORK = REPO / "benchmarks" / ".work" / "bm25_scale"
DIM = 8  # the dense part only has to exist: BM25 is built from the doc store alone
GB = 1e9


class LoadWatch(Sampling):
    """The 1-minute load average, sampled every few seconds in a thread: times mean little on a shared machine."""

    def __init__(self, interval: float = 5.0) -> None:
        super().__init__(interval)
        self.loads: list[float] = []

    def sample(self) -> None:
        self.loads.append(os.getloadavg()[0])


def run_sampled(command: list[str], interval: float, stdout=None) -> tuple[dict, str | None]:
    """Run ``command`` under the memory sampler; (wall seconds and the sampled peaks, its stdout if piped)."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=stdout, text=True)
    with PeakSampler(child.pid, interval=interval) as sampler:
        output, _ = child.communicate()
    if child.returncode:
        raise SystemExit(f"failed ({child.returncode}): {' '.join(command)}")
    return {"seconds": round(time.perf_counter() - started, 1), **sampler.summary()}, output


def shown(command: list[str]) -> str:
    return " ".join(["python", *command[1:]]).replace(f"{REPO}/", "")


def index_folder(shards: Path, corpus: Path, passages: int) -> tuple[Path, dict]:
    """The index folder without BM25, built by `retriever index` (skipped when built); its build record."""
    index = WORK / f"index-{passages}"
    record_path = index.with_name(index.name + ".build.json")
    if (index / "manifest.json").is_file() and record_path.is_file():
        return index, json.loads(record_path.read_text())
    command = [sys.executable, "-m", "retriever", "index", str(shards), "--corpus", str(corpus), "-o", str(index),
               "--index-type", "ivf-ondisk", "--nlist", "256", "--train-size", "20000", "--no-bm25", "--overwrite"]
    record, _ = run_sampled(command, 0.5)
    record["command"] = shown(command)
    record_path.write_text(json.dumps(record))
    return index, record


def build_bm25(index: Path, interval: float) -> dict:
    command = [sys.executable, "-m", "retriever", "bm25", str(index), "--overwrite"]
    record, _ = run_sampled(command, interval)
    return {**record, "command": shown(command)}


def search_part(index: Path, queries: int) -> dict:
    command = [sys.executable, str(Path(__file__).resolve().parent / "bm25_scale_search.py"), str(index),
               "--queries", str(queries)]
    record, output = run_sampled(command, 0.1, stdout=subprocess.PIPE)
    json_load = subprocess.run([*command[:3], "--json-vocabulary"], stdout=subprocess.PIPE, text=True, check=True)
    return {**json.loads(output), "sampled": record, "command": shown(command),
            "json_vocabulary": {**json.loads(json_load.stdout), "command": shown([*command[:3], "--json-vocabulary"])}}


def same_content(one: Path, other: Path) -> bool:
    """Byte for byte; JSON files as the data they hold (`retriever bm25` writes the vocabulary without spaces)."""
    if one.suffix == ".json":
        return json.loads(one.read_text(encoding="utf-8")) == json.loads(other.read_text(encoding="utf-8"))
    return filecmp.cmp(one, other, shallow=False)


def bm25s_own(index: Path, passages: int, interval: float) -> dict:
    """The part built by bm25s's own Tokenizer + BM25.index (the code before lexical_build) in a child, sampled;
    whether its files are byte-identical to the ones `retriever bm25` wrote. Its folder is deleted after."""
    target = WORK / f"bm25s-own-{passages}"
    command = [sys.executable, str(Path(__file__).resolve().parent / "bm25_scale_bm25s.py"), str(index), str(target)]
    try:
        record, _ = run_sampled(command, interval, stdout=subprocess.PIPE)
        part = index / json.loads((index / "manifest.json").read_text())["lexical"].get("directory", "bm25")
        names = sorted(path.name for path in target.iterdir())
        same = all(same_content(target / name, part / name) for name in names)
    finally:
        shutil.rmtree(target, ignore_errors=True)
    return {**record, "command": shown(command), "files": names, "identical": same}


def disk_gb(folder: Path) -> float:
    return sum(path.stat().st_blocks * 512 for path in folder.rglob("*") if path.is_file()) / GB


def own_lines(own: dict | None, bm25: dict) -> list[str]:
    """The report's section on bm25s's own build, if it ran."""
    if own is None:
        return []
    return ["## The same part built by bm25s's own Tokenizer + BM25.index (`--bm25s-own`)", "",
            f"- command: `{own['command']}` (run after the builds above, on the same doc store)",
            f"- wall time: {own['seconds']:.0f} s",
            f"- peak RssAnon of the process tree (sampled every 0.2 s, {own['samples']} samples): "
            f"**{own['peak_rss_anon'] / GB:.2f} GB**, {own['peak_rss_anon'] / bm25['peak_rss_anon']:.1f}x "
            f"the largest `retriever bm25` peak; VmHWM {own['max_vm_hwm'] / GB:.2f} GB",
            f"- its files ({', '.join(own['files'])}) the same as `retriever bm25`'s (arrays byte for byte, "
            f"JSON files as data): {own['identical']}", ""]


def build_lines(builds: list[dict], part: Path) -> list[str]:
    """The report's section on `retriever bm25` runs; the headline is the largest sampled peak."""
    bm25 = max(builds, key=lambda run: run["peak_rss_anon"])
    runs = [f"- build {number}: wall time {run['seconds']:.0f} s, peak RssAnon of the process tree "
            f"{run['peak_rss_anon'] / GB:.2f} GB (RssFile then {run['rss_file_at_peak'] / GB:.2f} GB, "
            f"{run['samples']} samples), VmHWM {run['max_vm_hwm'] / GB:.2f} GB" for number, run in enumerate(builds, 1)]
    return ["## Building: `retriever bm25 INDEX`", "",
            f"- command: `{bm25['command']}`, run {len(builds)} time(s) in a row, each sampled every 0.2 s", *runs,
            f"- largest peak RssAnon: **{bm25['peak_rss_anon'] / GB:.2f} GB** (VmHWM {bm25['max_vm_hwm'] / GB:.2f} GB)",
            f"- the part on disk: {disk_gb(part):.3f} GB", ""]


def search_lines(searched: dict) -> list[str]:
    """The report's sections on opening the part and on query latency."""
    opened, ms, old, terms = (searched[name] for name in ("open", "latency_ms", "json_vocabulary", "first_query"))
    return ["## Opening the part as search does (`open_lexical`, what `Searcher` calls for --mode bm25/hybrid)", "",
            f"- command: `{searched['command']}`",
            f"- opened in **{opened['seconds']:.3f} s**, RssAnon **{opened['added_rss_anon'] / 1e6:+.1f} MB** "
            f"(from {opened['before']['RssAnon'] / 1e6:.0f} MB after imports; "
            f"RssFile {opened['added_rss_file'] / 1e6:+.1f} MB)",
            f"- sorted vocabulary mapped: {searched['mapped_vocabulary']}",
            f"- for comparison, the path folders without `vocab.sorted.arrow` take (bm25s's JSON vocabulary "
            f"loaded into a dict, {old['terms']:,} terms; `{old['command']}`): {old['seconds']:.2f} s, RssAnon "
            f"{old['added_rss_anon'] / GB:+.2f} GB", "",
            "## BM25 queries, one at a time (`LexicalIndex.search`, top 10)", "",
            f"- {searched['queries']} queries, each the text of a random passage (the first: {terms['terms']} known "
            f"terms, {terms['in_every_passage']} of them in every passage); the queried passage ranked first in "
            f"{searched['found_first']} of {searched['queries']}",
            f"- latency p50 **{ms['p50']:.1f} ms**, p90 {ms['p90']:.1f} ms, max {ms['max']:.1f} ms "
            f"(after {searched['warmup']} warm-up queries)",
            f"- search child's peak RssAnon while answering {searched['sampled']['peak_rss_anon'] / GB:.2f} GB "
            f"(sampled every 0.1 s; peak RssFile {searched['sampled']['peak_rss_file'] / GB:.2f} GB)", ""]


def write_report(path: Path, header: str, passages: int, index: Path, runs: dict, loads: list[float]) -> None:
    built = runs["index"]
    record = json.loads((index / "manifest.json").read_text())["lexical"]
    shared = max(loads) > 1.5
    load_line = (f"1-minute load average {min(loads):.1f}-{max(loads):.1f} during the run (sampled every 5 s)"
                 + (": the 2 cores were shared with other jobs, so times are not comparable; memory is"
                    if shared else ": the machine was otherwise quiet"))
    lines = [f"# BM25 part at {passages:,} passages", "", "```", header, "```", "",
             f"Passages: `benchmarks/scale_data.py`'s texts (\"synthetic passage number N\"), {record['documents']:,} "
             f"documents, {record['vocabulary']:,} distinct terms, {record['tokens']:,} tokens. The index folder "
             f"(ivf-ondisk, {DIM}-dim synthetic vectors, no BM25) was built by `{built['command']}` "
             f"({built['seconds']:.0f} s); BM25 reads only its doc store. {load_line}.", "",
             *build_lines(runs["bm25"], index / record.get("directory", "bm25")), *search_lines(runs["search"]),
             *own_lines(runs.get("bm25s_own"), max(runs["bm25"], key=lambda run: run["peak_rss_anon"]))]
    path.write_text("\n".join(lines), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=10_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--builds", type=int, default=3,
                        help="times to run `retriever bm25` (its sampled peak varies from run to run)")
    parser.add_argument("--bm25s-own", action="store_true",
                        help="also build the part with bm25s's own Tokenizer + BM25.index, for comparison")
    parser.add_argument("--output", type=Path, default=None, help="[default: results/bm25_scale_<N>.md]")
    args = parser.parse_args()
    header = stamp()
    with LoadWatch() as watch:
        shards, corpus = write_collection(WORK, args.passages, 100_000, SyntheticSpec(dim=DIM, clusters=256))
        index, built = index_folder(shards, corpus, args.passages)
        runs = {"index": built, "bm25": [build_bm25(index, 0.2) for _ in range(args.builds)],
                "search": search_part(index, args.queries)}
        if args.bm25s_own:
            runs["bm25s_own"] = bm25s_own(index, args.passages, 0.2)
    output = args.output or REPO / "benchmarks" / "results" / f"bm25_scale_{args.passages}.md"
    write_report(output, header, args.passages, index, runs, watch.loads)
    print(output.read_text())


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(REPO))
    main()
