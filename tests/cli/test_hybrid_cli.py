"""`retriever bm25`, --bm25/--no-bm25, --mode and --tune-fusion-on from the command line."""
from __future__ import annotations

import json

import pytest

from click.testing import CliRunner

from conftest import nothing_created_in

from retriever.cli import main
from retriever.fusion import FusionParams
from retriever.lexical import LexicalParams

COMMON = ["--device", "cpu", "--dtype", "fp32"]
HEADER = "query-id\tcorpus-id\tscore\n"


def split_off_train(beir) -> None:
    """Judge q1 and q2 in train and only q3 and q4 in test: a tuning split must not share test queries."""
    (beir / "qrels" / "train.tsv").write_text(HEADER + "q1\td6\t1\nq2\td4\t1\n", encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text(HEADER + "q3\td10\t1\nq4\td5\t1\n", encoding="utf-8")


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


def test_tuning_on_test_is_refused_before_any_work(tmp_path, tiny_model_dir, tiny_beir):
    """--split test is a bad flag: a usage error with the --help pointer, as the README says (exit 1 until
    session 19's follow-up), and still before any encoding or BM25 build."""
    index = tmp_path / "idx"
    result = CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                       "--tune-fusion-on", str(tiny_beir), "--split", "test", *COMMON])
    assert result.exit_code == 2 and "never" not in result.output, result.output
    assert result.output.startswith("error: --split test: tuning the fusion on the split you report")
    assert result.output.rstrip().endswith("build --help`)")
    assert not index.exists() and not (tmp_path / "idx.shards").exists()
    empty = tmp_path / "empty"  # never opened: refused before the index is read or BM25 built
    empty.mkdir()
    result = CliRunner().invoke(main, ["bm25", str(empty), "--tune-fusion-on", str(tiny_beir), "--split", "test"])
    assert result.exit_code == 2 and result.output.rstrip().endswith("bm25 --help`)"), result.output
    assert not list(empty.iterdir())
    result = CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                       "--tune-fusion-on", str(tiny_beir), "--no-bm25", *COMMON])
    assert result.exit_code == 2 and "drop --no-bm25" in result.output  # a flag conflict: a usage error (round 14)


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


def test_a_missing_unjudged_or_path_split_is_refused_before_encoding_or_bm25(tmp_path, tiny_model_dir, tiny_beir):
    index = tmp_path / "idx"
    result = CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                       "--tune-fusion-on", str(tiny_beir), "--split", "dev", *COMMON])
    assert result.exit_code == 1 and "no qrels for split 'dev' (available: test)" in result.output, result.output
    assert not index.exists() and not (tmp_path / "idx.shards").exists()
    (tiny_beir / "qrels" / "dev.tsv").write_text(HEADER + "q1\td6\t0\n", encoding="utf-8")
    empty = tmp_path / "empty"  # never opened: the split is refused before the index is read or BM25 built
    empty.mkdir()
    for split, message in (("dev", "no query of split 'dev' has a relevant judgment"),
                           ("./test", "a split is the name of a file in qrels/"),
                           ("train", "no qrels for split 'train'")):
        result = CliRunner().invoke(main, ["bm25", str(empty), "--tune-fusion-on", str(tiny_beir), "--split", split])
        assert result.exit_code == 1 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and not list(empty.iterdir())


def test_a_build_stopped_while_tuning_is_rerun_into_the_command_that_finishes_it(tmp_path, tiny_model_dir, tiny_beir):
    """Killed while tuning, the index stood without its fusion record, and the rerun said only that it existed."""
    index = tmp_path / "idx"
    split_off_train(tiny_beir)
    build = ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir), *COMMON]
    assert CliRunner().invoke(main, build).exit_code == 0  # as a run killed after the build, before the tuning
    result = CliRunner().invoke(main, [*build, "--tune-fusion-on", str(tiny_beir), "--split", "train"])
    assert result.exit_code == 1 and result.stderr.strip().splitlines() == [_rerun_refusal(index, tiny_beir)]
    result = CliRunner().invoke(main, ["bm25", str(index), "--tune-fusion-on", str(tiny_beir), "--split", "train"])
    assert result.exit_code == 0 and json.loads((index / "manifest.json").read_text())["fusion"] is not None


