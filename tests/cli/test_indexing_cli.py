"""`encode`, `index` and `build` refuse bad outputs and settings in one line, before any encoding."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import write_jsonl


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retriever", *args], capture_output=True, text=True, cwd=cwd)


def _one_line_error(result: subprocess.CompletedProcess, expected: str) -> None:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], result.stderr


@pytest.mark.parametrize("case", ["victim-folder", "victim-file", "shards-file", "dot-not-an-index", "bad-stemmer",
                                  "bad-stopwords", "idmap"])
def test_build_refuses_before_encoding(tmp_path, tiny_model_dir, case):
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}, {"_id": "b", "text": "bye"}])
    output, extra, cwd = "out", [], tmp_path
    if case == "victim-folder":
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "notes.txt").write_text("mine")
        extra, expected = ["--overwrite"], "out: exists and is not an index folder"
    elif case == "victim-file":
        (tmp_path / "out").write_text("mine")
        extra, expected = ["--overwrite"], "out: exists and is not an index folder"
    elif case == "shards-file":
        (tmp_path / "out.shards").write_text("mine")
        expected = "out.shards: is a file where the build keeps its shards folder"
    elif case == "dot-not-an-index":
        output, extra, expected = ".", ["--overwrite"], f"{tmp_path}: exists and is not an index folder"
    elif case == "idmap":
        extra, expected = ["--index-type", "IDMap,Flat"], "IDMap indexes are not supported"
    else:
        option = "--bm25-stemmer" if case == "bad-stemmer" else "--bm25-stopwords"
        extra, expected = [option, "xx"], "'xx'"
    before = sorted(p.name for p in tmp_path.iterdir())
    result = _run("build", str(corpus), "-o", output, "--model", str(tiny_model_dir), "--device", "cpu", *extra,
                  cwd=cwd)
    _one_line_error(result, expected)
    assert "encode w0/1" not in result.stderr, "refused only after encoding"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if case.startswith("victim"):
        assert (tmp_path / "out" / "notes.txt" if case == "victim-folder" else tmp_path / "out").read_text() == "mine"


def test_bm25_on_a_folder_without_its_doc_store_is_one_line(tmp_path, tiny_model_dir):
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}, {"_id": "b", "text": "bye"}])
    built = _run("build", str(corpus), "-o", str(tmp_path / "idx"), "--model", str(tiny_model_dir), "--device", "cpu",
                 "--no-bm25")
    assert built.returncode == 0, built.stderr
    (tmp_path / "idx" / "docstore.parquet").unlink()
    _one_line_error(_run("bm25", str(tmp_path / "idx")), "docstore.parquet: missing; the index folder is damaged")


def test_encode_into_a_file_is_one_line(tmp_path, tiny_model_dir):
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}])
    (tmp_path / "afile").write_text("mine")
    _one_line_error(_run("encode", str(corpus), "-o", str(tmp_path / "afile"), "--model", str(tiny_model_dir)),
                    "afile: is a file, not a folder")
    assert (tmp_path / "afile").read_text() == "mine"
