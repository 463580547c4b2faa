"""Helpers shared by the benchmark scripts: where data lives, BEIR folders that keep part of a train split,
how a result is stamped, and the JSONL records of finished runs that let a rerun skip them."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from retriever.files import atomic_write_lines

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"


def dataset_path(name: str, root: Path = DATASETS) -> Path:
    """``root/name``, or the one-line exit a benchmark gives when its data is not there."""
    path = root / name
    if not (path / "corpus.jsonl").is_file():
        where = "../shared/datasets beside the repository" if root == DATASETS else str(root)
        sys.exit(f"{path} is missing: the benchmark data lives in {where}")
    return path


def train_qrels(dataset: Path) -> tuple[str, list[str]]:
    """The header of ``dataset``'s qrels/train.tsv and its non-blank rows."""
    header, *rows = (dataset / "qrels" / "train.tsv").read_text(encoding="utf-8").splitlines()
    return header, [row for row in rows if row.strip()]


def qrels_query(row: str) -> str:
    return row.split("\t")[0]


def linked_qrels_folder(source: Path, folder: Path, header: str, rows: list[str],
                        splits: dict[str, set[str]]) -> Path:
    """A BEIR folder whose corpus and queries link to ``source``'s (no copy) and whose qrels keep, per split
    name, the ``rows`` of that split's query ids in file order; each is written atomically in the order
    given, so the last one marks the folder complete."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).exists():
            (folder / name).symlink_to((source / name).resolve())
    for split, queries in splits.items():
        kept = [row for row in rows if qrels_query(row) in queries]
        atomic_write_lines(folder / "qrels" / f"{split}.tsv", [f"{line}\n" for line in [header, *kept]])
    return folder


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    """The CPU, its cores, SIMD level and whether it has native bf16: CPU-bound figures compare only within one."""
    import torch

    from retriever.device import cpu_has_native_bf16

    simd = torch.backends.cpu.get_cpu_capability()
    bf16 = "native bf16" if cpu_has_native_bf16() else "no native bf16"
    return f"{cpu_model()}, {os.cpu_count()} cores ({simd}, {bf16})"


def stamp() -> str:
    """Command, machine and date, printed above every result."""
    import torch

    command = " ".join([Path(sys.executable).name, *sys.argv])
    return (f"command: {command}\n"
            f"machine: {machine()}, torch threads "
            f"{torch.get_num_threads()}, python {platform.python_version()}, torch {torch.__version__}\n"
            f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def read_records(path: Path) -> list[dict]:
    """Every recorded run. A last line without its newline is a record a crash cut off mid-append: it is left
    out, so that run is done again; any other bad line stops the benchmark, naming it."""
    if not path.is_file():
        return []
    *complete, _cut_off = path.read_text(encoding="utf-8").split("\n")
    records = []
    for number, line in enumerate(complete, 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                sys.exit(f"{path}:{number}: not a JSON record ({error.msg}); fix or delete that line")
    return records


def append_records(path: Path, records: Iterable[dict]) -> None:
    """Finished runs, appended and synced, so a crash loses at most the run in flight; a record an earlier
    crash cut off is dropped first, so the new ones start on a line of their own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        handle.seek(0)
        kept = handle.read().rfind(b"\n") + 1
        handle.truncate(kept)
        handle.seek(kept)
        handle.write("".join(json.dumps(record) + "\n" for record in records).encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