def _rerun_refusal(index, dataset) -> str:
    return (f"error: {index}: already built, and no tuned fusion is recorded in it; tune it alone with `retriever bm25 "
            f"{index} --tune-fusion-on {dataset} --split train`, or pass --overwrite to rebuild it")


@pytest.mark.parametrize("judged", ["none in the corpus", "none in any top 10"])
def test_a_build_whose_tuning_records_nothing_says_so_and_its_rerun_blames_no_stop(tmp_path, tiny_model_dir,
                                                                                    tiny_beir, judged):
    """A tuning refused after the build (no judged document in the index) ended on the refusal alone, not saying the
    index was built; one that measured nothing warned and exited 0, as the README says. The rerun of either asked
    whether a run had stopped while tuning, which none had."""
    from conftest import write_jsonl

    index = tmp_path / "idx"
    split_off_train(tiny_beir)
    if judged == "none in the corpus":
        (tiny_beir / "qrels" / "train.tsv").write_text(HEADER + "q1\tx1\t1\nq2\tx2\t1\n", encoding="utf-8")
    else:  # eleven passages tie in every list, the judged one ordered after ten of them (as in test_fusion_tuning)
        write_jsonl(tiny_beir / "corpus.jsonl", [{"_id": f"d{i:02d}", "title": "", "text": "hot lava rock"}
                                                 for i in range(11)] + [{"_id": "d99", "title": "", "text": "snow"}])
        (tiny_beir / "qrels" / "train.tsv").write_text(HEADER + "q2\td00\t1\n", encoding="utf-8")
    build = ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir), "--tune-fusion-on",
             str(tiny_beir), "--split", "train", *COMMON]
    result = CliRunner().invoke(main, build)
    lines = [line for line in result.stderr.splitlines() if line.startswith(("warning:", "error:"))]
    if judged == "none in the corpus":
        assert result.exit_code == 1 and lines == [
            f"error: {index} is built, without a tuned fusion: none of the 2 documents tiny-beir split train judges "
            "relevant is in the index, so every setting scores 0: is this the index's collection? (`retriever bm25 "
            f"{index} --tune-fusion-on DATASET --split SPLIT` tunes it alone)"], result.output
    else:
        assert result.exit_code == 0 and lines == [
            "warning: fusion tuning measured nothing: every setting scored ndcg@10 0.0 on the 1 train query (no "
            "judged document reached a top 10), so no tuned fusion is recorded and hybrid keeps RRF k=60, "
            "untuned"], result.output
    assert "fusion" not in json.loads((index / "manifest.json").read_text())
    result = CliRunner().invoke(main, build)
    assert result.exit_code == 1 and result.stderr.strip().splitlines() == [_rerun_refusal(index, tiny_beir)]


def test_bm25_settings_given_to_tune_an_index_that_keeps_its_bm25_are_refused(tmp_path, tiny_model_dir, tiny_beir):
    """`bm25 IDX --tune-fusion-on D --bm25-k1 1.5` kept the BM25 index built with k1 0.9 and tuned the fusion on it,
    exit 0: the settings were never used."""
    index = tmp_path / "idx"
    split_off_train(tiny_beir)
    build = ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir), *COMMON]
    assert CliRunner().invoke(main, build).exit_code == 0
    tune = ["bm25", str(index), "--tune-fusion-on", str(tiny_beir), "--split", "train", "--bm25-k1", "1.5",
            "--bm25-stemmer", "none"]
    result = CliRunner().invoke(main, tune)
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [  # a usage error, as --nprobe on flat
        f"error: --bm25-k1, --bm25-stemmer: {index} keeps the BM25 index it has, so these settings would not be "
        "used; pass --overwrite to rebuild it with them, or drop them to only tune the fusion (see `main bm25 --help`)"]
    assert "fusion" not in json.loads((index / "manifest.json").read_text())
    result = CliRunner().invoke(main, [*tune, "--overwrite"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["lexical"]["k1"] == 1.5 and manifest["fusion"]["tuned"]["split"] == "train"


@pytest.mark.parametrize("old", [{"method": "convex", "rrf_k": 60.0, "alpha": 0.3, "depth": 1000,
                                  "tuned": {"dataset": "tiny-beir", "split": "old"}}, {"method": "rrf"}])
def test_bm25_overwrite_that_drops_a_fusion_and_tunes_again_does_not_say_to_tune_it(tmp_path, tiny_model_dir,
                                                                                    tiny_beir, old):
    """`bm25 IDX --overwrite --bm25-k1 1.5 --tune-fusion-on D` said the dropped fusion left hybrid on RRF k=60 and to
    tune it again with `bm25 IDX --tune-fusion-on D --split old` (or DATASET, for a damaged record), while the same
    run went on to tune it on the split given."""
    index = tmp_path / "idx"
    split_off_train(tiny_beir)
    assert CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                     *COMMON]).exit_code == 0
    manifest = json.loads((index / "manifest.json").read_text())
    (index / "manifest.json").write_text(json.dumps({**manifest, "fusion": old}))
    result = CliRunner().invoke(main, ["bm25", str(index), "--overwrite", "--bm25-k1", "1.5", "--tune-fusion-on",
                                       str(tiny_beir), "--split", "train"])
    assert result.exit_code == 0, result.output
    note = next((line for line in result.stderr.splitlines() if line.startswith("note: ")), "")
    assert note.startswith(f"note: {index}: ") and note.endswith(f"--tune-fusion-on tunes it anew on {tiny_beir.name} "
                                                                 "split train"), note
    assert "RRF k=60" not in note and "tune it" not in note, note
    assert json.loads((index / "manifest.json").read_text())["fusion"]["tuned"]["split"] == "train"


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


