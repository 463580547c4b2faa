"""Errors a user can act on keep their message wherever they are raised."""
from __future__ import annotations

import pickle
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from retriever.errors import InputFileError, RetrieverError


def test_an_input_file_error_crosses_process_boundaries_intact():
    error = InputFileError("corpus.jsonl", 3, "missing text field 'text'", "add it")
    copy = pickle.loads(pickle.dumps(error))  # what a process pool or Ray does with a worker's error
    assert type(copy) is InputFileError and str(copy) == str(error) == "corpus.jsonl:3: missing text field 'text'; add it"
    assert (copy.path, copy.line, copy.problem) == ("corpus.jsonl", 3, "missing text field 'text'")


def _run_python_under_file_size_limit(arguments: list[str], limit: int) -> subprocess.CompletedProcess:
    """`python ARGUMENTS` in a child whose RLIMIT_FSIZE is ``limit`` bytes, as `ulimit -f` or a batch system sets
    it (in a child: pytest's own captured output is written to files the limit would count)."""
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run([sys.executable, *arguments], preexec_fn=limited, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("index_type", ["flat", "ivf-ondisk"])
def test_a_file_past_the_file_size_limit_is_one_line_naming_the_limit(tmp_path, tiny_model_dir, index_type):
    """`ulimit -f` below an index file's size: FAISS's and Arrow's write errors (EFBIG, "File too large") were
    tracebacks, and a plain write said "check the disk" of a disk with room; the old index stays, and the rerun
    without the limit builds the index."""
    import random

    from click.testing import CliRunner

    from retriever.cli import main
    from fixtures_corpora import write_jsonl
    from fixtures_models import WORDS

    rng = random.Random(0)
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": f"d{i}", "title": "", "text": " ".join(rng.choices(WORDS, k=8))}
                                                for i in range(300)])
    shards, output = tmp_path / "shards", tmp_path / "idx"
    build = ["index", str(shards), "--corpus", str(corpus), "-o", str(output), "--index-type", index_type]
    if index_type == "ivf-ondisk":
        build += ["--nlist", "4", "--ondisk-codes", "flat"]
    result = CliRunner().invoke(main, ["encode", str(corpus), "-o", str(shards), "--model", str(tiny_model_dir),
                                       "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["index", str(shards), "--corpus", str(corpus), "-o", str(output)])
    assert result.exit_code == 0, result.output
    before = (output / "manifest.json").read_bytes()
    run = _run_python_under_file_size_limit(["-m", "retriever", *build, "--overwrite"], 20_000)  # index.faiss or the lists: about 40 KB
    errors = [line for line in run.stderr.splitlines() if line.startswith("error")]
    assert run.returncode == 1 and len(errors) == 1 and "Traceback" not in run.stderr, run.stderr
    said = errors[0]
    assert said.startswith(f"error: a file grew past this process's file-size limit, 19.5 KiB (ulimit -f 19), "
                           f"writing {output}; raise it (ulimit -f unlimited)"), said
    kept = "(finished work is kept)" if index_type == "ivf-ondisk" else "(it starts over: nothing of this run is kept)"
    assert said.strip().endswith(f"and rerun the same command {kept}"), said  # only ivf-ondisk keeps its parts
    assert (output / "manifest.json").read_bytes() == before  # the old index is still the one there
    result = CliRunner().invoke(main, build + ["--overwrite"])
    assert result.exit_code == 0, result.output


def test_numpys_short_write_under_a_file_size_limit_names_the_limit_not_a_full_disk(tmp_path):
    """numpy's `np.save` (BM25's arrays) reports EFBIG as "N requested and M written", with no errno: under `ulimit -f`
    `bm25 --overwrite` said "no space left on the device" of a disk with room."""
    script = ("import numpy as np, sys\nfrom retriever.errors import full_disk\n"
              "try:\n    np.save(sys.argv[1], np.zeros(100_000))\nexcept OSError as error:\n    print(full_disk(error))\n")
    limited = _run_python_under_file_size_limit(["-c", script, str(tmp_path / "a.npy")], 20_000)
    assert limited.stdout.startswith("a file grew past this process's file-size limit, 19.5 KiB (ulimit -f 19), ("), (
        limited.stdout, limited.stderr)


@pytest.mark.parametrize("value, said", [("", "out is empty (an unset variable?): give a folder's path"),
                                         ("  ", "out is empty (an unset variable?): give a folder's path"),
                                         (5, "out must be a folder's path, not int 5")])
def test_a_path_argument_that_is_empty_or_of_another_kind_is_one_line(value, said):
    """Path("") is the working folder: library calls given an unset variable trained into it, read it or wrote over
    it; each now refuses it through one check (session 21)."""
    from retriever.errors import given_path

    with pytest.raises(RetrieverError, match=f"^{re.escape(said)}$"):
        given_path(value, "out", "a folder's path")
    assert given_path("a/b", "out", "a folder's path") == Path("a/b")


def test_a_path_under_the_home_of_no_such_user_is_one_line_naming_it(tmp_path):
    """pathlib's expanduser raised a bare RuntimeError ("Could not determine home directory.") for ``~nosuchuser/x``:
    a traceback from Searcher, encode_and_index or `--model ~nosuchuser/m`."""
    from click.testing import CliRunner

    from retriever.cli import main
    from retriever.errors import given_path

    said = "~nosuchuser/x: no home folder for ~nosuchuser; write ./~nosuchuser/x for a folder of that name"
    with pytest.raises(RetrieverError, match=f"^{re.escape(said)}$"):
        given_path("~nosuchuser/x", "out", "a folder's path")
    (tmp_path / "c.jsonl").write_text('{"_id": "a", "text": "x"}\n')
    result = CliRunner().invoke(main, ["encode", str(tmp_path / "c.jsonl"), "-o", str(tmp_path / "s"), "--model",
                                       "~nosuchuser/m"])
    assert result.exit_code == 1 and result.output.splitlines()[-1] == (
        "error: ~nosuchuser/m: no home folder for ~nosuchuser; write ./~nosuchuser/m for a folder of that name"), \
        result.output
