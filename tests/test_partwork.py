"""A crashed ivf-ondisk build resumes: the trained quantizer and finished parts in OUTPUT.parts/ are reused
when the inputs match, rebuilt when they do not, and the result equals a clean build."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from retriever import faiss_index, indexing, part_processes, partwork
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, build_index
from retriever.searching import Searcher
from fixtures_ondisk import ONDISK_PARAMS, ondisk_hits

IN_PROCESS = {**ONDISK_PARAMS, "parallel_parts": 1}  # parts filled in this process, where the test can see them


class Crash(Exception):
    pass


@pytest.fixture
def calls(monkeypatch):
    """Names of the parts filled and the number of trainings, as the build goes; ``crash_after`` parts
    filled, the next one raises."""
    record = {"filled": [], "trained": 0, "crash_after": None}
    fill_part, train = part_processes.fill_part, faiss_index.train

    def counted_fill(*args):
        if record["crash_after"] is not None and len(record["filled"]) == record["crash_after"]:
            raise Crash
        record["filled"].append(Path(args[2]).name)
        return fill_part(*args)

    def counted_train(*args):
        record["trained"] += 1
        return train(*args)

    monkeypatch.setattr(part_processes, "fill_part", counted_fill)
    monkeypatch.setattr(faiss_index, "train", counted_train)
    return record


def crash_after_parts(ondisk_shards, ondisk_corpus, output, calls, params=IndexParams(**IN_PROCESS),
                      parts: int = 1) -> Path:
    """A build that crashed after filling ``parts`` parts: its parts folder (each part with its held-out vectors
    and its record)."""
    calls["crash_after"] = parts
    with pytest.raises(Crash):
        build_index(ondisk_shards, ondisk_corpus, output, params, progress=False)
    work = partwork.parts_folder(output)
    assert not output.exists()
    assert sorted(p.name for p in work.glob("part-*")) == sorted(
        f"part-{number:05d}.faiss{end}" for number in range(parts) for end in ("", ".held.npz", ".json"))
    calls.update(filled=[], trained=0, crash_after=None)
    return work


def test_a_crashed_build_skips_its_finished_parts_and_equals_a_clean_build(ondisk_shards, ondisk_corpus, ondisk_index,
                                                                           calls, tmp_path, capsys):
    work = crash_after_parts(ondisk_shards, ondisk_corpus, tmp_path / "idx", calls)
    manifest = build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
    assert calls["filled"] == ["part-00001.faiss", "part-00002.faiss", "part-00003.faiss"]
    assert calls["trained"] == 0, "the trained quantizer was reused"
    assert "resuming: 1 of 4 parts already built" in capsys.readouterr().err
    assert not work.exists(), "the parts are deleted once the index is in place"
    clean = Searcher(ondisk_index, device="cpu")
    assert manifest["index"]["trained_on"] == clean.manifest["index"]["trained_on"]
    assert (tmp_path / "idx" / "index.ivfdata").read_bytes() == (ondisk_index / "index.ivfdata").read_bytes()
    assert ondisk_hits(Searcher(tmp_path / "idx", device="cpu"), 8) == ondisk_hits(clean, 8)


@pytest.mark.parametrize("change", [{"seed": 1}, {"part_size": 200}, {"ondisk_codes": "sq8"}, {"nlist": 4}])
def test_parts_of_other_inputs_are_rebuilt_not_reused(ondisk_shards, ondisk_corpus, calls, tmp_path, capsys, change):
    crash_after_parts(ondisk_shards, ondisk_corpus, tmp_path / "idx", calls)
    params = IndexParams(**{**IN_PROCESS, **change})
    manifest = build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", params, progress=False)
    assert calls["trained"] == 1 and len(calls["filled"]) == manifest["index"]["parts"]
    assert "built from other inputs" in capsys.readouterr().err


@pytest.mark.parametrize("held_file", ["kept", "deleted"])
def test_resumed_build_keeps_the_held_out_tuning_vectors(ondisk_shards, ondisk_corpus, calls, tmp_path, capsys,
                                                         held_file):
    params = IndexParams(**IN_PROCESS, target_recall=0.9, tuning_queries=60)
    work = crash_after_parts(ondisk_shards, ondisk_corpus, tmp_path / "idx", calls, params)
    if held_file == "deleted":  # was a FileNotFoundError when the vectors were read for tuning
        (work / "part-00000.faiss.held.npz").unlink()
    resumed = build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", params, progress=False)
    assert len(calls["filled"]) == (4 if held_file == "deleted" else 3)
    if held_file == "deleted":
        assert "part-00000.faiss: part-00000.faiss.held.npz is missing; filling it again" in capsys.readouterr().err
    clean = build_index(ondisk_shards, ondisk_corpus, tmp_path / "clean", params, progress=False)
    assert resumed["index"]["tuning"] == clean["index"]["tuning"]
    assert (tmp_path / "idx" / "index.ivfdata").read_bytes() == (tmp_path / "clean" / "index.ivfdata").read_bytes()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])


PART_DAMAGE = {  # what a crash, a full disk or a user's hand can leave in place of part 2
    "truncated": lambda work: _truncate(work / "part-00002.faiss"),
    "copied-over": lambda work: shutil.copyfile(work / "part-00001.faiss", work / "part-00002.faiss"),
    "unrecorded": lambda work: (work / "part-00002.faiss.json").unlink(),
    "record-of-another-part": lambda work: shutil.copyfile(work / "part-00001.faiss.json",
                                                           work / "part-00002.faiss.json"),
    "held-truncated": lambda work: _truncate(work / "part-00002.faiss.held.npz"),
}


@pytest.mark.parametrize("damage", sorted(PART_DAMAGE))
def test_a_damaged_part_is_filled_again_not_reused(ondisk_shards, ondisk_corpus, ondisk_index, calls, tmp_path, capsys,
                                                   damage):
    work = crash_after_parts(ondisk_shards, ondisk_corpus, tmp_path / "idx", calls, parts=3)
    PART_DAMAGE[damage](work)
    capsys.readouterr()
    build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
    assert calls["filled"] == ["part-00002.faiss", "part-00003.faiss"] and calls["trained"] == 0
    err = capsys.readouterr().err
    assert f"{work / 'part-00002.faiss'}: " in err and "; filling it again" in err
    assert "resuming: 2 of 4 parts already built" in err
    assert (tmp_path / "idx" / "index.ivfdata").read_bytes() == (ondisk_index / "index.ivfdata").read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "unrecorded"])
def test_a_damaged_trained_index_is_trained_again(ondisk_shards, ondisk_corpus, ondisk_index, calls, tmp_path, capsys,
                                                  damage):
    work = crash_after_parts(ondisk_shards, ondisk_corpus, tmp_path / "idx", calls)
    if damage == "truncated":  # was FAISS's "read error" traceback
        _truncate(work / "trained.faiss")
    else:
        (work / "trained.faiss.json").unlink()
    capsys.readouterr()
    build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
    assert calls["trained"] == 1
    assert f"{work / 'trained.faiss'}: " in capsys.readouterr().err
    assert (tmp_path / "idx" / "index.ivfdata").read_bytes() == (ondisk_index / "index.ivfdata").read_bytes()


def test_parts_of_another_trained_index_are_filled_again(ondisk_shards, ondisk_corpus, calls, tmp_path, capsys):
    """A part is a copy of the trained index: one made from another (e.g. one trained again after damage, on
    other threads) cannot be merged with it."""
    work = crash_after_parts(ondisk_shards, ondisk_corpus, tmp_path / "idx", calls)
    record = json.loads((work / "part-00000.faiss.json").read_text())
    (work / "part-00000.faiss.json").write_text(json.dumps({**record, "trained_sha256": "0" * 64}))
    build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
    assert len(calls["filled"]) == 4
    assert "part-00000.faiss: its record is of other inputs; filling it again" in capsys.readouterr().err


NOT_OURS = {  # OUTPUT.parts as a user may have it: (files, what the refusal says)
    "list-as-inputs": ({"inputs.json": "[]", "photos/precious.txt": "precious"}, "it holds photos"),
    "any-json-as-inputs": ({"inputs.json": '{"shards": []}'}, "inputs.json is missing or not a build's record"),
    "no-inputs": ({"part-00000.faiss": "mine"}, "inputs.json is missing or not a build's record"),
    "a-file-of-another-name": ({"notes.txt": "mine"}, "it holds notes.txt"),
    "a-folder-of-our-name": ({"trained.faiss/precious.txt": "precious"}, "it holds trained.faiss"),
}


@pytest.mark.parametrize("case", sorted(NOT_OURS))
def test_a_folder_that_is_not_ours_is_refused_before_any_work(ondisk_shards, ondisk_corpus, tmp_path, monkeypatch,
                                                              case):
    from retriever import ondisk

    def no_docstore(*args):
        raise AssertionError("the doc store was written before the refusal")

    monkeypatch.setattr(ondisk, "write_documents", no_docstore)
    files, why = NOT_OURS[case]
    for name, text in files.items():
        (tmp_path / "idx.parts" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "idx.parts" / name).write_text(text)
    with pytest.raises(RetrieverError, match=rf"idx.parts: exists and is not the parts folder of an ivf-ondisk "
                                             rf"build \(.*{why}.*\); move it away or choose another --output"):
        build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
    for name, text in files.items():
        assert (tmp_path / "idx.parts" / name).read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx.parts"]


def test_a_users_file_in_a_build_parts_folder_is_never_deleted(ondisk_shards, ondisk_corpus, calls, tmp_path):
    """Other inputs empty the parts folder: only when all it holds is what a build writes there."""
    work = crash_after_parts(ondisk_shards, ondisk_corpus, tmp_path / "idx", calls)
    (work / "photos").mkdir()
    (work / "photos" / "precious.txt").write_text("precious")
    with pytest.raises(RetrieverError, match="idx.parts: exists and is not the parts folder.*it holds photos"):
        build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**{**IN_PROCESS, "seed": 1}),
                    progress=False)
    assert (work / "photos" / "precious.txt").read_text() == "precious" and (work / "part-00000.faiss").is_file()


@pytest.mark.parametrize("crash", ["before-the-move", "after-the-move"])
def test_parts_left_beside_a_finished_index_go_with_the_next_build(ondisk_shards, ondisk_corpus, calls, tmp_path,
                                                                   monkeypatch, capsys, crash):
    """A crash after the index is in place, before its parts are deleted, must not leave them for ever; one
    before it keeps them to resume from."""
    move = indexing.move_into_place

    def crashing_move(*args):
        if crash == "after-the-move":
            move(*args)
        raise Crash

    monkeypatch.setattr(indexing, "move_into_place", crashing_move)
    with pytest.raises(Crash):
        build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
    work = partwork.parts_folder(tmp_path / "idx")
    assert work.is_dir() and (tmp_path / "idx").exists() == (crash == "after-the-move")
    monkeypatch.setattr(indexing, "move_into_place", move)
    calls.update(filled=[], trained=0)
    if crash == "after-the-move":
        with pytest.raises(RetrieverError, match="already exists"):
            build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
        assert not work.exists() and f"deleted {work}, left by a build that finished" in capsys.readouterr().err
    else:
        build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
        assert calls == {"filled": [], "trained": 0, "crash_after": None} and not work.exists()


def test_a_folder_that_is_not_ours_is_not_emptied(ondisk_shards, ondisk_corpus, tmp_path):
    (tmp_path / "idx.parts").mkdir()
    (tmp_path / "idx.parts" / "notes.txt").write_text("mine")
    with pytest.raises(RetrieverError, match="idx.parts: exists and is not the parts folder"):
        build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**IN_PROCESS), progress=False)
    assert (tmp_path / "idx.parts" / "notes.txt").read_text() == "mine"


def test_processes_and_ray_are_not_mixed(ondisk_shards, ondisk_corpus, tmp_path):
    with pytest.raises(RetrieverError, match="with --ray, parts are Ray tasks: use --ray-workers"):
        build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**ONDISK_PARAMS, ray_address="local"),
                    progress=False)
    assert not (tmp_path / "idx").exists()


class Killed(BaseException):
    """A kill in the middle of deleting files, as SIGKILL would stop it."""


def test_a_build_killed_while_it_empties_its_parts_folder_is_resumed_not_refused(tmp_path, monkeypatch):
    """Parts of other inputs are deleted (as are a finished build's): a kill at any point of that must leave a folder
    the next build still knows as its own (its inputs.json goes last), not one refused as a user's."""
    def inputs(seed: int) -> dict:
        return {key: seed for key in partwork.INPUT_KEYS}

    folder = tmp_path / "idx.parts"
    entries = ["trained.faiss", "trained.faiss.json"] + [
        f"part-{number:05d}.faiss{end}" for number in range(4) for end in ("", ".held.npz", ".json")]
    unlink = os.unlink
    for survived in range(len(entries) + 1):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for name in entries:
            (folder / name).write_text("x")
        (folder / partwork.INPUTS_FILE).write_text(json.dumps(inputs(0)))
        deleted = []

        def killed_after(path, *args, **kwargs):
            if len(deleted) == survived:
                raise Killed
            deleted.append(path)
            return unlink(path, *args, **kwargs)

        monkeypatch.setattr(os, "unlink", killed_after)
        with pytest.raises(Killed):
            partwork.PartsFolder(folder, inputs(1))
        monkeypatch.setattr(os, "unlink", unlink)
        assert partwork.owned_inputs(folder) in (inputs(0), None), f"killed after {survived} files were deleted"


def test_a_parts_folder_holding_temporaries_named_with_a_host_is_still_the_builds(tmp_path):
    """Temporaries are named ``.NAME.tmp-PID@HOST`` (``pid_names``): a killed build's, in its OUTPUT.parts, must not
    make the folder look like a user's, or the next build refuses it instead of resuming."""
    from retriever.files import temporary_path

    folder = tmp_path / "idx.parts"
    folder.mkdir()
    temporary_path(folder / partwork.INPUTS_FILE).write_text("{")  # a first run killed while writing its record
    (folder / ".part-00001.faiss.tmp-12@node-b").write_text("x")
    assert partwork.owned_inputs(folder) is None


def test_another_hosts_temporary_is_kept_and_named_and_this_hosts_dead_ones_removed(tmp_path, capsys):
    """OUTPUT.parts on a shared file system: a part a Ray task on another node is writing must not be deleted by a
    build here, whose kernel cannot see that process (every ``.*.tmp-*`` was unlinked, with no host check)."""
    from retriever.pid_names import host_tag

    finished = subprocess.Popen(["true"])
    finished.wait()
    folder = tmp_path / "idx.parts"
    folder.mkdir()
    inputs = {key: 0 for key in partwork.INPUT_KEYS}
    (folder / partwork.INPUTS_FILE).write_text(json.dumps(inputs))
    elsewhere = folder / ".part-00001.faiss.tmp-12@node-b"
    dead = folder / f".part-00002.faiss.tmp-{finished.pid}@{host_tag()}"
    live = folder / f".part-00003.faiss.tmp-{os.getpid()}@{host_tag()}"
    for temporary in (elsewhere, dead, live):
        temporary.write_text("x")
    partwork.PartsFolder(folder, inputs)
    assert sorted(path.name for path in folder.iterdir() if ".tmp-" in path.name) == sorted([elsewhere.name, live.name])
    said = capsys.readouterr().err
    assert f"kept {elsewhere}:" in said and "host node-b" in said, said


@pytest.mark.parametrize("case", ["finished", "other-inputs"])
def test_deleting_a_parts_folder_keeps_another_hosts_temporary(tmp_path, capsys, case):
    """A build that finished (or whose inputs changed) deleted OUTPUT.parts whole, with the part a Ray task on
    another node was still writing there, which ``clean_temporaries`` keeps and names; this host's dead ones go."""
    from retriever.pid_names import host_tag

    finished = subprocess.Popen(["true"])
    finished.wait()
    folder, manifest = tmp_path / "idx.parts", tmp_path / "manifest.json"
    folder.mkdir()
    manifest.write_text("{}")
    (folder / partwork.INPUTS_FILE).write_text(json.dumps({key: 0 for key in partwork.INPUT_KEYS}))
    (folder / "part-00000.faiss").write_text("x")
    elsewhere = folder / ".part-00001.faiss.tmp-12@node-b"
    dead = folder / f".part-00002.faiss.tmp-{finished.pid}@{host_tag()}"
    for temporary in (elsewhere, dead):
        temporary.write_text("x")
    if case == "finished":
        partwork.mark_finished(folder, manifest)
        said = partwork.clear_finished(folder, manifest)
        assert said == (f"deleted the parts in {folder}, left by a build that finished; the folder stays for the "
                        "temporaries still being written there")
        assert partwork.owned_inputs(folder) is None  # the next build takes it as empty
    else:
        partwork.PartsFolder(folder, {key: 1 for key in partwork.INPUT_KEYS})
    assert sorted(path.name for path in folder.iterdir() if path.name.startswith(".")) == [elsewhere.name]
    assert not (folder / "part-00000.faiss").exists()
    assert f"kept {elsewhere}:" in capsys.readouterr().err
