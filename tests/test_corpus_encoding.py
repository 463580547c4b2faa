from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import WORDS
from retriever.corpus_encoding import encode_corpus
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.shards import check_complete, list_shards, read_shard


def write_corpus(path: Path, count: int, words: int = 60, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, words)))
            handle.write(json.dumps({"_id": f"doc{i}", "title": "", "text": text}) + "\n")
    return path


def shard_contents(folder: Path) -> list[tuple[str, list[str], bytes]]:
    result = []
    for shard in list_shards(folder):
        ids, vectors = read_shard(shard)
        result.append((shard.name, ids, vectors.tobytes()))
    return result


def encoder(model_dir) -> Encoder:
    return Encoder(EncoderSettings(model=str(model_dir)), device="cpu", dtype="fp32", batch_size=8)


def test_shards_have_fixed_rows_and_metadata(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 25)
    result = encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), shard_size=10, progress=False)
    assert (result.documents, result.encoded, result.shards) == (25, 25, 3)
    shards, metadata = check_complete(tmp_path / "out")
    assert [pq.read_metadata(s).num_rows for s in shards] == [10, 10, 5]
    assert metadata["pooling"] == "mean" and metadata["dim"] == 32 and metadata["weights_sha256"]


def test_workers_split_the_corpus(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 9)
    enc = encoder(tiny_model_dir)
    encode_corpus(corpus, tmp_path / "out", enc, shard_size=2, worker_index=0, num_workers=2, progress=False)
    with pytest.raises(RetrieverError, match="worker 1 of 2 has not finished"):
        check_complete(tmp_path / "out")
    encode_corpus(corpus, tmp_path / "out", enc, shard_size=2, worker_index=1, num_workers=2, progress=False)
    shards, _ = check_complete(tmp_path / "out")
    ids = [i for s in shards for i in read_shard(s)[0]]
    assert sorted(ids) == sorted(f"doc{i}" for i in range(9))


def test_rerun_with_other_encoder_is_refused(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 5)
    encode_corpus(corpus, tmp_path / "out", encoder(tiny_model_dir), shard_size=2, progress=False)
    other = Encoder(EncoderSettings(model=str(tiny_model_dir), pooling="cls"), device="cpu", dtype="fp32")
    with pytest.raises(RetrieverError, match="different encoder.*pooling"):
        encode_corpus(corpus, tmp_path / "out", other, shard_size=2, progress=False)


def test_sigkill_then_rerun_gives_identical_shards(tiny_model_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 3000, words=100)
    command = [sys.executable, "-m", "retriever", "encode", str(corpus), "--model", str(tiny_model_dir),
               "--dtype", "fp32", "--device", "cpu", "--batch-size", "4", "--shard-size", "100"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command + ["--output", str(tmp_path / "reference")], check=True, env=env, capture_output=True)

    killed = tmp_path / "killed"
    process = subprocess.Popen(command + ["--output", str(killed)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (killed.exists() and list_shards(killed)):
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 0.5))
    process.send_signal(signal.SIGKILL)
    process.wait()
    partial = list_shards(killed)
    assert 0 < len(partial) < 30, "the run must be killed part-way for this test to mean anything"

    subprocess.run(command + ["--output", str(killed)], check=True, env=env, capture_output=True)
    assert shard_contents(killed) == shard_contents(tmp_path / "reference")
    assert not list(killed.glob(".*tmp*")), "no temporary files are left behind"


@pytest.mark.parametrize("where", ["output-is-a-file", "parent-is-a-file"])
def test_a_shard_folder_that_cannot_be_made_is_one_error(tiny_model_dir, tmp_path, where):
    corpus = write_corpus(tmp_path / "c.jsonl", 3)
    (tmp_path / "afile").write_text("mine")
    output = tmp_path / "afile" if where == "output-is-a-file" else tmp_path / "afile" / "shards"
    expected = "afile: is a file, not a folder" if where == "output-is-a-file" else "shards: cannot be created"
    with pytest.raises(RetrieverError, match=f"{expected}.*choose another --output"):
        encode_corpus(corpus, output, encoder(tiny_model_dir), progress=False)
    assert (tmp_path / "afile").read_text() == "mine"
