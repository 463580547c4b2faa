"""`retriever info`'s lines for a hand-edited or damaged manifest."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from retriever.cli import main
from test_info import sq8_index  # noqa: F401  (fixture)


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


def test_a_bm25_part_split_the_former_way_says_a_rebuild_would_split_it_now(tmp_path, tiny_model_dir, tiny_beir):
    """A folder whose BM25 words were split before combining marks stayed in words (and soft hyphens, İ were folded)
    showed nothing of it, though `bm25 --overwrite` changes its terms for such text; said without reading the corpus."""
    from retriever.lexical_terms import FORMER_PATTERN

    runner = CliRunner()
    index = tmp_path / "idx"
    result = runner.invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                  "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    said = f"`retriever bm25 {index} --overwrite` rebuilds it with the current splitting"
    assert said not in runner.invoke(main, ["info", str(index)]).output
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["lexical"]["tokenizer"] = {"pattern": FORMER_PATTERN, "unicode": "NFC", "lowercase": True}
    (index / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(main, ["info", str(index)])
    assert result.exit_code == 0 and result.output.count(said) == 1, result.output
    assert json.loads(runner.invoke(main, ["info", str(index), "--json"]).output)["bm25"]["current_splitting"] is False


@pytest.mark.parametrize("fusion, shown", [
    ({"rrf_k": 60, "depth": 1000}, "fusion:   ? rrf_k=60, depth 1000\n"),
    ({"method": ["rrf"], "rrf_k": 60, "depth": 1000}, "fusion:   ? rrf_k=60, depth 1000\n"),
    ({"method": "convex", "alpha": 0.65, "depth": 100, "tuned": {"queries": "x", "score": None}},
     "fusion:   convex alpha=0.65, depth 100, tuned on ? ? (? queries, ? ?; untuned RRF ?)\n")])
def test_a_fusion_record_with_odd_values_shows_question_marks_in_the_one_wording(sq8_index, tmp_path, fusion, shown):
    """The recorded fusion is worded by ``fusion.fusion_setting``, as `bm25 --tune-fusion-on` says it, with '?' for
    what a damaged record holds instead (the method missing showed `None rrf_k=60`, a list `['rrf'] rrf_k=60`, and a
    tuning record's missing entries `tuned on None None (x queries, None None; untuned RRF None)`)."""
    index = tmp_path / "idx"
    shutil.copytree(sq8_index, index)
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["fusion"] = fusion
    (index / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["info", str(index)])
    assert result.exit_code == 0, result.output
    assert shown in result.output and "None" not in result.output, result.output


def test_the_info_line_of_a_sound_record_is_the_setting_tuning_says():
    from retriever.cli.info import _fusion_line
    from retriever.fusion import FusionParams

    for params in (FusionParams("convex", alpha=0.65, depth=100), FusionParams("rrf", rrf_k=30.5, depth=7)):
        line = _fusion_line({**params.record(), "tuned": None})
        assert line == f"fusion:   {params.setting()}, depth {params.depth}"


def test_entries_a_manifest_lacks_show_question_marks_not_none(sq8_index, tmp_path):
    """A hand-made or trimmed manifest (search opens it: only encoder.model, encoder.dim and index.count are required)
    showed `None pooling`, `None passages`, `type: None (None)` and `created: None by retriever None`."""
    index = tmp_path / "idx"
    shutil.copytree(sq8_index, index)
    manifest = json.loads((index / "manifest.json").read_text())
    for key in ("corpus", "created", "versions"):
        manifest.pop(key)
    for key in ("pooling", "dtype"):
        manifest["encoder"].pop(key)
    for key in ("type", "factory"):
        manifest["index"].pop(key)
    manifest["index"]["tuning"] = {"parameter": "nprobe", "reached": True}
    (index / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["info", str(index)])
    assert result.exit_code == 0, result.output
    assert "None" not in result.output, result.output
    assert "(? pooling," in result.output and ", ? passages" in result.output and "type:     ? (?)" in result.output
    assert "tuned:    nprobe=?, recall@? ? on ?" in result.output
