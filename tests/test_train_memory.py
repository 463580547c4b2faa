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
from retriever import part_memory, train_memory

# A child process on two FAISS threads: shards, one read so Arrow's pool is mapped (as the doc store's pass maps it in
# a build), then an RLIMIT_AS of what it maps now plus HEADROOM MiB ("estimate": the estimate's, set once the sample
# is read; "one thread": the estimate's for training on one thread; "two threads": the estimate's for two, with the
# malloc arenas capped as training caps them under a limit), training SPEC; it prints the threads it trains on.
CHILD = textwrap.dedent("""
    import resource, sys
    from pathlib import Path
    import faiss, numpy as np
    import retriever.faiss_index as faiss_index
    from retriever.errors import RetrieverError
    from retriever.shards import read_shard, write_shard
    from retriever.train_memory import _status, cap_arenas, training_bytes

    folder, headroom, spec, rows = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    faiss.omp_set_num_threads(2)
    checked = faiss_index.check_training_memory
    faiss_index.check_training_memory = lambda *a, **k: print("threads", threads := checked(*a, **k)) or threads
    shards = [folder / f"embeddings-w000of001-{part:05d}.parquet" for part in range(2)]
    for part, shard in enumerate(shards):
        write_shard(shard, [f"d{part}-{row}" for row in range(rows)],
                    np.random.default_rng(part).standard_normal((rows, 64), dtype=np.float32), {})
    read_shard(shards[0])
    index = faiss_index.new_index(spec, 64, faiss_index.IndexParams())
    read = faiss_index.sample_vectors

    def limit(extra):
        resource.setrlimit(resource.RLIMIT_AS, (_status("VmSize") + extra,) * 2)

    def sampled_then_limited(*args, **kwargs):
        sample = read(*args, **kwargs)
        if headroom == "two threads":
            assert cap_arenas()
        limit(training_bytes(index, len(sample), 64, threads=1 if headroom == "one thread" else None)[1])
        return sample

    if headroom in ("estimate", "one thread", "two threads"):
        faiss_index.sample_vectors = sampled_then_limited
    else:
        limit(int(headroom) << 20)
    try:
        print("trained on", faiss_index.train(index, shards, 2 * rows, faiss_index.IndexParams(spec), spec, False))
    except RetrieverError as error:
        print("error:", error)
""")


def _train_in_child(tmp_path, headroom: str, spec: str = "IVF64,SQ8",
                    rows: int = 10_000) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), headroom, spec, str(rows)],
                          capture_output=True, text=True, timeout=300)


def _trained(child: subprocess.CompletedProcess, *threads: str, count: str = "20000") -> bool:
    """Whether the child trained on all ``count`` vectors, its two checks choosing ``threads``."""
    return child.returncode == 0 and child.stdout.split() == [
        word for number in threads for word in ("threads", number)] + ["trained", "on", count]


def test_training_under_an_address_space_limit_too_small_is_one_line_not_a_crash(tmp_path):
    """FAISS's BLAS could not map its work buffer under the limit and the process died of SIGSEGV, no message."""
    child = _train_in_child(tmp_path, "64")
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    line = child.stdout.strip().splitlines()[-1]
    assert line.startswith("error: training 'IVF64,SQ8' on 20000 sampled vectors needs about ") and "\n" not in line
    assert "RLIMIT_AS" in line and "leaves 64 MiB" in line and "--train-size" in line
    assert "fewer lists (a smaller number after 'IVF' in --index-type)" in line  # --nlist is refused with this type


def test_training_fits_in_the_address_space_its_estimate_gives(tmp_path):
    """The estimate is not short: with exactly that much address space left once the sample is read, it trains."""
    child = _train_in_child(tmp_path, "estimate")
    assert _trained(child, "2", "2"), (child.stdout, child.stderr[-2000:])


def test_a_limit_that_holds_one_thread_but_not_all_trains_on_one(tmp_path):
    """The other threads' stacks and arenas were counted and the build refused (it would have trained)."""
    child = _train_in_child(tmp_path, "one thread")
    assert _trained(child, "2", "1"), (child.stdout, child.stderr[-2000:])


def test_a_limit_that_holds_two_threads_stacks_trains_on_both_its_arenas_capped(tmp_path):
    """Each thread's malloc arena reserved 64 MiB (twice that while made) of address space it barely touches, and
    the estimate counted two per thread: a limit with room for the threads' stacks but not their arenas trained on
    one thread. Arenas are capped under a limit now, and the estimate counts stacks alone."""
    child = _train_in_child(tmp_path, "two threads")
    assert _trained(child, "2", "2"), (child.stdout, child.stderr[-2000:])


