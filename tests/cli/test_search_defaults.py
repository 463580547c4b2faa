"""Command-line defaults a Pyserini user expects: deep batch runs, stdin queries, metrics marked when deeper than
the run, commands in pipeline order with examples, max lengths from the model, and truncation reported."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from retriever.cli import PIPELINE_ORDER, main
from retriever.encoder import EncoderSettings

CPU = ["--device", "cpu", "--dtype", "fp32"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture()
def tiny_index(tiny_flat_build, tmp_path):
    return shutil.copytree(tiny_flat_build, tmp_path / "tiny")


def test_batch_search_is_1000_deep_by_default_and_reads_stdin(tiny_index, tiny_beir, tmp_path):
    queries = (tiny_beir / "queries.jsonl").read_text()
    result = CliRunner().invoke(main, ["search", str(tiny_index), "--queries", "-", *CPU], input=queries)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if " Q0 " in line]
    assert len(lines) == 4 * 12  # every document: 1000 deep, capped by the collection
    one = CliRunner().invoke(main, ["search", str(tiny_index), "honey", "--json", *CPU])
    assert len(json.loads(one.stdout)["hits"]) == 10



@pytest.mark.parametrize("run_format", ["trec", "jsonl"])
def test_run_on_stdout_is_the_run_file(tiny_index, tiny_beir, tmp_path, run_format):
    args = ["search", str(tiny_index), "--queries", str(tiny_beir), "-k", "3", "--run-format", run_format, *CPU]
    printed = CliRunner().invoke(main, args)
    written = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "run")])
    assert printed.exit_code == written.exit_code == 0, printed.output
    assert printed.stdout == (tmp_path / "run").read_text(encoding="utf-8")


def test_metrics_deeper_than_the_run_are_marked(tiny_index, tiny_beir, tmp_path):
    run = tmp_path / "run.trec"
    result = CliRunner().invoke(main, ["search", str(tiny_index), "--queries", str(tiny_beir), "-k", "3",
                                       "-o", str(run), *CPU])
    assert result.exit_code == 0, result.output
    report = tmp_path / "metrics.json"
    result = CliRunner().invoke(main, ["evaluate", "--run", str(run), "--dataset", str(tiny_beir), "-o", str(report)])
    assert "reach past the run's depth (3 hits per query)" in result.stdout
    assert "a deeper run gives exact values, unless" in result.stdout and "-k" not in result.stdout  # no -k here
    assert "recall@1000" in json.loads(report.read_text())["metrics_deeper_than_run"]
    shallow = CliRunner().invoke(main, ["evaluate", "--index", str(tiny_index), "--dataset", str(tiny_beir), "-k", "3",
                                        *CPU])
    assert "search deeper (-k) for exact values" in shallow.stdout
    full = CliRunner().invoke(main, ["evaluate", "--index", str(tiny_index), "--dataset", str(tiny_beir), *CPU])
    assert full.exit_code == 0 and "reach past" not in full.stdout  # 1000 deep covers all 12 documents


def test_commands_are_in_pipeline_order_and_each_help_has_an_example():
    listed = [line.split()[0] for line in CliRunner().invoke(main, ["--help"]).stdout.split("Commands:")[1]
              .splitlines() if line.strip()]
    assert listed == sorted(listed, key=lambda name: (PIPELINE_ORDER + (name,)).index(name))
    for name in listed:
        assert "Example" in CliRunner().invoke(main, [name, "--help"]).stdout, name


def test_max_lengths_default_to_the_model_and_queries_follow_passages(tiny_model_dir, tmp_path):
    assert EncoderSettings.for_model("minilm").passage_max_length == 256  # its sentence_bert_config.json
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 100}))
    settings = EncoderSettings.for_model(str(model))  # no sentence-transformers config: the tokenizer's limit
    assert (settings.query_max_length, settings.passage_max_length) == (100, 100)
    settings = EncoderSettings.for_model(str(model), passage_max_length=16)
    assert (settings.query_max_length, settings.passage_max_length) == (16, 16)
    assert EncoderSettings.for_model(str(model), query_max_length=8).query_max_length == 8
    (model / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40}))
    assert EncoderSettings.for_model(str(model)).passage_max_length == 40


def test_build_and_search_report_what_they_cut(tiny_model_dir, tiny_beir, tmp_path):
    index = tmp_path / "idx"
    result = CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                       "--passage-max-length", "8", *CPU])
    assert result.exit_code == 0, result.output
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["corpus"]["passages_cut"] == 12
    assert "12 of 12 passages were longer than 8 tokens" in result.stderr
    result = CliRunner().invoke(main, ["search", str(index), "where does honey come from", *CPU])
    assert "1 of 1 query was longer than 8 tokens" in result.stderr
