"""The fusion tuning of ``retriever.cli.bm25`` that `bm25`, `build` and `index` run (--tune-fusion-on): the split
refused before any work, a rerun of a build whose tuning recorded nothing, the summary line, the device and dtype."""
from __future__ import annotations

import json

import pytest

from click.testing import CliRunner

from fixtures_corpora import split_off_train

from retriever.cli import main
from retriever.fusion import FusionParams

COMMON = ["--device", "cpu", "--dtype", "fp32"]
HEADER = "query-id\tcorpus-id\tscore\n"


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
    from fixtures_corpora import write_jsonl

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


@pytest.mark.parametrize("fusion, said", [(FusionParams("convex", alpha=0.65), "convex alpha=0.65"),
                                          (FusionParams("rrf", rrf_k=30), "rrf rrf_k=30")])
def test_tuning_summary_names_only_the_parameter_of_the_method_chosen(monkeypatch, tmp_path, capsys, fusion, said):
    """The line said 'convex rrf_k=60 alpha=0.65': rrf_k is unused by the convex fusion, alpha by RRF."""
    import retriever.fusion_tuning
    from retriever.cli.bm25 import run_tuning

    monkeypatch.setattr(retriever.fusion_tuning, "tune_and_record", lambda *args, **kwargs: fusion.record())
    run_tuning(tmp_path / "idx", (tmp_path, "train"))
    assert capsys.readouterr().err == f"fusion recorded in {tmp_path / 'idx'}/manifest.json: {said}\n"


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
