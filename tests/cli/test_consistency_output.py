"""What every subcommand writes where: results on standard output in UTF-8 whatever the locale."""
from __future__ import annotations

import io
import sys

import pytest
from click.testing import CliRunner

from fixtures_corpora import write_jsonl
from retriever.cli import main


@pytest.fixture()
def cjk_index(tmp_path, tiny_model_dir):
    """An index whose passages hold characters Latin-1 has no byte for."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {"_id": "東京", "title": "Café 東京", "text": "the cat sat on the mat in 東京"},
        {"_id": "d2", "title": "Dogs", "text": "a dog ran to the river " * 20},
    ])
    index = tmp_path / "idx"
    result = CliRunner().invoke(main, ["build", str(corpus), "-o", str(index), "--model", str(tiny_model_dir),
                                       "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    return index


def _run_under_latin1_locale(monkeypatch, args: list[str]) -> tuple[int, bytes]:
    """Run the command as it runs in a Latin-1 locale: standard output a strict Latin-1 text stream."""
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="latin-1", write_through=True))
    with pytest.raises(SystemExit) as exited:
        main.main(args, prog_name="retriever")
    sys.stdout.flush()
    return exited.value.code, raw.getvalue()


def test_hits_print_in_utf8_under_a_latin1_locale(monkeypatch, cjk_index, tmp_path):
    """The table's '…' and a CJK title were a UnicodeEncodeError traceback (so was `retriever demo`'s first
    snippet); a run on standard output now holds the bytes `-o` writes."""
    code, table = _run_under_latin1_locale(monkeypatch, ["search", str(cjk_index), "cat", "-k", "2"])
    assert code == 0
    assert "Café 東京" in table.decode("utf-8") and "…" in table.decode("utf-8")
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "cat"}])
    code, run = _run_under_latin1_locale(monkeypatch, ["search", str(cjk_index), "--queries", str(queries)])
    assert code == 0
    written = tmp_path / "run.trec"
    assert CliRunner().invoke(main, ["search", str(cjk_index), "--queries", str(queries), "-o",
                                     str(written)]).exit_code == 0
    assert run == written.read_bytes() and "東京".encode() in run


@pytest.mark.parametrize("args", [["evaluate", "--run", "RUN", "--qrels", "RUN", "-o", "-"],
                                  ["evaluate", "--run", "RUN", "--qrels", "RUN", "--save-run", "-"],
                                  ["mine", "HERE", "--dataset", "HERE", "-o", "-"]])
def test_dash_as_an_output_file_is_refused_not_written_as_a_file_named_dash(tmp_path, monkeypatch, args):
    """`-o -` wrote a file called '-' with exit 0 where `--queries -` reads standard input."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "RUN").write_text("q1 Q0 d1 1 1.0 x\n")
    args = [str(tmp_path) if arg == "HERE" else arg for arg in args]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and not (tmp_path / "-").exists()
    assert "'-' is not standard output for this option; give a file name (./- for a file named '-')" in result.output


def test_search_dash_o_prints_the_run_a_file_would_hold(cjk_index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "cat"}])
    printed = CliRunner().invoke(main, ["search", str(cjk_index), "--queries", str(queries), "-o", "-"])
    written = CliRunner().invoke(main, ["search", str(cjk_index), "--queries", str(queries), "-o", "run.trec"])
    assert printed.exit_code == written.exit_code == 0 and not (tmp_path / "-").exists()
    assert printed.stdout == (tmp_path / "run.trec").read_text(encoding="utf-8") != ""


def test_dash_is_standard_output_where_an_option_says_so():
    from retriever.cli.output_params import OutputFile

    assert OutputFile(dash_is_stdout=True).convert("-", None, None) is None
    assert OutputFile().convert("./-", None, None).name == "-"


def test_evaluate_reads_a_run_piped_from_search_on_standard_input(tmp_path, monkeypatch):
    """`retriever search ... | retriever evaluate --run -` said "File '-' does not exist", where `--queries -` reads
    standard input; a bad line names standard input, not the temporary file it was read through."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qrels.tsv").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    run = "q1 Q0 d1 1 2.0 t\nq1 Q0 d3 2 1.0 t\nq2 Q0 d3 1 2.0 t\nq2 Q0 d2 2 1.0 t\n"
    (tmp_path / "run.trec").write_text(run)
    common = ["evaluate", "--qrels", "qrels.tsv", "--metrics", "mrr@10"]
    piped = CliRunner().invoke(main, [*common, "--run", "-"], input=run)
    from_file = CliRunner().invoke(main, [*common, "--run", "run.trec"])
    assert piped.exit_code == from_file.exit_code == 0, piped.output
    assert piped.stdout == from_file.stdout and "0.7500" in piped.stdout
    bad = CliRunner().invoke(main, [*common, "--run", "-"], input="q1 Q0 d1 1 nan t\n")
    assert bad.exit_code == 1 and "error: standard input:1: score is NaN" in bad.output, bad.output