@pytest.mark.parametrize("texts, terms", [(["the", "a and of", ""], 0), (["cats and cats", "a dog", ""], 2)])
def test_bm25_counts_the_corpus_terms_and_a_corpus_without_any_still_searches(tmp_path, tiny_model_dir, texts, terms):
    """bm25s's vocabulary also holds the empty token of a passage with no terms left, so `bm25` and `info` said
    "1 terms" for passages that are all empty or stopwords (and one more than the corpus has, always)."""
    corpus, index = tmp_path / "corpus.jsonl", tmp_path / "idx"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    runner = CliRunner()
    result = runner.invoke(main, ["build", str(corpus), "-o", str(index), "--model", str(tiny_model_dir),
                                  "--no-bm25", *COMMON])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["bm25", str(index)])
    assert result.exit_code == 0 and f"added BM25 to {index}: 3 passages, {terms} terms" in result.output
    result = runner.invoke(main, ["info", str(index)])
    assert result.exit_code == 0 and f"3 documents, {terms} terms" in result.output, result.output
    assert json.loads(runner.invoke(main, ["info", str(index), "--json"]).output)["bm25"]["terms"] == terms
    result = runner.invoke(main, ["search", str(index), "cats", "--mode", "bm25", "--json", *COMMON])
    assert result.exit_code == 0 and len(json.loads(result.output)["hits"]) == (1 if terms else 0), result.output
    result = runner.invoke(main, ["search", str(index), "cats", "--mode", "hybrid", "--json", *COMMON])
    assert result.exit_code == 0 and len(json.loads(result.output)["hits"]) == 3, result.output


@pytest.mark.parametrize("fusion", [{"method": "rrf", "rrf_k": "x", "alpha": 0.5, "depth": 1000}, "tuned"])
def test_bm25_drop_fusion_drops_only_the_fusion_record(tmp_path, tiny_model_dir, tiny_beir, fusion):
    """No command dropped a fusion record alone: the repair a damaged one named (`bm25 --overwrite`) rebuilt the BM25
    part too. The rest of the manifest and the BM25 files stay as they were, and `info --verify` passes."""
    index = tmp_path / "idx"
    split_off_train(tiny_beir)
    build = ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir), *COMMON]
    if fusion == "tuned":
        build += ["--tune-fusion-on", str(tiny_beir), "--split", "train"]
    assert CliRunner().invoke(main, build).exit_code == 0
    manifest = json.loads((index / "manifest.json").read_text())
    if fusion != "tuned":
        (index / "manifest.json").write_text(json.dumps({**manifest, "fusion": fusion}))
    bm25_files = {path: path.stat().st_mtime_ns for path in (index / manifest["lexical"]["directory"]).iterdir()}
    result = CliRunner().invoke(main, ["bm25", str(index), "--drop-fusion"])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        f"{index}: dropped its recorded hybrid fusion, so hybrid uses RRF k=60 unless --fusion, --rrf-k or --alpha "
        "say otherwise")
    assert json.loads((index / "manifest.json").read_text()) == {k: v for k, v in manifest.items() if k != "fusion"}
    assert {p: p.stat().st_mtime_ns for p in (index / manifest["lexical"]["directory"]).iterdir()} == bm25_files
    assert not list(tmp_path.glob(".*")) and not list(index.glob(".*"))  # no lock or temporary file left
    verified = CliRunner().invoke(main, ["info", str(index), "--verify"])
    assert verified.exit_code == 0 and "fusion:   none recorded" in verified.output, verified.output
    searched = CliRunner().invoke(main, ["search", str(index), "lava", "--mode", "hybrid", *COMMON])
    assert searched.exit_code == 0, searched.output
    again = CliRunner().invoke(main, ["bm25", str(index), "--drop-fusion"])
    assert again.exit_code == 0 and again.stderr.strip() == f"{index}: no hybrid fusion recorded; nothing to drop"


