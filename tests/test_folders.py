"""Model folders are published whole: staged, then moved in with config.json last."""
from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys

import pytest

from retriever.errors import RetrieverError
from retriever.folders import exclusive_build, held_lock, named_output, publish_model_folder


def _model(folder, weights: str) -> None:
    (folder / "model.safetensors").write_text(weights)
    (folder / "config.json").write_text("{}")


def test_a_model_folder_replaces_the_model_and_keeps_checkpoints(tmp_path):
    output = tmp_path / "out"
    publish_model_folder(output, lambda staging: _model(staging, "old"))
    (output / "checkpoints").mkdir()
    publish_model_folder(output, lambda staging: _model(staging, "new"))
    assert (output / "model.safetensors").read_text() == "new" and (output / "checkpoints").is_dir()
    assert sorted(p.name for p in output.iterdir()) == ["checkpoints", "config.json", "model.safetensors"]


def test_a_failed_write_leaves_the_old_model_and_no_staging(tmp_path):
    output = tmp_path / "out"
    publish_model_folder(output, lambda staging: _model(staging, "old"))

    def crash(staging):
        (staging / "model.safetensors").write_text("half")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        publish_model_folder(output, crash)
    assert (output / "model.safetensors").read_text() == "old"
    assert sorted(p.name for p in output.iterdir()) == ["config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_staging_folders_of_killed_runs_are_removed_and_live_ones_kept(tmp_path):
    killed = subprocess.Popen(["true"])
    killed.wait()
    output = tmp_path / "out"
    publish_model_folder(output, lambda staging: _model(staging, "old"))
    for pid in (killed.pid, os.getppid()):
        (output / f".out.staging-{pid}").mkdir()
        _model(output / f".out.staging-{pid}", "a whole copy of the weights")
    publish_model_folder(output, lambda staging: _model(staging, "new"))
    assert sorted(p.name for p in output.iterdir()) == [f".out.staging-{os.getppid()}", "config.json",
                                                         "model.safetensors"]


def test_a_second_build_of_the_same_output_is_refused_while_the_first_runs(tmp_path):
    output = tmp_path / "idx"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from retriever.folders import exclusive_build\n"
                               f"with exclusive_build(Path({str(output)!r})):\n    print('held', flush=True); "
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RetrieverError, match=rf"idx: another build of it is running \(pid {holder.pid}\)"):
            with exclusive_build(output):
                pass
    finally:
        holder.kill()  # a killed build's lock goes with it
        holder.wait()
    with exclusive_build(output):
        assert (tmp_path / ".idx.lock").read_text() == f"{os.getpid()} {socket.gethostname()}"
    with exclusive_build(output):  # one process's builds in turn (encode, then index) do not block each other
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_lock_whose_folder_turned_read_only_lets_the_commands_own_error_through(tmp_path, monkeypatch):
    """A folder made read-only (or immutable) while the run held its lock: the lock file cannot be removed, but the
    kernel drops the lock anyway, so the run's one-line error is what the user sees, not a PermissionError."""
    from pathlib import Path

    real_unlink = Path.unlink

    def refusing_unlink(self, missing_ok=False):
        if self.name == ".idx.lock":
            raise PermissionError(1, "Operation not permitted", str(self))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", refusing_unlink)
    with pytest.raises(RetrieverError, match="cannot write the shard"):
        with exclusive_build(tmp_path / "idx"):
            raise RetrieverError("cannot write the shard")
    with exclusive_build(tmp_path / "idx"):  # the file left behind blocks nobody
        pass


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_a_folder_that_cannot_be_moved_into_place_is_one_line_and_the_old_one_stays(tmp_path, monkeypatch, exchange):
    """The output's folder turned read-only (or immutable) while the index was built: the last rename fails; one line
    saying what to do, and an index already there is still there (the two-rename fallback puts it back)."""
    import retriever.folders as folders

    building, output = tmp_path / ".idx.building-1", tmp_path / "idx"
    building.mkdir()
    output.mkdir()
    (output / "manifest.json").write_text("old")
    real_replace = os.replace

    def refusing_replace(source, target):
        if os.fspath(source) == os.fspath(building):
            raise PermissionError(1, "Operation not permitted", os.fspath(source), os.fspath(target))
        return real_replace(source, target)

    monkeypatch.setattr(os, "replace", refusing_replace)
    if exchange:
        monkeypatch.setattr(folders, "_exchange", lambda a, b: (_ for _ in ()).throw(
            PermissionError(1, "Operation not permitted", os.fspath(a))))
    else:
        monkeypatch.setattr(folders, "_exchange", lambda a, b: False)
    with pytest.raises(RetrieverError, match=r"idx: cannot move the finished folder into place \(operation not "
                                             r"permitted\); .* rerun the same command"):
        folders.replace_folder(building, output)
    assert (output / "manifest.json").read_text() == "old"
    output.rename(tmp_path / "gone")
    with pytest.raises(RetrieverError, match="cannot move the finished folder into place"):
        folders.replace_folder(building, output)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, where every write fails with ENOSPC")
