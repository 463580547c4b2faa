"""`encode`, `index`, `build` and `bm25` print alike: a summary line on stderr, and on stdout only with --json."""
from __future__ import annotations

import json

from click.testing import CliRunner

from retriever.cli import main


def _invoke(*args: str):
    return CliRunner().invoke(main, [*args])


def test_the_four_print_nothing_on_stdout_but_with_json(tmp_path, tiny_beir, tiny_model_dir):
    """`build` printed a JSON line on stdout where `index`, `encode` and `bm25` printed nothing there."""
    model = ["--model", str(tiny_model_dir), "--device", "cpu", "--dtype", "fp32"]
    built = tmp_path / "built"
    result = _invoke("build", str(tiny_beir), "-o", str(built), "--no-bm25", *model)
    assert result.exit_code == 0 and result.stdout == "", result.output
    assert f"built {built}: 12 vectors, Flat" in result.stderr
    result = _invoke("bm25", str(built))
    assert result.exit_code == 0 and result.stdout == "" and "added BM25 to" in result.stderr, result.output
    shards = tmp_path / "shards"
    result = _invoke("encode", str(tiny_beir), "-o", str(shards), *model)
    assert result.exit_code == 0 and result.stdout == "" and "encoded 12 documents" in result.stderr, result.output
    indexed = tmp_path / "indexed"
    result = _invoke("index", str(shards), "--corpus", str(tiny_beir), "-o", str(indexed))
    assert result.exit_code == 0 and result.stdout == "" and f"built {indexed}" in result.stderr, result.output

    summaries = {}
    for name, args in (("build", ["build", str(tiny_beir), "-o", str(tmp_path / "b2"), *model]),
                       ("index", ["index", str(shards), "--corpus", str(tiny_beir), "-o", str(tmp_path / "i2")]),
                       ("bm25", ["bm25", str(built), "--overwrite"])):
        result = _invoke(*args, "--json")
        assert result.exit_code == 0, result.output
        summaries[name] = json.loads(result.stdout)
    for name, folder in (("build", tmp_path / "b2"), ("index", tmp_path / "i2"), ("bm25", built)):
        assert summaries[name] == json.loads(_invoke("info", str(folder), "--json").stdout)
    assert summaries["build"]["vectors"] == 12 and summaries["bm25"]["bm25"]["documents"] == 12
    result = _invoke("encode", str(tiny_beir), "-o", str(shards), *model, "--json")
    summary = json.loads(result.stdout)
    assert summary["output"] == str(shards) and (summary["encoded"], summary["skipped"]) == (0, 12)
    assert summary["shards"] == 1 and summary["passages_cut"] == 0


def test_counts_of_one_are_singular_in_every_summary(tmp_path, tiny_model_dir):
    """A one-passage corpus was "encoded 1 documents ... into 1 shards", its index "1 vectors", its run "1 queries"."""
    from fixtures_corpora import write_jsonl

    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "the cat sat on the mat"}])
    model = ["--model", str(tiny_model_dir), "--device", "cpu", "--dtype", "fp32"]
    result = _invoke("encode", str(corpus), "-o", str(tmp_path / "shards"), *model)
    assert "encoded 1 document (0 already done) into 1 shard in" in result.stderr, result.output
    result = _invoke("index", str(tmp_path / "shards"), "--corpus", str(corpus), "-o", str(tmp_path / "idx"))
    assert f"built {tmp_path / 'idx'}: 1 vector, Flat" in result.stderr, result.output
    result = _invoke("bm25", str(tmp_path / "idx"), "--overwrite")
    assert f"added BM25 to {tmp_path / 'idx'}: 1 passage, " in result.stderr, result.output
    result = _invoke("info", str(tmp_path / "idx"), "--verify")
    assert "counts:   1 vector, 1 passage\n" in result.stdout and ", 1 document, " in result.stdout, result.output
    queries = write_jsonl(tmp_path / "q.jsonl", [{"_id": "q1", "text": "cat"}])
    result = _invoke("search", str(tmp_path / "idx"), "--queries", str(queries), "-o", str(tmp_path / "run"),
                     "--device", "cpu", "--dtype", "fp32")
    assert f"wrote 1 query × top 1 to {tmp_path / 'run'}" in result.stderr, result.output


def test_a_ctrl_c_once_the_built_folder_is_in_place_exits_0(monkeypatch, tmp_path, tiny_beir, tiny_model_dir):
    """It exited 130 saying to rerun the command, and the rerun was refused: the folder already exists."""
    import retriever.cli.indexing as indexing

    def interrupted(*_, **__):
        raise KeyboardInterrupt
    monkeypatch.setattr(indexing, "report_truncation", interrupted)  # called once the index is in place
    built = tmp_path / "built"
    args = ["build", str(tiny_beir), "-o", str(built), "--no-bm25", "--model", str(tiny_model_dir), "--device", "cpu",
            "--dtype", "fp32"]
    result = _invoke(*args)
    assert result.exit_code == 0 and f"interrupted (Ctrl-C) after {built} was written whole" in result.stderr
    result = _invoke(*args, "--overwrite", "--json")  # its summary is not printed yet: the work is not done
    assert result.exit_code == 130 and result.stdout == "", result.output
