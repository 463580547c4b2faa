"""The merge of an ivf-ondisk build's parts into index.ivfdata, and FAISS's notes kept off stdout meanwhile."""
from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import faiss
import numpy as np
import pytest

from retriever import ivfmerge
from retriever.errors import RetrieverError
from retriever.ivfmerge import faiss_notes_silenced, merged_lists
from retriever.ondisk import IVFDATA_FILE, write_ondisk_index


@pytest.mark.parametrize("needed, free, said", [(150_000, 100_000, "147 KiB are needed for index.ivfdata and 97 KiB"),
                                                (3 * 2**30, 2**30 + 2**29, "3.0 GiB are needed for index.ivfdata and "
                                                                           "1.5 GiB")])
def test_the_space_a_merge_lacks_is_said_in_units_that_tell_the_two_apart(tmp_path, needed, free, said):
    """Both sizes were MiB with one decimal: a small build read "0.1 MiB are needed ... and 0.1 MiB are free"; the
    message named the hidden building folder, not the folder whose file system is full."""
    import retriever.ivfmerge as ivfmerge

    building = tmp_path / ".idx.building-7"
    building.mkdir()
    usage = shutil._ntuple_diskusage(10**12, 10**12 - free, free)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ivfmerge.shutil, "disk_usage", lambda _: usage)
        with pytest.raises(RetrieverError) as caught:
            ivfmerge.check_space(building / "index.ivfdata", needed)
    assert str(caught.value).startswith(f"{tmp_path}: {said} are free on its file system; free some space")


def test_faiss_progress_lines_reach_the_bar_and_not_stdout(capfd):
    heard: list[str] = []
    with faiss_notes_silenced(heard.append):
        os.write(1, b"merged 3 lists in 0.501 s\rmerged 7 lists in 1.002 s\r\n")
    assert merged_lists("".join(heard), 0) == 7 and merged_lists("resizing x to 10 bytes", 2) == 2
    assert capfd.readouterr().out == ""


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A trained IVF of 4 lists and two parts of 300 random vectors each."""
    folder = tmp_path_factory.mktemp("parts")
    rng = np.random.default_rng(0)
    index = faiss.index_factory(16, "IVF4,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(rng.standard_normal((400, 16), dtype=np.float32))
    faiss.write_index(index, str(folder / "trained.faiss"))
    for number in range(2):
        part = faiss.read_index(str(folder / "trained.faiss"))
        part.add_with_ids(rng.standard_normal((300, 16), dtype=np.float32), np.arange(300) + 300 * number)
        faiss.write_index(part, str(folder / f"part-{number}.faiss"))
    return folder


def _merged(parts: Path, into: Path) -> tuple[bytes, bytes]:
    into.mkdir()
    index = ivfmerge.merge_parts(parts / "trained.faiss", [str(parts / f"part-{n}.faiss") for n in range(2)],
                                 into / IVFDATA_FILE, progress=False)
    write_ondisk_index(index, into / "index.faiss")
    del index
    return (into / "index.faiss").read_bytes(), (into / IVFDATA_FILE).read_bytes()


def test_a_merge_in_a_worker_process_writes_the_same_index(parts, tmp_path, monkeypatch):
    """Large merges run in a worker process (so that Ctrl-C stops them); the index is the one merged here."""
    here = _merged(parts, tmp_path / "here")
    monkeypatch.setattr(ivfmerge, "IN_PROCESS_BYTES", 0)
    assert _merged(parts, tmp_path / "worker") == here
    assert sorted(path.name for path in (tmp_path / "worker").iterdir()) == ["index.faiss", IVFDATA_FILE]


def _slow_merge(*args) -> None:
    time.sleep(60)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the worker through /proc")
def test_ctrl_c_stops_a_large_merge_at_once(parts, tmp_path, monkeypatch):
    """FAISS's merge is one C++ call: Ctrl-C waited for its end, minutes for a large index (and the build then went
    on). The worker process merging is stopped at once instead."""
    from test_part_processes import _children, _running

    monkeypatch.setattr(ivfmerge, "IN_PROCESS_BYTES", 0)
    monkeypatch.setattr(ivfmerge, "write_merged", _slow_merge)  # the worker sleeps, as in a long merge
    seen: list[set[int]] = []

    def interrupt_once_it_runs() -> None:
        deadline = time.monotonic() + 30
        while not _children(os.getpid(), "spawn_main") and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(_children(os.getpid(), "spawn_main"))
        time.sleep(1.0)  # it has imported and started merging
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_it_runs, daemon=True).start()
    (tmp_path / "idx").mkdir()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ivfmerge.merge_parts(parts / "trained.faiss", [str(parts / "part-0.faiss")], tmp_path / "idx" / IVFDATA_FILE,
                             progress=False)
    assert time.monotonic() - started < 15 and len(seen[0]) == 1
    deadline = time.monotonic() + 5
    while any(_running(pid) for pid in seen[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in seen[0])
