"""Training under a memory limit: refused in one line with the numbers, never a crash."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from retriever.errors import RetrieverError
from retriever.faiss_index import IndexParams, new_index, train
from retriever.shards import write_shard
from retriever import train_memory

# A child process: shards, one read so Arrow's pool is mapped (as the doc store's pass maps it in a build), then an
# RLIMIT_AS of what it maps now plus HEADROOM MiB ("estimate": the estimate's, set once the sample is read; "one
# thread": the estimate's for training on one thread).
CHILD = textwrap.dedent("""
    import resource, sys
    from pathlib import Path
    import numpy as np
    import retriever.faiss_index as faiss_index
    from retriever.errors import RetrieverError
    from retriever.shards import read_shard, write_shard
    from retriever.train_memory import _status, training_bytes

    folder, headroom = Path(sys.argv[1]), sys.argv[2]
    shards = [folder / f"embeddings-w000of001-{part:05d}.parquet" for part in range(2)]
    for part, shard in enumerate(shards):
        write_shard(shard, [f"d{part}-{row}" for row in range(10_000)],
                    np.random.default_rng(part).standard_normal((10_000, 64), dtype=np.float32), {})
    read_shard(shards[0])
    index = faiss_index.new_index("IVF64,SQ8", 64, faiss_index.IndexParams())
    read = faiss_index.sample_vectors

    def limit(extra):
        resource.setrlimit(resource.RLIMIT_AS, (_status("VmSize") + extra,) * 2)

    def sampled_then_limited(*args, **kwargs):
        sample = read(*args, **kwargs)
        limit(training_bytes(index, len(sample), 64, threads=1 if headroom == "one thread" else None)[1])
        return sample

    if headroom in ("estimate", "one thread"):
        faiss_index.sample_vectors = sampled_then_limited
    else:
        limit(int(headroom) << 20)
    try:
        print("trained on", faiss_index.train(index, shards, 20_000, faiss_index.IndexParams(), "IVF64,SQ8", False))
    except RetrieverError as error:
        print("error:", error)
""")


def _train_in_child(tmp_path, headroom: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), headroom], capture_output=True, text=True,
                          timeout=120)


def test_training_under_an_address_space_limit_too_small_is_one_line_not_a_crash(tmp_path):
    """FAISS's BLAS could not map its work buffer under the limit and the process died of SIGSEGV, no message."""
    child = _train_in_child(tmp_path, "64")
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    line = child.stdout.strip()
    assert line.startswith("error: training 'IVF64,SQ8' on 20000 sampled vectors needs about ") and "\n" not in line
    assert "RLIMIT_AS" in line and "leaves 64 MiB" in line and "--train-size" in line and "--nlist" in line


def test_training_fits_in_the_address_space_its_estimate_gives(tmp_path):
    """The estimate is not short: with exactly that much address space left once the sample is read, it trains."""
    child = _train_in_child(tmp_path, "estimate")
    assert child.returncode == 0 and child.stdout.strip() == "trained on 20000", (child.stdout, child.stderr[-2000:])


def test_a_limit_that_holds_one_thread_but_not_all_trains_on_one(tmp_path):
    """The other threads' stacks and arenas were counted and the build refused (it would have trained)."""
    child = _train_in_child(tmp_path, "one thread")
    assert child.returncode == 0 and child.stdout.strip() == "trained on 20000", (child.stdout, child.stderr[-2000:])


def test_a_cgroup_or_machine_bound_names_itself_and_the_train_size_that_fits(tmp_path, monkeypatch):
    shards = [tmp_path / "embeddings-w000of001-00000.parquet"]
    write_shard(shards[0], [f"d{row}" for row in range(4000)],
                np.random.default_rng(0).standard_normal((4000, 32), dtype=np.float32), {})
    index = new_index("IVF16,Flat", 32, IndexParams())
    left = train_memory.training_bytes(index, 1000, 32, sampled=False)[0]
    monkeypatch.setattr(train_memory, "memory_left", lambda: [(left, "its cgroup's memory limit leaves", False)])
    with pytest.raises(RetrieverError) as error:
        train(index, shards, 4000, IndexParams(), "IVF16,Flat", progress=False)
    message = str(error.value)
    assert f"its cgroup's memory limit leaves {-(-left // 2**20)} MiB" in message
    fits = int(message.split("--train-size ")[2].split()[0])
    assert train_memory.training_bytes(index, fits, 32, sampled=False)[0] <= left
    assert train_memory.training_bytes(index, fits + 1, 32, sampled=False)[0] > left
    assert train(index, shards, 4000, IndexParams(train_size=fits), "IVF16,Flat", progress=False) == fits
