"""Resumable training state under ``<output>/checkpoints/``.

A checkpoint is a folder ``step-NNNNNNN/`` holding the tower weights, optimizer, scheduler,
grad scaler, every RNG state and the loop counters.  It is written under a temporary name and
renamed, so a folder with a final name is always complete and a run killed at any moment resumes
from the last one.  The best dev weights live in ``best-step-NNNNNNN/`` (weights only) and are
written before the checkpoint that points to them.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from retriever.randomness import rng_states

CHECKPOINTS = "checkpoints"
STATE_FILE = "state.pt"
WEIGHTS_FILE = "weights.pt"
FINISHED_FILE = "finished.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")
_BEST_DIR = re.compile(r"^best-step-(\d+)$")


@dataclass
class LoopState:
    """Where the loop is: enough to skip the batches already trained on after a restart."""

    epoch: int = 0
    batches_done: int = 0
    global_step: int = 0
    best_score: float | None = None
    best_step: int | None = None
    history: list[dict] = field(default_factory=list)


def _save_torch(value: object, path: Path) -> None:
    with open(path, "wb") as handle:
        torch.save(value, handle)
        handle.flush()
        os.fsync(handle.fileno())


def write_folder_atomically(target: Path, write: Callable[[Path], None]) -> Path:
    """Fill a temporary sibling folder, then rename it to ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    try:
        write(temporary)
        if target.exists():
            shutil.rmtree(target)
        os.rename(temporary, target)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return target


def tower_weights(model) -> dict:
    towers = model.towers()
    return {"query": towers[0].state_dict(), "passage": towers[1].state_dict() if len(towers) > 1 else None}


def load_tower_weights(model, weights: dict) -> None:
    model.query_model.load_state_dict(weights["query"])
    if weights.get("passage") is not None:
        model.passage_model.load_state_dict(weights["passage"])


def save_checkpoint(folder: Path, model, optimizer, scheduler, scaler, loop: LoopState, config: dict) -> Path:
    state = {"weights": tower_weights(model), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() if scaler is not None else None,
             "rng": rng_states(), "loop": asdict(loop), "config": config}

    def write(temporary: Path) -> None:
        _save_torch(state, temporary / STATE_FILE)
        (temporary / "loop.json").write_text(json.dumps(asdict(loop), indent=2) + "\n", encoding="utf-8")

    path = write_folder_atomically(folder / f"step-{loop.global_step:07d}", write)
    prune(folder, keep_step=loop.global_step, keep_best=loop.best_step)
    return path


def latest_checkpoint(folder: Path) -> Path | None:
    if not folder.is_dir():
        return None
    steps = [(int(match.group(1)), path) for path in folder.iterdir() if (match := _STEP_DIR.match(path.name))
             and (path / STATE_FILE).is_file()]
    return max(steps)[1] if steps else None


def load_checkpoint(path: Path) -> dict:
    """Our own file (optimizer and RNG states are not plain tensors), hence weights_only=False."""
    return torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)


def save_best_weights(folder: Path, model, step: int) -> Path:
    weights = tower_weights(model)
    return write_folder_atomically(folder / f"best-step-{step:07d}",
                                   lambda temporary: _save_torch(weights, temporary / WEIGHTS_FILE))


def load_best_weights(folder: Path, step: int) -> dict:
    return torch.load(folder / f"best-step-{step:07d}" / WEIGHTS_FILE, map_location="cpu", weights_only=True)


def prune(folder: Path, keep_step: int | None, keep_best: int | None) -> None:
    """Drop superseded checkpoints, best weights and temporaries of killed writers."""
    for path in folder.iterdir():
        step_match, best_match = _STEP_DIR.match(path.name), _BEST_DIR.match(path.name)
        stale = (step_match and int(step_match.group(1)) != keep_step) or \
            (best_match and int(best_match.group(1)) != keep_best) or \
            (path.name.startswith(".") and ".tmp-" in path.name)
        if stale:
            shutil.rmtree(path, ignore_errors=True)
