"""Model folders are published whole: staged, then moved in with config.json last."""
from __future__ import annotations

import pytest

from retriever.folders import publish_model_folder


def _model(folder, weights: str) -> None:
    (folder / "model.safetensors").write_text(weights)
    (folder / "config.json").write_text("{}")


def test_a_model_folder_replaces_the_model_and_keeps_checkpoints(tmp_path):
    output = tmp_path / "out"
    publish_model_folder(output, lambda staging: _model(staging, "old"))
    (output / "checkpoints").mkdir()
    publish_model_folder(output, lambda staging: _model(staging, "new"))
    assert (output / "model.safetensors").read_text() == "new" and (output / "checkpoints").is_dir()
    assert sorted(p.name for p in output.iterdir()) == ["checkpoints", "config.json", "model.safetensors"]


def test_a_failed_write_leaves_the_old_model_and_no_staging(tmp_path):
    output = tmp_path / "out"
    publish_model_folder(output, lambda staging: _model(staging, "old"))

    def crash(staging):
        (staging / "model.safetensors").write_text("half")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        publish_model_folder(output, crash)
    assert (output / "model.safetensors").read_text() == "old"
    assert sorted(p.name for p in output.iterdir()) == ["config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_staging_folders_of_killed_runs_are_removed_and_live_ones_kept(tmp_path):
    import os
    import subprocess

    killed = subprocess.Popen(["true"])
    killed.wait()
    output = tmp_path / "out"
    publish_model_folder(output, lambda staging: _model(staging, "old"))
    for pid in (killed.pid, os.getppid()):
        (output / f".out.staging-{pid}").mkdir()
        _model(output / f".out.staging-{pid}", "a whole copy of the weights")
    publish_model_folder(output, lambda staging: _model(staging, "new"))
    assert sorted(p.name for p in output.iterdir()) == [f".out.staging-{os.getppid()}", "config.json",
                                                         "model.safetensors"]