@pytest.mark.parametrize("other", [["--overwrite"], ["--bm25-k1", "1.2"], ["--tune-fusion-on", "BEIR"],
                                   ["--split", "dev"]])
def test_bm25_drop_fusion_with_a_flag_that_builds_or_tunes_is_refused_before_any_work(tmp_path, tiny_model_dir,
                                                                                     tiny_beir, other):
    index = tmp_path / "idx"
    split_off_train(tiny_beir)
    build = ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir), "--tune-fusion-on",
             str(tiny_beir), "--split", "train", *COMMON]
    assert CliRunner().invoke(main, build).exit_code == 0
    before = (index / "manifest.json").read_bytes()
    other = [str(tiny_beir) if word == "BEIR" else word for word in other]
    result = CliRunner().invoke(main, ["bm25", str(index), "--drop-fusion", *other])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output  # exit 1 until probe round 14
    assert lines[0].startswith(f"error: {other[0]}: --drop-fusion only drops the fusion record; give it alone, and "
                               f"{other[0]} in another run (see `") and lines[0].endswith(" bm25 --help`)")
    assert (index / "manifest.json").read_bytes() == before


@pytest.mark.parametrize("fusion, said", [(FusionParams("convex", alpha=0.65), "convex alpha=0.65"),
                                          (FusionParams("rrf", rrf_k=30), "rrf rrf_k=30")])
def test_tuning_summary_names_only_the_parameter_of_the_method_chosen(monkeypatch, tmp_path, capsys, fusion, said):
    """The line said 'convex rrf_k=60 alpha=0.65': rrf_k is unused by the convex fusion, alpha by RRF."""
    import retriever.fusion_tuning
    from retriever.cli.bm25 import run_tuning

    monkeypatch.setattr(retriever.fusion_tuning, "tune_and_record", lambda *args, **kwargs: fusion.record())
    run_tuning(tmp_path / "idx", (tmp_path, "train"))
    assert capsys.readouterr().err == f"fusion recorded in {tmp_path / 'idx'}/manifest.json: {said}\n"


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


def test_tuning_a_read_only_folder_that_keeps_its_bm25_is_refused_alone(tmp_path, tiny_model_dir, tiny_beir,
                                                                         monkeypatch):
    """`bm25 IDX --tune-fusion-on D` on a read-only folder said "IDX: keeping its BM25 index" before refusing it."""
    index = tmp_path / "idx"
    split_off_train(tiny_beir)
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import encode_and_index

    encode_and_index(tiny_beir, index, Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32"),
                     progress=False)
    before = (index / "manifest.json").read_bytes()
    nothing_created_in(index, monkeypatch)
    result = CliRunner().invoke(main, ["bm25", str(index), "--tune-fusion-on", str(tiny_beir), "--split", "train"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {index}: the tuned fusion cannot be recorded in its manifest (")
    assert (index / "manifest.json").read_bytes() == before


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


def test_the_fusion_tuning_encodes_queries_on_the_device_and_dtype_given(tmp_path, tiny_beir, tiny_model_dir,
                                                                         monkeypatch):
    """`build --device cpu --dtype fp32 --tune-fusion-on D` tuned with device and dtype auto (bf16 on a CPU with
    native bf16, the GPU where there is one), and `bm25 --tune-fusion-on` had no flag for them at all."""
    import retriever.fusion_tuning as fusion_tuning

    calls = []
    monkeypatch.setattr(fusion_tuning, "tune_and_record", lambda *args, **kwargs: calls.append(kwargs))
    split_off_train(tiny_beir)
    index = tmp_path / "idx"
    result = CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                       "--tune-fusion-on", str(tiny_beir), *COMMON])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["bm25", str(index), "--tune-fusion-on", str(tiny_beir), *COMMON])
    assert result.exit_code == 0, result.output
    assert [(call.get("device"), call.get("dtype")) for call in calls] == [("cpu", "fp32")] * 2
    result = CliRunner().invoke(main, ["bm25", str(index), "--overwrite", "--dtype", "fp32"])
    assert result.exit_code == 2 and "--dtype sets how --tune-fusion-on encodes its queries" in result.output