@pytest.mark.parametrize("spec, rows", [("OPQ4,IVF16,PQ4", 2500), ("PCA32,IVF64,SQ8", 10_000)])
def test_a_pre_transforms_training_fits_in_the_address_space_its_estimate_gives(tmp_path, spec, rows):
    """An OPQ pre-transform's training (a product quantiser retrained fifty times, with a table of distances per
    point) was left out of the estimate, which allowed a fraction of what it maps: under that limit FAISS failed
    (std::bad_alloc, a traceback). A PCA's index trains on its narrower copy, which the estimate now counts."""
    child = _train_in_child(tmp_path, "one thread", spec, rows=rows)
    assert _trained(child, "2", "1", count=str(2 * rows)), (child.stdout, child.stderr[-2000:])


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
    assert train(index, shards, 4000, IndexParams("IVF16,Flat", train_size=fits), "IVF16,Flat", progress=False) == fits


RESIDENT = textwrap.dedent("""
    import faiss, numpy as np
    from retriever.faiss_index import IndexParams, new_index
    from retriever.train_memory import _status, training_bytes

    faiss.omp_set_num_threads(2)
    index = new_index("PCA64,IVF16,Flat", 384, IndexParams())
    sample = np.random.default_rng(0).standard_normal((100_000, 384), dtype=np.float32)
    estimate, before = training_bytes(index, len(sample), 384)[0], _status("VmRSS")
    index.train(sample)
    print(_status("VmHWM") - before, estimate)
""")


def test_applying_a_pre_transform_on_two_threads_stays_within_the_resident_estimate():
    """Applying a PCA to the whole sample is one BLAS product over every point, which on two threads touched some
    70 MiB of OpenBLAS's buffer (mapped, so counted in address space, but not in resident memory): the resident
    estimate, which a cgroup's or the machine's memory is checked against, fell short by that."""
    child = subprocess.run([sys.executable, "-c", RESIDENT], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    peak, estimate = map(int, child.stdout.split())
    assert peak <= estimate, (peak >> 20, estimate >> 20)


def test_parts_filled_at_once_share_the_memory_left(monkeypatch):
    """Each part worker checked its own need against all the memory left, so --parallel-parts 64 passed where 64
    parts at once could not fit and the OOM killer ended them ('a part worker died'). The resident bounds are
    shared among the workers filling at once; an address-space limit is each process's own."""
    index = new_index("IVF4,SQ8", 32, IndexParams("IVF4,SQ8"))
    index.train(np.random.default_rng(0).standard_normal((200, 32), dtype=np.float32))
    need = []
    monkeypatch.setattr(train_memory, "memory_left", lambda: need)
    need.append((10**12, "the machine has available", False))
    part_memory.check_filling_memory(index, 1000, 50_000, "part.faiss", sharing=2)
    resident = 10**12 - 1
    while True:  # the least that holds one part alone
        need[:] = [(resident, "the machine has available", False)]
        try:
            part_memory.check_filling_memory(index, 1000, 50_000, "part.faiss")
        except RetrieverError:
            break
        resident //= 2
    need[:] = [(resident * 2 + 2, "the machine has available", False)]
    part_memory.check_filling_memory(index, 1000, 50_000, "part.faiss")
    with pytest.raises(RetrieverError, match=r"part\.faiss: filling this part of 50000 vectors needs about .* and 3 "
                                             r"parts are filled at once \(--parallel-parts\)"):
        part_memory.check_filling_memory(index, 1000, 50_000, "part.faiss", sharing=3)
    need[:] = [(resident * 2 + 2, "the process's address-space limit (`ulimit -v`, RLIMIT_AS) leaves", True)]
    monkeypatch.setattr(train_memory, "fixed_address_space", lambda: 0)
    part_memory.check_filling_memory(index, 1000, 50_000, "part.faiss", sharing=3)


@pytest.mark.parametrize("membership, files, left", [
    ("0::/kubepods/pod1/c1\n", {"kubepods/pod1/memory.max": "1000000", "kubepods/pod1/memory.current": "400000",
                                "kubepods/pod1/c1/memory.max": "max", "kubepods/pod1/c1/memory.current": "300000"},
     600000),  # the pod's limit binds its container, whose own is "max"
    ("4:memory:/docker/abc\n", {"memory/docker/abc/memory.limit_in_bytes": "2000000",
                                "memory/docker/abc/memory.usage_in_bytes": "500000",
                                "memory/memory.limit_in_bytes": str(1 << 62), "memory/memory.usage_in_bytes": "9"},
     1500000),  # v1; the root's "no limit" is a huge number
    ("0::/\n", {"memory.max": "max", "memory.current": "5"}, None), ("garbled\n", {}, None),
])
def test_a_cgroup_memory_limit_is_read_up_the_hierarchy(tmp_path, monkeypatch, membership, files, left):
    """Only the process's own cgroup and the mount's root were read: a limit on a parent (a pod's, with its
    containers' own at "max") was not seen, and the parts and FAISS trainings it bounds ran into the OOM killer."""
    from retriever import cgroups

    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    (tmp_path / "cgroup").write_text(membership)
    monkeypatch.setattr(cgroups, "CGROUPS", tmp_path / "fs")
    monkeypatch.setattr(cgroups, "MEMBERSHIP", tmp_path / "cgroup")
    assert train_memory._cgroup_left() == left
