"""Item 10 of issue #10: a SIGKILL during `--overwrite` leaves the old index or the new one at the path, and the
next build cleans up what the killed one left."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retriever.encoder import Encoder, EncoderSettings
from retriever.folders import PAUSE_ENV, clean_stale
from retriever.indexing import build_index, encode_and_index
from retriever.pid_names import host_tag
from retriever.searching import Searcher

# Runs the CLI with the atomic exchange switched off, as on a platform without renameat2(RENAME_EXCHANGE).
WITHOUT_EXCHANGE = ("import retriever.folders as f; f._exchange = lambda a, b: False; "
                    "from retriever.cli import main; main()")


def _index_command(shards: Path, corpus: Path, output: Path, index_type: str) -> list[str]:
    return ["index", str(shards), "--corpus", str(corpus), "--output", str(output), "--index-type", index_type,
            "--overwrite"]


def _kill_at_pause(prefix: list[str], argv: list[str], marker: Path) -> int:
    env = {**os.environ, PAUSE_ENV: str(marker), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(prefix + argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not marker.exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert marker.exists(), process.stderr.read().decode()
    process.send_signal(signal.SIGKILL)
    process.wait()
    return process.pid


@pytest.fixture()
def first_build(tiny_beir, tiny_model_dir, tmp_path) -> tuple[Path, Path]:
    output = tmp_path / "indexes" / "idx"
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, output, encoder, progress=False)
    return output, output.with_name("idx.shards")


def _index_type(output: Path) -> str:
    return json.loads((output / "manifest.json").read_text())["index"]["type"]


def test_kill_after_the_atomic_swap_leaves_the_new_index(first_build, tiny_beir, tmp_path):
    output, shards = first_build
    pid = _kill_at_pause([sys.executable, "-m", "retriever"], _index_command(shards, tiny_beir, output, "hnsw"),
                         tmp_path / "paused")
    assert (tmp_path / "paused").read_text() == "exchanged"
    assert _index_type(output) == "hnsw"
    Searcher(output, device="cpu", dtype="fp32")  # whole: passes the open checks
    left = output.with_name(f".idx.building-{pid}@{host_tag()}")
    assert left.is_dir() and _index_type(left) == "flat"  # the old version, not yet deleted when killed
    build_index(shards, tiny_beir, output, overwrite=True, progress=False)
    assert sorted(p.name for p in output.parent.iterdir()) == ["idx", "idx.shards"]


def test_kill_between_fallback_renames_is_recovered(first_build, tiny_beir, tmp_path):
    output, shards = first_build
    pid = _kill_at_pause([sys.executable, "-c", WITHOUT_EXCHANGE],
                         _index_command(shards, tiny_beir, output, "hnsw"), tmp_path / "paused")
    assert (tmp_path / "paused").read_text() == "moved-old-aside"
    writer = f"{pid}@{host_tag()}"
    assert not output.exists() and output.with_name(f".idx.old-{writer}").is_dir()
    assert sorted(clean_stale(output)) == [
        f"deleted {output.with_name(f'.idx.building-{writer}')}, left by a killed build",
        f"restored {output} from .idx.old-{writer}, left by an interrupted --overwrite"]
    assert _index_type(output) == "flat"
    Searcher(output, device="cpu", dtype="fp32")
    assert sorted(p.name for p in output.parent.iterdir()) == ["idx", "idx.shards"]


def test_stale_folder_of_a_live_process_is_kept(tmp_path):
    output = tmp_path / "idx"
    mine = tmp_path / f".idx.building-{os.getpid()}@{host_tag()}"
    mine.mkdir()
    assert clean_stale(output) == [] and mine.is_dir()
