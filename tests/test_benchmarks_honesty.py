"""The benchmark scripts' own promises: a one-line exit when their data is missing, the machine's SIMD level
and bf16 in every printout, and no figure printed into a results file that the run did not measure."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import load_test  # noqa: E402
import search_report  # noqa: E402
import train_stack  # noqa: E402


def exit_message(monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    monkeypatch.setattr(sys, "argv", ["train_stack.py", *argv])
    with pytest.raises(SystemExit) as stopped:
        train_stack.main()
    return str(stopped.value.code)


@pytest.mark.parametrize("what", ["quality", "speed"])
def test_train_stack_without_its_dataset_exits_with_one_line(monkeypatch, tmp_path, what):
    message = exit_message(monkeypatch, what, "--datasets", str(tmp_path / "absent"),
                           "--work-dir", str(tmp_path / "work"), "--old-checkout", str(tmp_path))
    assert message == f"{tmp_path / 'absent' / 'scifact'} is missing: the benchmark data lives in {tmp_path / 'absent'}"


def test_train_stack_speed_names_a_checkout_that_is_not_one(monkeypatch, tmp_path):
    (tmp_path / "scifact").mkdir()
    (tmp_path / "scifact" / "corpus.jsonl").write_text("", encoding="utf-8")
    message = exit_message(monkeypatch, "speed", "--datasets", str(tmp_path), "--old-checkout", str(tmp_path / "old"))
    assert message.startswith(f"{tmp_path / 'old'}: not a checkout") and "\n" not in message


def test_load_test_printout_names_the_simd_level_and_bf16():
    lines = load_test.header("http://127.0.0.1:1", {"name": "x"}, 10, 3, 0.5)
    machine = next(line for line in lines if line.startswith("machine: "))
    assert torch.backends.cpu.get_cpu_capability() in machine and "bf16" in machine


def test_search_report_notes_quote_no_figure_the_run_did_not_measure():
    quoted = re.findall(r"\d+(?:\.\d+)?\s*(?:ms|s|GB|MB)\b", search_report.NOTES)
    assert quoted == []


def test_bm25_scale_figures_are_the_results_files():
    """README.md, benchmarks/README.md and docs/scaling.md quoted a 10M BM25 build peak (1.64 GB, 1.48 GB), open
    cost and query time that no results file recorded; they now quote results/bm25_scale_10000000.md."""
    results = (BENCHMARKS / "results" / "bm25_scale_10000000.md").read_text(encoding="utf-8")
    readme = " ".join((BENCHMARKS / "README.md").read_text(encoding="utf-8").split())  # line breaks as spaces
    scaling = (BENCHMARKS.parent / "docs" / "scaling.md").read_text(encoding="utf-8")
    build = re.search(r"largest peak RssAnon: \*\*([\d.]+) GB\*\*", results).group(1)
    own = re.search(r"BM25\.index.*\n(?:.*\n)*?- peak RssAnon [^*]*\*\*([\d.]+) GB\*\*", results).group(1)
    opened = re.search(r"opened in \*\*([\d.]+) s\*\*, RssAnon \*\*\+([\d.]+) MB\*\*", results).groups()
    json_seconds, json_gb = re.search(r"into a dict, .*\): ([\d.]+) s, RssAnon \+([\d.]+) GB", results).groups()
    p50 = re.search(r"latency p50 \*\*([\d.]+) ms\*\*", results).group(1)
    assert f"peaks at **{build} GB** RssAnon" in readme and f"peaked at **{own} GB**" in readme
    assert f"opened in {opened[0]} s, +{opened[1]} MB RssAnon" in readme
    assert f"{float(json_seconds):.1f} s" in readme and f"+{json_gb} GB RssAnon" in readme
    assert f"takes {p50} ms" in readme
    assert f"**{build} GB** for 10M passages" in scaling
    main_readme = " ".join((BENCHMARKS.parent / "README.md").read_text(encoding="utf-8").split())
    assert f"peaked at {build} GB RssAnon, where bm25s's own tokenizer and `index` took {own} GB" in main_readme
    assert f"opening the 10M part takes {opened[0]} s and {opened[1]} MB" in main_readme
    assert f"{round(float(json_seconds))} s and {json_gb} GB" in main_readme
