"""The worker processes that fill ivf-ondisk parts: one line when one dies, and none outlives its build."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from retriever import part_processes
from retriever.errors import RetrieverError


def _exits(*args) -> None:
    os._exit(1)


def _sleeps_its_threads(*args) -> None:
    """A part worker's job (``fill_part(*job, threads, workers)``, here of an empty job) that sleeps its thread count."""
    time.sleep(args[-2])


def test_a_killed_part_worker_is_one_line_saying_to_rerun(monkeypatch):
    """A worker that dies (SIGKILL, the OOM killer) breaks the pool: one line, not BrokenProcessPool's traceback."""
    monkeypatch.setattr(part_processes, "fill_part", _exits)  # each worker exits at once, as a killed one does
    with pytest.raises(RetrieverError, match=r"^a part worker died \(killed, or out of memory\?\) while filling "
                                             r"parts; rerun the same command to resume \(finished parts are kept\), "
                                             r"or lower --part-size / --parallel-parts$"):
        part_processes.fill_in_processes([(), ()], 2, lambda: None)



def test_part_threads_are_shared_out_of_a_cgroup_cpu_quota(monkeypatch, tmp_path):
    """Under `docker run --cpus 2` on a 64-core host each part took a share of the host's 64 cores (os.cpu_count)."""
    from retriever import cgroups

    (tmp_path / "cpu.max").write_text("200000 100000")
    (tmp_path / "cgroup").write_text("0::/")
    monkeypatch.setattr(cgroups, "CGROUPS", tmp_path)
    monkeypatch.setattr(cgroups, "MEMBERSHIP", tmp_path / "cgroup")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    threads: list[int] = []
    monkeypatch.setattr(part_processes, "fill_part", lambda *job: threads.append(job[-1]))
    part_processes.fill_in_processes([()], 1, lambda: None)
    assert threads == [2]


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


def _build_with_part_workers(ondisk_shards, ondisk_corpus, output: Path, workers: int,
                             stderr) -> tuple[subprocess.Popen, set[int]]:
    """`retriever index` filling ivf-ondisk parts in 2 worker processes, once ``workers`` of them are seen (fewer
    when the build ends first)."""
    command = [sys.executable, "-m", "retriever", "index", str(ondisk_shards), "--corpus", str(ondisk_corpus),
               "-o", str(output),
               "--index-type", "ivf-ondisk", "--nlist", "8", "--part-size", "60", "--parallel-parts", "2",
               "--ondisk-codes", "flat", "--no-bm25"]
    run = subprocess.Popen(command, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL,
                           stderr=stderr, text=True)
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    while run.poll() is None and len(seen) < workers and time.monotonic() < deadline:
        seen = _children(run.pid, "spawn_main")
        time.sleep(0.02)
    return run, seen


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_part_workers_die_with_a_killed_build(ondisk_shards, ondisk_corpus, tmp_path):
    """SIGKILL of `retriever index` cannot shut its pool down: the workers must notice on their own."""
    run, workers = _build_with_part_workers(ondisk_shards, ondisk_corpus, tmp_path / "idx", 2, subprocess.DEVNULL)
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


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_a_part_worker_killed_mid_build_is_one_line(ondisk_shards, ondisk_corpus, tmp_path):
    """The tester's case: `kill -KILL` of a part worker of `retriever index` (as the OOM killer does)."""
    run, workers = _build_with_part_workers(ondisk_shards, ondisk_corpus, tmp_path / "idx", 1, subprocess.PIPE)
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
        break
    err = run.communicate(timeout=120)[1]
    assert workers, "the build ended before its part workers could be seen"
    assert run.returncode == 1 and "Traceback" not in err, err
    assert "error: a part worker died (killed, or out of memory?) while filling parts; rerun the same command" in err


def _signal_workers_as_they_come(sent: list[int], done: threading.Event) -> None:
    """SIGINT to each part worker of this process, again and again from the moment it is seen (while it starts, and
    while it fills a part) until ``done``, as Ctrl-C reaches every process of the terminal's group."""
    while not done.is_set():
        for pid in _children(os.getpid(), "spawn_main"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
                sent.append(pid)
        time.sleep(0.02)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_ctrl_c_reaching_the_part_workers_is_left_to_the_build(monkeypatch, capfd):
    """A worker took Ctrl-C itself: while it started it printed the CLI's `interrupted (Ctrl-C) while starting;
    nothing was done` (or a traceback) beside the build's own line, and while it filled a part it sent the
    KeyboardInterrupt back as the part's result. The build alone answers it, so a Ctrl-C meant only for the build's
    process group leaves the workers' parts to finish when the build does not stop."""
    monkeypatch.setattr(part_processes, "fill_part", _sleeps_its_threads)  # each job sleeps 1 s
    monkeypatch.setattr(part_processes, "usable_cores", lambda: 2)
    sent: list[int] = []
    done = threading.Event()
    sender = threading.Thread(target=_signal_workers_as_they_come, args=(sent, done))
    sender.start()
    try:
        part_processes.fill_in_processes([(), (), ()], 2, lambda: None)
    finally:
        done.set()
        sender.join()
    err = capfd.readouterr().err
    assert sent and "Traceback" not in err and "interrupted" not in err, err


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_ctrl_c_of_the_build_stops_its_part_workers_at_once(monkeypatch):
    """Ctrl-C of the build waited for every running part to be finished (``shutdown`` waits for them), which for
    large parts is minutes with nothing said; the workers are stopped instead (their unfinished files are left to the
    next build, which deletes a dead process's)."""
    monkeypatch.setattr(part_processes, "fill_part", _sleeps_its_threads)
    monkeypatch.setattr(part_processes, "usable_cores", lambda: 60)  # each job sleeps 30 s
    seen: list[set[int]] = []

    def interrupt_once_both_run() -> None:
        deadline = time.monotonic() + 30
        while len(_children(os.getpid(), "spawn_main")) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(_children(os.getpid(), "spawn_main"))
        time.sleep(1.0)  # they have imported and started sleeping
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_both_run, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        part_processes.fill_in_processes([(), ()], 2, lambda: None)
    assert time.monotonic() - started < 15 and len(seen[0]) == 2
    deadline = time.monotonic() + 5
    while any(_running(pid) for pid in seen[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in seen[0])


def test_workers_do_not_run_the_main_script_again(tmp_path, monkeypatch):
    """Spawned workers import the main module, so a library script without `if __name__ == "__main__":` ran its build
    again in each worker: 'another build of it is running', then 'a part worker died (killed, or out of memory?)'."""
    import types

    script = tmp_path / "build_script.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")  # an unguarded script's top level
    main_module = types.ModuleType("__main__")
    main_module.__file__, main_module.__spec__ = str(script), None
    monkeypatch.setitem(sys.modules, "__main__", main_module)
    part_processes.in_a_process(time.sleep, 0, died="died")  # as fill_in_processes starts its workers
    assert not (tmp_path / "ran").exists()
    assert sys.modules["__main__"] is main_module and main_module.__file__ == str(script)
