"""`retriever info`'s lines for a hand-edited or damaged manifest."""
from __future__ import annotations

import json

from click.testing import CliRunner

from retriever.cli import main


def test_a_fusion_record_missing_its_settings_shows_question_marks_not_none(tmp_path, tiny_model_dir, tiny_beir):
    """A record of only {"method": "rrf"} showed `rrf_k=?, depth None`: Python's None where the other unreadable
    numbers show '?'."""
    runner = CliRunner()
    index = tmp_path / "idx"
    result = runner.invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                  "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["fusion"] = {"method": "rrf"}
    (index / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(main, ["info", str(index)])
    assert result.exit_code == 0, result.output
    assert "fusion:   rrf rrf_k=?, depth ?\n" in result.output and "None" not in result.output
    assert "fusion:   DAMAGED (--mode hybrid cannot run): " in result.output
