"""Helpers shared by the benchmark scripts: where data lives, how a result is stamped, and the JSONL records
of finished runs that let a rerun skip them."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"


def dataset_path(name: str) -> Path:
    path = DATASETS / name
    if not (path / "corpus.jsonl").is_file():
        sys.exit(f"{path} is missing: the benchmark data lives in ../shared/datasets beside the repository")
    return path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def stamp() -> str:
    """Command, machine and date, printed above every result."""
    import torch

    from retriever.device import cpu_has_native_bf16

    command = " ".join([Path(sys.executable).name, *sys.argv])
    simd = torch.backends.cpu.get_cpu_capability()
    bf16 = "native bf16" if cpu_has_native_bf16() else "no native bf16"
    return (f"command: {command}\n"
            f"machine: {cpu_model()}, {os.cpu_count()} cores ({simd}, {bf16}), torch threads "
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
