"""A model folder or a BEIR collection given where an index folder belongs is named, with the command that fits."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from retriever.cli import main


def _model_folder(tmp_path, marker):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / marker).write_text("{}", encoding="utf-8")
    return folder


@pytest.mark.parametrize("marker", ["config.json", "modules.json", "retriever.json"])
@pytest.mark.parametrize("command", [["info"], ["search"], ["evaluate", "--dataset", "DATA", "--index"]])
def test_a_model_folder_given_as_an_index_says_to_build_an_index_with_it(tmp_path, tiny_beir, marker, command):
    """It said "not an index folder; build one with `retriever build`", not that the folder is the model to build
    with."""
    folder = _model_folder(tmp_path, marker)
    args = [str(tiny_beir) if arg == "DATA" else arg for arg in command] + [str(folder)]
    result = CliRunner().invoke(main, args + (["some query"] if command == ["search"] else []))
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: {folder}: a model folder, not an index folder (no manifest.json); build an index with it: "
        f"`retriever build CORPUS --model {folder} --output INDEX`")


@pytest.mark.parametrize("command", [["info"], ["search"]])
def test_a_beir_collection_given_as_an_index_says_to_build_an_index_of_its_corpus(tiny_beir, command):
    result = CliRunner().invoke(main, command + [str(tiny_beir)] + (["some query"] if command == ["search"] else []))
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: {tiny_beir}: a BEIR collection, not an index folder (no manifest.json); build an index of its "
        f"corpus: `retriever build {tiny_beir} --output INDEX`")


def test_a_folder_of_neither_kind_says_to_build_an_index(tmp_path):
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    result = CliRunner().invoke(main, ["info", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: {tmp_path}: not an index folder (no manifest.json); build one with `retriever build`")


@pytest.mark.parametrize("command", [["info"], ["search"]])
def test_the_parts_folder_of_an_unfinished_ondisk_build_says_to_rerun_that_build(tmp_path, command):
    """`OUTPUT.parts` (kept by an ivf-ondisk build that was stopped, so a rerun resumes) said only "not an index
    folder; build one with `retriever build`", which would start over elsewhere."""
    import json

    from retriever.partwork import INPUT_KEYS, INPUTS_FILE

    folder = tmp_path / "idx.parts"
    folder.mkdir()
    (folder / INPUTS_FILE).write_text(json.dumps({key: 0 for key in INPUT_KEYS}), encoding="utf-8")
    result = CliRunner().invoke(main, command + [str(folder)] + (["some query"] if command == ["search"] else []))
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: {folder}: the parts of an ivf-ondisk build of {tmp_path / 'idx'} that did not finish, not an index "
        f"folder (no manifest.json); rerun that build (the same command) to finish it, then use {tmp_path / 'idx'}")
