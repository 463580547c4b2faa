"""Filling an ivf-ondisk part under a memory limit: refused in one line naming the part, never a crash."""
from __future__ import annotations

import subprocess
import sys
import textwrap

# Two processes, as a build has: the first writes a shard and a trained index; the second (a part worker, which has
# not run FAISS yet) reads the shard once so Arrow's pool is mapped, sets an RLIMIT_AS of what it maps now plus
# HEADROOM MiB ("estimate": the refusal's own figure) and fills the part.
CHILD = textwrap.dedent("""
    import json, resource, sys
    from pathlib import Path
    import faiss, numpy as np
    from retriever.errors import RetrieverError
    from retriever.ivfparts import ShardSlice, fill_part
    from retriever.shards import read_shard, write_shard
    import retriever.train_memory as train_memory

    folder, headroom = Path(sys.argv[1]), sys.argv[2]
    shard = folder / "embeddings-w000of001-00000.parquet"
    if headroom == "setup":
        record = {"dim": 64, "shard": {"worker": 0, "num_workers": 1, "part": 0, "rows": 20_000, "shard_size": 20_000}}
        write_shard(shard, [f"d{row}" for row in range(20_000)],
                    np.random.default_rng(0).standard_normal((20_000, 64), dtype=np.float32), record)
        index = faiss.index_factory(64, "IVF64,SQ8", faiss.METRIC_INNER_PRODUCT)
        index.train(np.random.default_rng(1).standard_normal((5000, 64), dtype=np.float32))
        faiss.write_index(index, str(folder / "trained.faiss"))
        (folder / "trained.faiss.json").write_text(json.dumps({"files": {"trained.faiss": [0, "0" * 64]}}))
        sys.exit(0)
    read_shard(shard)
    now = train_memory._status("VmSize")
    if headroom == "estimate":
        real, train_memory.memory_left = train_memory.memory_left, lambda: [(0, "", True)]
        try:
            fill_part(str(folder / "trained.faiss"), [ShardSlice(str(shard), 0, 1)], str(folder / "part.faiss"))
        except RetrieverError as error:
            headroom = str(error).split("needs about ")[1].split(" MiB")[0]
        train_memory.memory_left = real
    resource.setrlimit(resource.RLIMIT_AS, (now + (int(headroom) << 20),) * 2)
    try:
        print("added", fill_part(str(folder / "trained.faiss"), [ShardSlice(str(shard), 0, 1)],
                                 str(folder / "part.faiss")))
    except RetrieverError as error:
        print("error:", error)
""")


def _fill_in_child(folder, headroom: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(folder), headroom], capture_output=True, text=True,
                          timeout=120)


def test_a_part_the_address_space_cannot_hold_is_refused_naming_it_not_a_crash(tmp_path):
    """The worker died of SIGSEGV in FAISS's BLAS, which the build could only call 'a part worker died'."""
    assert _fill_in_child(tmp_path, "setup").returncode == 0
    child = _fill_in_child(tmp_path, "64")
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    line = child.stdout.strip()
    assert line.startswith(f"error: {tmp_path / 'part.faiss'}: filling this part of 20000 vectors needs about ")
    assert "leaves 64 MiB" in line and "--part-size" in line and "\n" not in line
    assert not (tmp_path / "part.faiss").exists()


def test_a_part_fills_in_the_address_space_its_estimate_gives(tmp_path):
    assert _fill_in_child(tmp_path, "setup").returncode == 0
    child = _fill_in_child(tmp_path, "estimate")
    assert child.returncode == 0 and child.stdout.strip() == "added 20000", (child.stdout, child.stderr[-2000:])
