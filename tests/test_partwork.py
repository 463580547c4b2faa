"""A crashed ivf-ondisk build resumes: the trained quantizer and finished parts in OUTPUT.parts/ are reused
when the inputs match, rebuilt when they do not, and the result equals a clean build."""
from __future__ import annotations

from pathlib import Path

import pytest

from retriever import faiss_index, partwork
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, build_index
from retriever.searching import Searcher
from test_ondisk import ONDISK, corpus, encoder, hits, ondisk, shards  # noqa: F401  (fixtures)

IN_PROCESS = {**ONDISK, "parallel_parts": 1}  # parts filled in this process, where the test can see them


class Crash(Exception):
    pass


@pytest.fixture
def calls(monkeypatch):
    """Names of the parts filled and the number of trainings, as the build goes; ``crash_after`` parts
    filled, the next one raises."""
    record = {"filled": [], "trained": 0, "crash_after": None}
    fill_part, train = partwork.fill_part, faiss_index.train

    def counted_fill(*args):
        if record["crash_after"] is not None and len(record["filled"]) == record["crash_after"]:
            raise Crash
        record["filled"].append(Path(args[2]).name)
        return fill_part(*args)

    def counted_train(*args):
        record["trained"] += 1
        return train(*args)

    monkeypatch.setattr(partwork, "fill_part", counted_fill)
    monkeypatch.setattr(faiss_index, "train", counted_train)
    return record


def crash_after_one_part(shards, corpus, output, calls, params=IndexParams(**IN_PROCESS)) -> Path:
    calls["crash_after"] = 1
    with pytest.raises(Crash):
        build_index(shards, corpus, output, params, progress=False)
    work = partwork.parts_folder(output)
    assert not output.exists()
    assert sorted(p.name for p in work.glob("part-*")) == ["part-00000.faiss", "part-00000.faiss.held.npz"]
    calls.update(filled=[], trained=0, crash_after=None)
    return work


def test_a_crashed_build_skips_its_finished_parts_and_equals_a_clean_build(shards, corpus, ondisk, calls, tmp_path,
                                                                           capsys):
    work = crash_after_one_part(shards, corpus, tmp_path / "idx", calls)
    manifest = build_index(shards, corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
    assert calls["filled"] == ["part-00001.faiss", "part-00002.faiss", "part-00003.faiss"]
    assert calls["trained"] == 0, "the trained quantizer was reused"
    assert "resuming: 1 of 4 parts already built" in capsys.readouterr().err
    assert not work.exists(), "the parts are deleted once the index is in place"
    clean = Searcher(ondisk, device="cpu")
    assert manifest["index"]["trained_on"] == clean.manifest["index"]["trained_on"]
    assert (tmp_path / "idx" / "index.ivfdata").read_bytes() == (ondisk / "index.ivfdata").read_bytes()
    assert hits(Searcher(tmp_path / "idx", device="cpu"), 8) == hits(clean, 8)


@pytest.mark.parametrize("change", [{"seed": 1}, {"part_size": 200}, {"ondisk_codes": "sq8"}, {"nlist": 4}])
def test_parts_of_other_inputs_are_rebuilt_not_reused(shards, corpus, calls, tmp_path, capsys, change):
    crash_after_one_part(shards, corpus, tmp_path / "idx", calls)
    params = IndexParams(**{**IN_PROCESS, **change})
    manifest = build_index(shards, corpus, tmp_path / "idx", params, progress=False)
    assert calls["trained"] == 1 and len(calls["filled"]) == manifest["index"]["parts"]
    assert "built from other inputs" in capsys.readouterr().err


def test_resumed_build_keeps_the_held_out_tuning_vectors(shards, corpus, calls, tmp_path):
    params = IndexParams(**IN_PROCESS, target_recall=0.9, tuning_queries=60)
    crash_after_one_part(shards, corpus, tmp_path / "idx", calls, params)
    resumed = build_index(shards, corpus, tmp_path / "idx", params, progress=False)
    clean = build_index(shards, corpus, tmp_path / "clean", params, progress=False)
    assert resumed["index"]["tuning"] == clean["index"]["tuning"]
    assert (tmp_path / "idx" / "index.ivfdata").read_bytes() == (tmp_path / "clean" / "index.ivfdata").read_bytes()


def test_a_folder_that_is_not_ours_is_not_emptied(shards, corpus, tmp_path):
    (tmp_path / "idx.parts").mkdir()
    (tmp_path / "idx.parts" / "notes.txt").write_text("mine")
    with pytest.raises(RetrieverError, match="idx.parts: exists and is not the parts folder"):
        build_index(shards, corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
    assert (tmp_path / "idx.parts" / "notes.txt").read_text() == "mine"


def test_processes_and_ray_are_not_mixed(shards, corpus, tmp_path):
    with pytest.raises(RetrieverError, match="with --ray, parts are Ray tasks: use --ray-workers"):
        build_index(shards, corpus, tmp_path / "idx", IndexParams(**ONDISK, ray_address="local"), progress=False)
    assert not (tmp_path / "idx").exists()