def _tuned_copy(tmp_path, tiny_flat_build, dataset_name: str = "d", **encoder) -> tuple:
    """(index, its manifest's bytes, dataset): a copy of the session's index with a tuned fusion recorded (and
    ``encoder`` settings over its own), beside a copy of its dataset with a train split."""
    import shutil

    from retriever.index_folder import read_manifest, replace_manifest

    index = shutil.copytree(tiny_flat_build, tmp_path / "idx")
    manifest = read_manifest(index)
    replace_manifest(index, {**manifest, "encoder": {**manifest["encoder"], **encoder},
                             "fusion": FusionParams(rrf_k=30.0).record()})
    dataset = shutil.copytree(tiny_flat_build.parent / "tiny-beir", tmp_path / dataset_name)
    split_off_train(dataset)
    return index, (index / "manifest.json").read_bytes(), dataset


def test_a_rebuild_for_a_tuning_on_another_collection_is_refused_before_the_bm25_part_is_touched(tmp_path,
                                                                                                   tiny_flat_build):
    """`bm25 IDX --overwrite --bm25-k1 1.5 --tune-fusion-on OTHER`, OTHER judging documents the index lacks: the BM25
    part was rebuilt and the tuned fusion dropped ("tunes it anew on OTHER"), then the tuning refused OTHER."""
    index, before, other = _tuned_copy(tmp_path, tiny_flat_build, "other")
    (other / "qrels" / "train.tsv").write_text(HEADER + "q1\tx6\t1\nq2\tx4\t1\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["bm25", str(index), "--overwrite", "--bm25-k1", "1.5", "--tune-fusion-on",
                                       str(other), *COMMON])
    assert result.exit_code == 1, result.output
    assert "none of the 2 documents other split train judges relevant is in the index" in result.stderr
    assert "added BM25" not in result.stderr and "dropped" not in result.stderr
    assert (index / "manifest.json").read_bytes() == before


def test_a_rebuild_for_a_tuning_whose_model_is_gone_is_refused_before_the_bm25_part_is_touched(tmp_path,
                                                                                                 tiny_flat_build):
    """The index's model moved away: `bm25 IDX --overwrite --bm25-k1 1.5 --tune-fusion-on D` rebuilt the part and
    dropped the tuned fusion, then failed to load the model, saying to pass --model, which bm25 does not take."""
    index, before, dataset = _tuned_copy(tmp_path, tiny_flat_build, model="gone-model", model_path="../gone-model")
    result = CliRunner().invoke(main, ["bm25", str(index), "--overwrite", "--bm25-k1", "1.5", "--tune-fusion-on",
                                       str(dataset), *COMMON])
    assert result.exit_code == 1, result.output
    assert "move the model back" in result.stderr and "--model PATH" not in result.stderr
    assert "added BM25" not in result.stderr and (index / "manifest.json").read_bytes() == before


@pytest.mark.parametrize("flags, said", [(["--device", "cpu", "--dtype", "fp16"], "fp16 is not supported on the CPU"),
                                         (["--device", "tpu"], "unknown device 'tpu'")])
def test_a_rebuild_for_a_tuning_on_a_device_that_cannot_run_is_refused_before_the_bm25_part_is_touched(
        tmp_path, tiny_flat_build, flags, said):
    """`bm25 IDX --overwrite --tune-fusion-on D --dtype fp16` on a CPU rebuilt the part and dropped the tuned fusion,
    and only the tuning's encoder refused fp16 on the CPU."""
    index, before, dataset = _tuned_copy(tmp_path, tiny_flat_build)
    result = CliRunner().invoke(main, ["bm25", str(index), "--overwrite", "--bm25-k1", "1.5", "--tune-fusion-on",
                                       str(dataset), *flags])
    assert result.exit_code == 1 and said in result.stderr, result.output
    assert "added BM25" not in result.stderr and (index / "manifest.json").read_bytes() == before