def test_a_lock_file_a_full_disk_has_no_room_for_still_locks_and_lets_the_commands_own_error_name_the_path(tmp_path):
    """On a full disk the pid written into `.NAME.lock` failed first, as `no space left on the device` naming no
    path, before the command's own write could name it; the pid is only for a refused run's message."""
    lock = tmp_path / ".out.lock"
    lock.symlink_to("/dev/full")  # opens, locks and stats as a file; writing the pid fails (as on a full disk)
    with held_lock(lock, lambda pid: f"held by {pid}"), open(lock, "rb") as other:
        with pytest.raises(BlockingIOError):  # held: a second run is refused
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert not lock.is_symlink()


def test_another_hosts_build_folders_are_kept_and_named_and_this_hosts_dead_ones_cleaned(tmp_path, monkeypatch):
    """On a shared file system (NFS) a hidden build folder named by its pid alone was judged by this host's kernel,
    which knows nothing of another host's processes. The name carries the host: another host's folders stay and are
    named (and its set-aside index is not moved back over a build it may be running); this host's dead ones go."""
    from retriever.folders import clean_stale

    monkeypatch.setattr(socket, "gethostname", lambda: "node-a")
    killed = subprocess.Popen(["true"])
    killed.wait()
    output, gone = tmp_path / "idx", killed.pid
    names = [f".idx.building-{gone}@node-b", f".idx.old-{gone}@node-b", f".idx.building-{gone}@node-a"]
    for name in names:
        (tmp_path / name).mkdir()
    assert clean_stale(output) == [
        f"deleted {tmp_path / names[2]}, left by a killed build",
        f"kept {tmp_path / names[0]}: the build of process {gone} on host node-b, which cannot be seen from here; "
        "remove it once that build no longer runs",
        f"kept {tmp_path / names[1]}: the index an --overwrite set aside, by process {gone} on host node-b, which "
        f"cannot be seen from here; once that build no longer runs, move it back to {output} if that is missing, else "
        "remove it"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names[:2]


@pytest.mark.parametrize("link", ["loop", "nowhere"])
def test_an_output_folder_under_a_link_that_loops_or_leads_nowhere_is_one_line(tmp_path, link):
    """`encode -o LOOP` or `-o GONE/sub` (pretrain, train and the demo make their folders the same way) said
    "cannot be created (File exists)": mkdir meets the link and cannot tell why (session 21)."""
    from retriever.folders import make_folder

    (tmp_path / link).symlink_to(tmp_path / link if link == "loop" else tmp_path / "missing")
    target = tmp_path / link if link == "loop" else tmp_path / link / "sub"
    with pytest.raises(RetrieverError) as raised:
        make_folder(target)
    said = str(raised.value)
    assert ("leads back to itself" if link == "loop" else "is a symbolic link to") in said, said
    assert said.endswith("; choose another --output") and not (tmp_path / "missing").exists()


@pytest.mark.parametrize("name", ["a\nb", "x\x1b[2Jy", "tab\tname", "c1\x85z", "del\x7f"])
def test_an_output_name_holding_a_control_character_is_refused_in_one_line(tmp_path, name):
    """`build c.jsonl -o $'a\\nb'` built, and its summary line `built a<newline>b: …` (and any error naming the
    folder) broke in two; an ESC sequence in the name was obeyed by the terminal."""
    with pytest.raises(RetrieverError, match="holds a control character") as refused:
        named_output(tmp_path / name)
    assert not any(ord(character) < 32 or 127 <= ord(character) < 160 for character in str(refused.value))
    assert list(tmp_path.iterdir()) == []
    named_output(tmp_path / "caf\u00e9 b")
