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


def _children(parent: int, marker: str) -> set[int]:
    """Processes whose parent is ``parent`` and whose command line holds ``marker`` (read from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[1]) == parent and marker in command:
            found.add(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (a dead child nobody has reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_part_workers_die_with_a_killed_build(shards, corpus, tmp_path):
    """SIGKILL of `retriever index` cannot shut its pool down: the workers must notice on their own."""
    import os
    import signal
    import subprocess
    import sys
    import time

    command = [sys.executable, "-m", "retriever", "index", str(shards), "--corpus", str(corpus), "-o",
               str(tmp_path / "idx"), "--index-type", "ivf-ondisk", "--nlist", "8", "--part-size", "60",
               "--parallel-parts", "2", "--ondisk-codes", "flat", "--no-bm25"]
    run = subprocess.Popen(command, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    deadline = time.monotonic() + 120
    while run.poll() is None and len(workers) < 2 and time.monotonic() < deadline:
        workers = _children(run.pid, "spawn_main")
        time.sleep(0.02)
    if run.poll() is None:
        run.send_signal(signal.SIGKILL)
    run.wait()
    assert len(workers) == 2, "the build ended before its part workers could be seen"
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [pid for pid in workers if _running(pid)]
    for pid in survivors:  # do not leave them behind after a failure
        os.kill(pid, signal.SIGKILL)
    assert survivors == [], "part workers outlived the killed build"
