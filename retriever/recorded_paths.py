"""Paths recorded inside folders that get moved (index folders, shard folders), kept meaningful after the move.

A path is recorded relative to the folder that records it (a model beside its index moves with it), also when the
two share nothing below the filesystem root (``../../models/m`` from ``/data/idx``): that still finds the model on
the machine that built the index, or one with the same layout, and when it is not there the folder says where it
looked. A name alone was looked up on the hub or in the working folder: an index in ``/data`` of a model in
``/models`` could not be searched right after its build.
"""
from __future__ import annotations

import os
from pathlib import Path

from retriever.errors import RetrieverError
from retriever.model_names import MODEL_ALIASES, resolve_model_path


def relative_path(path: str | Path, folder: str | Path) -> str | None:
    """``path`` relative to ``folder`` (POSIX form), or None when no relative path leads there (another drive)."""
    try:
        return Path(os.path.relpath(Path(path).resolve(), Path(folder).resolve())).as_posix()
    except ValueError:  # Windows: another drive
        return None


def locate(recorded: str | None, folder: str | Path) -> Path | None:
    """Where a recorded path (relative to ``folder``, or absolute in older records) is now, if it exists."""
    if not recorded:
        return None
    path = Path(recorded) if Path(recorded).is_absolute() else Path(folder) / recorded
    return path if path.exists() else None


def model_record(model: str, folder: str | Path) -> dict:
    """How an artefact in ``folder`` names its model: an alias or hub id as given, a local folder by its name
    and its path relative to ``folder``."""
    resolved = resolve_model_path(model)
    if model in MODEL_ALIASES or not Path(resolved).is_dir():
        return {"model": model, "model_path": None}
    return {"model": Path(resolved).name, "model_path": relative_path(resolved, folder)}


def rebase_model_record(record: dict, old_folder: str | Path, new_folder: str | Path) -> dict:
    """A model record written in ``old_folder`` (e.g. shards) re-expressed for ``new_folder`` (their index). A model
    folder not there now (moved away while the shards were indexed, which needs no model) keeps the place it was
    recorded at: dropped, the index named it alone, which `search` looked up on the hub."""
    recorded = record.get("model_path")
    if not recorded:
        return {**record, "model_path": None}
    where = Path(recorded) if Path(recorded).is_absolute() else Path(old_folder) / recorded
    return {**record, "model_path": relative_path(where, new_folder)}


def recorded_model(record: dict, folder: str | Path, remedy: str | None = None) -> str:
    """The model to load for a record written in ``folder``: its recorded folder when that still exists, else
    the recorded name (an alias or hub id, or a folder of that name here). A local folder no longer where it was
    recorded is refused: its name alone was looked up on the hub, and the hub's error hid the move. ``remedy`` says
    what to do then, in the terms of the command that loads it."""
    found = locate(record.get("model_path"), folder)
    if found is not None:
        return str(found)
    if record.get("model_path") and not Path(record["model"]).is_dir():
        raise RetrieverError(f"{folder}: its model was recorded at {record['model_path']} (relative to it), which is "
                             f"not there now: the folder moved away from its model; "
                             + (remedy or "pass the model's folder (--model PATH) or move the model back"))
    return record["model"]
