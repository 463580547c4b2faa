"""--bm25/--no-bm25 and the --bm25-* settings, --mode and the fusion flags, and --tune-fusion-on/--split from the
command line (``retriever.cli.hybrid``); the `bm25` command itself and the tuning it runs: test_bm25_cli.py."""
from __future__ import annotations

import json

import pytest

from click.testing import CliRunner

from fixtures_corpora import split_off_train

from retriever.cli import main
from retriever.lexical import LexicalParams

COMMON = ["--device", "cpu", "--dtype", "fp32"]


def test_dense_only_index_gets_bm25_later_and_searches_in_every_mode(tmp_path, tiny_model_dir, tiny_beir):
    runner = CliRunner()
    index = tmp_path / "idx"
    result = runner.invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                  "--no-bm25", *COMMON])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["search", str(index), "lava", "--mode", "hybrid", *COMMON])
    assert result.exit_code == 1 and f"add one with `retriever bm25 {index}`" in result.output
    split_off_train(tiny_beir)
    result = runner.invoke(main, ["bm25", str(index), "--bm25-k1", "1.2", "--tune-fusion-on", str(tiny_beir)])
    assert result.exit_code == 0, result.output
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["lexical"]["k1"] == 1.2 and manifest["fusion"]["tuned"]["split"] == "train"
    result = runner.invoke(main, ["search", str(index), "hot volcanoes", "--mode", "bm25", "--json", *COMMON])
    assert result.exit_code == 0, result.output
    assert [h["id"] for h in json.loads(result.output)["hits"]] == ["d4", "d3"]
    result = runner.invoke(main, ["search", str(index), "the of and", "--mode", "bm25", *COMMON])
    assert result.exit_code == 0 and "no hits: BM25 returns only passages that share a term" in result.output
    for mode in ("dense", "bm25", "hybrid"):
        fusion = ["--fusion", "rrf"] if mode == "hybrid" else []
        result = runner.invoke(main, ["evaluate", "--index", str(index), "--dataset", str(tiny_beir), "--mode", mode,
                                      *fusion, "--metrics", "ndcg@10", *COMMON])
        assert result.exit_code == 0 and "ndcg@10" in result.output, result.output
    result = runner.invoke(main, ["evaluate", "--index", str(index), "--dataset", str(tiny_beir), "--split", "train",
                                  "--mode", "hybrid", "--metrics", "ndcg@10", *COMMON])
    assert result.exit_code == 0 and "fusion was tuned on tiny-beir split train" in result.output, result.output
    result = runner.invoke(main, ["mine", str(index), "--dataset", str(tiny_beir), "--split", "train", "--mode",
                                  "bm25", "-o", str(tmp_path / "neg.jsonl"), *COMMON])
    assert result.exit_code == 0, result.output
    assert "d4" not in json.loads((tmp_path / "neg.jsonl").read_text().splitlines()[1])["negatives"]


def test_fusion_flags_that_contradict_each_other_fail_before_the_index_is_opened(tmp_path):
    missing = tmp_path / "not-an-index"  # an empty folder, never opened: the flags are refused first
    missing.mkdir()
    for flags, message in ((["--fusion", "rrf", "--alpha", "0.3"], "--alpha does not apply to --fusion rrf"),
                           (["--fusion", "convex", "--rrf-k", "10"], "--rrf-k does not apply to --fusion convex"),
                           (["--alpha", "0.3", "--rrf-k", "10"], "give one of them")):
        result = CliRunner().invoke(main, ["search", str(missing), "q", "--mode", "hybrid", *flags, *COMMON])
        assert result.exit_code == 2 and message in result.output, result.output  # exit 1 until probe round 14
        assert "search --help`)" in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_fusion_flags_outside_hybrid_and_non_finite_numbers_fail_before_the_index_is_opened(tmp_path):
    """nan and inf were one-line errors with exit 1 where other bad flag values exit 2 (click's FloatRange lets
    nan pass every comparison)."""
    missing = tmp_path / "not-an-index"
    missing.mkdir()
    for args, message, code in (
            (["--mode", "bm25", "--alpha", "0.2"], "--alpha applies only to --mode hybrid, not --mode bm25", 2),
            (["--fusion-depth", "5"], "--fusion-depth applies only to --mode hybrid, not --mode dense", 2),
            (["--mode", "hybrid", "--rrf-k", "nan"], "Invalid value for '--rrf-k': 'nan' is not a finite number", 2),
            (["--mode", "hybrid", "--rrf-k", "inf"], "Invalid value for '--rrf-k': inf is not in the range", 2),
            (["--mode", "hybrid", "--alpha", "nan"], "Invalid value for '--alpha': 'nan' is not a finite number", 2)):
        result = CliRunner().invoke(main, ["search", str(missing), "q", *args, *COMMON])
        assert result.exit_code == code and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", [["--alpha", "0.3"], ["--rrf-k", "10"], ["--fusion", "convex"],
                                  ["--fusion-depth", "5"]])
