"""Paths recorded inside folders that get moved (index folders, shard folders), kept meaningful after the move.

A path is recorded relative to the folder that records it when both sit under one directory below
the filesystem root (a model beside its index moves with it); otherwise only a name is kept, since
an absolute path of the build machine means nothing elsewhere.
"""
from __future__ import annotations

import os
from pathlib import Path

from retriever.errors import RetrieverError
from retriever.model_names import MODEL_ALIASES, resolve_model_path


def relative_path(path: str | Path, folder: str | Path) -> str | None:
    """``path`` relative to ``folder`` (POSIX form), or None when they share nothing below the root."""
    path, folder = Path(path).resolve(), Path(folder).resolve()
    common = Path(os.path.commonpath([path, folder]))
    if common == Path(common.anchor):
        return None
    return Path(os.path.relpath(path, folder)).as_posix()


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
