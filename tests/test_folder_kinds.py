"""A model folder or a BEIR collection given where an index folder belongs is named, with the command that fits."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from retriever.cli import main
from retriever.errors import RetrieverError


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


@pytest.mark.parametrize("command", [["info"], ["search"]])
def test_a_shard_folder_whose_encoding_did_not_finish_says_to_finish_it_first(tmp_path, command):
    """An `encode` stopped before its done marker (or a build's NAME.shards likewise) was called a folder to index
    with `retriever index`, which then refused it as unfinished: the step missing is finishing the encoding."""
    from retriever.shards import done_marker, shard_name

    folder = tmp_path / "shards"
    folder.mkdir()
    for worker in (0, 1):
        (folder / shard_name(worker, 2, 0)).write_bytes(b"")
    done_marker(folder, 0, 2).write_text("{}", encoding="utf-8")
    result = CliRunner().invoke(main, command + [str(folder)] + (["some query"] if command == ["search"] else []))
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: {folder}: a folder of embedding shards whose encoding did not finish (worker 1 of 2 has no done "
        "marker), not an index folder (no manifest.json); finish it with `retriever encode --worker-index 1 "
        "--num-workers 2` (or rerun the build that made it), then index it with "
        f"`retriever index {folder} --corpus CORPUS --output INDEX`")


def _ended_pid() -> int:
    import subprocess
    import sys

    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(process.stdout)


def test_a_stopped_builds_hidden_folder_says_whose_build_it_was_and_what_to_do(tmp_path):
    """`info .idx.building-PID` said only "not an index folder; build one", not that it is an unfinished build."""
    import os

    dead, alive = _ended_pid(), os.getpid()
    for pid, state, remedy in (
            (dead, "is no longer running", f"rerun that build (the same command) to build {tmp_path / 'idx'}, which "
                                           "deletes this folder first, or remove it"),
            (alive, "is still running", f"wait for it to put {tmp_path / 'idx'} in place")):
        folder = tmp_path / f".idx.building-{pid}"
        (folder / "bm25").mkdir(parents=True)
        result = CliRunner().invoke(main, ["info", str(folder)])
        assert result.exit_code == 1, result.output
        assert result.output.strip().splitlines()[-1] == (
            f"error: {folder}: the unfinished build of {tmp_path / 'idx'} by process {pid}, which {state}; not an "
            f"index folder (no manifest.json); {remedy}")
    folder = tmp_path / f".idx.old-{dead}"
    folder.mkdir()
    result = CliRunner().invoke(main, ["info", str(folder)])
    assert result.output.strip().splitlines()[-1] == (
        f"error: {folder}: what an --overwrite build of {tmp_path / 'idx'} by process {dead} set aside, which is no "
        "longer running; not an index folder (no manifest.json); the next build of it deletes this folder (or puts "
        "it back if the index is missing), or remove it")


def test_another_hosts_build_folder_says_whose_host_it_is(tmp_path, monkeypatch):
    """`info .idx.building-PID@HOST` of another host (a shared file system): whether that process runs cannot be
    seen from here, so it is not said to have stopped; this host's own names are judged as before."""
    import os
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "node-a")
    dead = _ended_pid()
    for name, line in (
            (f".idx.building-{dead}@node-b", f"the unfinished build of {tmp_path / 'idx'} by process {dead} on host "
             "node-b, which cannot be seen from here; not an index folder (no manifest.json); once that "
             "build no longer runs, remove this folder (a build here keeps it)"),
            (f".idx.building-{os.getpid()}@node-a", f"the unfinished build of {tmp_path / 'idx'} by process "
             f"{os.getpid()}, which is still running; not an index folder (no manifest.json); wait for it to put "
             f"{tmp_path / 'idx'} in place")):
        (tmp_path / name).mkdir()
        result = CliRunner().invoke(main, ["info", str(tmp_path / name)])
        assert result.exit_code == 1, result.output
        assert result.output.strip().splitlines()[-1] == f"error: {tmp_path / name}: {line}"


def test_the_parts_folder_of_a_build_that_finished_says_the_index_is_in_place(tmp_path):
    """A crash after the index was moved into place, before its parts were deleted, leaves `OUTPUT.parts` marked
    finished: it was called the parts of a build "that did not finish; rerun that build", which is refused
    (`already exists`) since the index is whole."""
    import json

    from retriever.partwork import INPUT_KEYS, INPUTS_FILE, mark_finished

    index = tmp_path / "idx"
    index.mkdir()
    (index / "manifest.json").write_text("{}", encoding="utf-8")
    folder = tmp_path / "idx.parts"
    folder.mkdir()
    (folder / INPUTS_FILE).write_text(json.dumps({key: 0 for key in INPUT_KEYS}), encoding="utf-8")
    mark_finished(folder, index / "manifest.json")
    result = CliRunner().invoke(main, ["info", str(folder)])
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1] == (
        f"error: {folder}: the parts of an ivf-ondisk build of {index} that finished (its index is in place), not an "
        f"index folder (no manifest.json); the next build of {index} deletes them, or remove {folder}"), result.output


@pytest.mark.parametrize("given", ["manifest", "other file", "missing"])
def test_a_file_or_a_missing_path_given_as_an_index_folder_says_so(tiny_dense_build, tmp_path, given):
    """The library's Searcher, index_summary and verify_index (the CLI checks the folder exists) said `X: not an
    index folder (no manifest.json); build one with retriever build` of the index's own manifest.json, of any file,
    and of a path that does not exist (a typo)."""
    from retriever.info import index_summary, verify_index
    from retriever.searching import Searcher

    path = {"manifest": tiny_dense_build / "manifest.json", "other file": tiny_dense_build / "index.faiss",
            "missing": tmp_path / "indexes" / "scifcat"}[given]
    said = {"manifest": rf"^{path}: a file, not an index folder; give the folder holding it, {tiny_dense_build}$",
            "other file": rf"^{path}: a file, not an index folder; give the index folder \(it holds manifest.json\)$",
            "missing": rf"^{path}: no such folder; give the path of an index folder$"}[given]
    for open_it in (Searcher, index_summary, verify_index):
        with pytest.raises(RetrieverError, match=said):
            open_it(path)