def test_evaluate_run_with_a_fusion_flag_alone_says_it_needs_an_index_not_hybrid(tmp_path, flag):
    """It said to add --mode hybrid, and with that the run was refused for --mode: scoring a run file searches
    nothing, so the flag applies only with --index."""
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels",
                                       str(tmp_path / "qrels.txt"), *flag])
    assert result.exit_code == 2 and result.output.startswith(f"error: {flag[0]} applies only"), result.output
    assert "only with --index; --run scores the run as it is" in result.output, result.output
    assert "--mode hybrid" not in result.output, result.output


@pytest.mark.parametrize("command, flag", [(["bm25", "IDX"], "--bm25-k1"), (["bm25", "IDX"], "--bm25-b"),
                                           (["index", "SHARDS", "CORPUS", "-o", "OUT"], "--target-recall")])
def test_non_finite_build_numbers_are_usage_errors(tmp_path, command, flag):
    for name in ("IDX", "SHARDS"):
        (tmp_path / name).mkdir()
    (tmp_path / "CORPUS").write_text("")
    args = [str(tmp_path / a) if a in ("IDX", "SHARDS", "CORPUS", "OUT") else a for a in command]
    result = CliRunner().invoke(main, [*args, flag, "nan"])
    assert result.exit_code == 2 and f"Invalid value for '{flag}': 'nan' is not a finite number" in result.output, \
        result.output


def test_split_help_says_the_tuning_split_must_judge_other_queries_than_test():
    """The help read "'test', or a split judging its queries, is refused": whose queries was unclear."""
    for command in ("build", "bm25"):
        result = CliRunner().invoke(main, [command, "--help"], terminal_width=400)
        assert "It must judge other queries than test, the split you report: test itself, or a split judging any " \
               "of test's queries, is refused." in " ".join(result.output.split()), result.output


def test_build_into_the_working_folder_tunes_the_index_it_built(tmp_path, tiny_model_dir, tiny_beir, monkeypatch):
    """`build BEIR -o . --tune-fusion-on BEIR` built the index, then failed with `.: not an index folder`, exit 1:
    the build swaps a new folder in at the working folder's path, and `.` still named the old one."""
    split_off_train(tiny_beir)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    result = CliRunner().invoke(main, ["build", str(tiny_beir), "-o", ".", "--overwrite", "--model",
                                       str(tiny_model_dir), "--tune-fusion-on", str(tiny_beir), *COMMON])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "here" / "manifest.json").read_text())
    assert manifest["fusion"]["tuned"]["split"] == "train"


@pytest.mark.parametrize("command, flag, value, next_flag", [
    (["bm25", "IDX"], "--bm25-k1", "1e300", "--bm25-b"),
    (["search", "IDX", "q", "--mode", "hybrid"], "--rrf-k", "1e7", "--fusion-depth")])
def test_numbers_past_their_maximum_are_usage_errors_and_help_shows_the_range(tmp_path, command, flag, value,
                                                                              next_flag):
    """--bm25-k1 1e300 exited 1 without the --help pointer, where other bad flag values exit 2, and neither help
    said where the range ended."""
    (tmp_path / "IDX").mkdir()
    args = [str(tmp_path / a) if a == "IDX" else a for a in command]
    result = CliRunner().invoke(main, [*args, flag, value])
    assert result.exit_code == 2 and f"Invalid value for '{flag}'" in result.output, result.output
    assert "1000000.0" in result.output, result.output
    help_text = " ".join(CliRunner().invoke(main, [command[0], "--help"]).output.split())
    assert "x<=1000000.0]" in help_text.split(f"{flag} FLOAT", 1)[1].split(f"{next_flag} ", 1)[0], help_text


