"""Helpers shared by the benchmark scripts: where data lives and how a result is stamped."""
from __future__ import annotations

import os
import platform
import sys
import time
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
