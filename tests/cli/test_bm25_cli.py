"""`retriever bm25` (``retriever.cli.bm25``): adding, replacing and keeping the BM25 part, --drop-fusion, and what
a rebuild for a tuning refuses before the part is touched; the tuning itself (`bm25`, `build` and `index`
--tune-fusion-on): test_bm25_tuning_cli.py."""
from __future__ import annotations

import json

import pytest

from click.testing import CliRunner

from fixtures_corpora import split_off_train
from fixtures_system import nothing_created_in

from retriever.cli import main
from retriever.fusion import FusionParams

COMMON = ["--device", "cpu", "--dtype", "fp32"]
HEADER = "query-id\tcorpus-id\tscore\n"


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