@pytest.mark.parametrize("flag, value", [("--bm25-stopwords", "no"), ("--bm25-stemmer", "No")])
def test_no_as_a_stemmer_or_stopword_list_is_refused_as_ambiguous(tmp_path, flag, value):
    """`no` is bm25s's and PyStemmer's short name for Norwegian: a user turning them off with it got Norwegian
    stopwords or stemming silently. The full name still works, and a part recorded with `no` still opens. A bad
    flag value, so a usage error (it exited 1)."""
    (tmp_path / "IDX").mkdir()
    result = CliRunner().invoke(main, ["bm25", str(tmp_path / "IDX"), flag, value])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert f"{value!r} is ambiguous" in result.output and "none" in result.output, result.output
    assert f"Invalid value for '{flag}'" in result.output, result.output
    assert "norwegian" in result.output and not list((tmp_path / "IDX").iterdir())
    LexicalParams(stopwords="no", stemmer="no").check()  # what an older manifest may record


@pytest.mark.parametrize("flag, value, listed", [("--bm25-stemmer", "klingon", "arabic, armenian, basque"),
                                                 ("--bm25-stemmer", "English", "dutch_porter, english, esperanto"),
                                                 ("--bm25-stopwords", "xx", "chinese, danish, dutch, en, en_plus")])
@pytest.mark.parametrize("command", ["bm25", "build"])
def test_an_unknown_stemmer_or_stopword_list_is_a_usage_error_listing_the_names(tmp_path, tiny_model_dir, tiny_beir,
                                                                                flag, value, listed, command):
    """It exited 1 (an error raised once the command ran), where every other bad flag value exits 2 as click parses
    it, with the --help pointer."""
    (tmp_path / "IDX").mkdir()
    args = (["bm25", str(tmp_path / "IDX")] if command == "bm25" else
            ["build", str(tiny_beir), "-o", str(tmp_path / "out"), "--model", str(tiny_model_dir), *COMMON])
    result = CliRunner().invoke(main, [*args, flag, value])
    assert result.exit_code == 2 and f"Invalid value for '{flag}': " in result.output, result.output
    assert f"{value!r} is not a" in result.output or f"no stemmer for {value!r}" in result.output, result.output
    assert listed in result.output and " or none (see `" in result.output, result.output
    assert f" {command} --help`)" in result.output, result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["IDX", "tiny-beir"]
    assert not list((tmp_path / "IDX").iterdir())


@pytest.mark.parametrize("command", ["bm25", "build"])
def test_split_without_tune_fusion_on_is_refused_as_unused(tmp_path, tiny_beir, tiny_model_dir, command):
    """`bm25 IDX --overwrite --split dev` (or `build … --split dev`) without --tune-fusion-on: --split names the split
    the fusion is tuned on, so it did nothing, and the run went on without a word."""
    args = ([str(tmp_path), "--overwrite"] if command == "bm25" else
            [str(tiny_beir), "-o", str(tmp_path / "idx"), "--model", str(tiny_model_dir), *COMMON])
    result = CliRunner().invoke(main, [command, *args, "--split", "dev"])
    assert result.exit_code == 2, result.output
    assert "--split names the split --tune-fusion-on tunes the fusion on" in result.output
    assert not (tmp_path / "idx").exists()


def test_bm25_settings_with_no_bm25_are_refused_as_unused(tmp_path, tiny_beir, tiny_model_dir):
    """`build … --no-bm25 --bm25-k1 2` built no BM25 part, so the setting went unused, and the build said nothing."""
    result = CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(tmp_path / "idx"), "--model",
                                       str(tiny_model_dir), "--no-bm25", "--bm25-k1", "2", *COMMON])
    assert result.exit_code == 2, result.output
    assert "--bm25-k1 sets the BM25 part, which --no-bm25 leaves out" in result.output
    assert not (tmp_path / "idx").exists()
