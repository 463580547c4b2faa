"""The memory FAISS training takes, checked before the sample is read: under an address-space limit (`ulimit -v`,
``RLIMIT_AS``) FAISS's BLAS crashes the process (SIGSEGV, no message) when its work buffer cannot be mapped, and a
cgroup or the machine running out kills it; both lose the encoded work's build with nothing said.

What training allocates beyond the sample (FAISS's ``IndexPreTransform::train``, ``Clustering::train_encoded`` and
``IndexIVF::train``):
- a pre-transform's phase (PCA, OPQ, ...): its training (an OPQ retrains a product quantiser fifty times on copies
  of up to 65,536 points, with a table of distances per point), then the transformed copy, which the index behind
  it trains on, so it counts in every later phase; its products over the whole sample touch OpenBLAS's buffer,
  which then counts in resident memory too;
- the k-means phase: a copy of ``k × max_points_per_centroid`` points when the sample is larger, their assignment
  (an int64 and a float each) and a permutation (int32), the centroids twice (the list and the flat index), and
  the blocks of distances its BLAS search computes (``distance_compute_blas_query_bs × …_database_bs`` floats);
- then the codes' phase: the residual of every point the encoder trains on (a copy of that many points, capped at
  ``train_encoder_num_vectors``), their assignment, the same distance blocks, and the encoder's own training (a
  product quantiser's k-means per sub-vector, a scalar quantiser's transposed copy);
- a little for small allocations and the freed blocks glibc keeps; OpenBLAS's work buffer, mapped on its first
  product and kept; and, per FAISS thread beyond the first, a stack. Under an address-space limit glibc's malloc
  arenas are capped at one (``cap_arenas``): each thread's arena otherwise reserves 64 MiB (twice that while it is
  made) of address space it barely touches, which decided whether a build fit, and a malloc failing in OpenBLAS's
  threaded product ends the process ("OpenBLAS: malloc failed in gemm_driver"). Where they cannot be capped (not
  glibc), two arenas per thread are counted, as measured.
"""
from __future__ import annotations

import ctypes
import resource
from pathlib import Path

import faiss

from retriever.cgroups import controller_folders, read_file
from retriever.errors import RetrieverError
from retriever.index_type_settings import fewer_lists
from retriever.search_settings import ivf_part

MIB = 1 << 20
BLAS_BUFFER = 128 * MIB  # OpenBLAS's BUFFER_SIZE on x86-64 (32 << 22), mapped whole by its first sgemm
SMALL = 8 * MIB  # what the phases leave out: small allocations, and freed blocks glibc keeps in its heap
THREAD_ARENA = 64 * MIB  # glibc's HEAP_MAX_SIZE: the address space each thread's malloc arena reserves
UNLIMITED_STACK = 32 * MIB  # glibc's default thread stack when RLIMIT_STACK is unlimited
M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)
_arenas_capped = False


def cap_arenas() -> bool:
    """Cap glibc's malloc arenas at one, so threads started from now on (FAISS's, OpenBLAS's) share the main arena
    instead of each reserving ``THREAD_ARENA`` of address space; called only under an address-space limit, where
    that reservation is what runs out (threads already running keep theirs). Whether they are capped."""
    global _arenas_capped
    if not _arenas_capped:
        try:
            _arenas_capped = ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1) == 1
        except (OSError, AttributeError):  # not glibc: the arenas are counted instead
            pass
    return _arenas_capped


def training_bytes(index: faiss.Index, count: int, dim: int, sampled: bool = True,
                   threads: int | None = None) -> tuple[int, int]:
    """(resident, address space) bytes that training ``index`` on a sample of ``count`` vectors takes beyond what is
    mapped now, reading the sample included unless it was ``sampled`` (its pieces, then the joined copy; not what
    Arrow's pool keeps of reading it); the address space adds what is mapped but barely touched (the BLAS buffer,
    thread stacks and arenas)."""
    sample = 4 * count * dim
    block = 4 * faiss.cvar.distance_compute_blas_query_bs * faiss.cvar.distance_compute_blas_database_bs
    phases, kept, touching = _transform_phases(index, count, block)
    ivf = ivf_part(index)
    if ivf is not None:
        ivf = faiss.downcast_index(ivf)  # a view: ``index`` owns it
        width, lists, most = int(ivf.d), int(ivf.nlist), int(ivf.cp.max_points_per_centroid) * int(ivf.nlist)
        clustered = min(count, most)
        copy = 4 * most * width + 4 * count if count > most else 0
        phases.append(kept + copy + 16 * clustered + 8 * lists * width + block)
        cap = int(ivf.train_encoder_num_vectors())
        encoded = min(count, cap) if cap > 0 else count
        residuals = 4 * encoded * width + 8 * encoded if ivf.by_residual else 0
        phases.append(kept + (4 * encoded * width if encoded < count else 0) + residuals
                      + max(block, _encoder_training(ivf, encoded)))  # the assignment's blocks are freed by then
    else:
        phases.append(kept + block)
    mapped = SMALL + (max(phases) if sampled else sample + max(sample, *phases))
    touched = SMALL + BLAS_BUFFER + touching + (0 if sampled else sample) if touching else 0  # mapped already
    return max(mapped, touched), mapped + fixed_address_space(threads)


def _transform_phases(index: faiss.Index, count: int, block: int) -> tuple[list[int], int, int]:
    """The bytes of each step of a pre-transform chain (PCA, OPQ, ...): training it on the copy the step before
    made, then applying it, which makes the next copy while that one is alive (``IndexPreTransform::train``); the
    last copy, which the index behind the chain trains on; and the largest phase with a BLAS product over the whole
    sample (applying a transform, training an OPQ), which touches OpenBLAS's buffer well beyond what FAISS's
    blocked products do, in resident memory (measured: most of it, on two threads)."""
    outer = faiss.downcast_index(index)
    if not isinstance(outer, faiss.IndexPreTransform):
        return [], 0, 0
    phases, before, touching = [], 0, 0
    for step in range(outer.chain.size()):
        transform = faiss.downcast_VectorTransform(outer.chain.at(step))  # a view: ``index`` owns it
        after = 4 * count * int(transform.d_out)
        phases += [before + _transform_training(transform, count) + block, before + after]
        touching = max(touching, before + after, phases[-2] if isinstance(transform, faiss.OPQMatrix) else 0)
        before = after
    return phases, before, touching


def _transform_training(transform: faiss.VectorTransform, count: int) -> int:
    """What training one transform allocates (``PCAMatrix::train``, ``OPQMatrix::train``): a PCA its covariance and
    eigen-decomposition (or, on fewer points than dimensions, their Gram matrix); an OPQ its copies of the
    (sub)sample, centred, rotated and reconstructed, and the product quantiser it retrains each iteration, whose
    encoding takes a table of distances per point when sub-vectors have 16 dimensions or more."""
    d_in, d_out = int(transform.d_in), int(transform.d_out)
    if isinstance(transform, faiss.PCAMatrix):
        points = min(count, int(transform.max_points_per_d) * d_in)
        copy = 4 * points * d_in if points < count else 0
        return copy + (32 * d_in * d_in if points >= d_in else 8 * points * d_in + 32 * points * points)
    if isinstance(transform, faiss.OPQMatrix):
        points, width, parts = min(count, int(transform.max_train_points)), max(d_in, d_out), int(transform.M)
        copy = 4 * points * d_in if points < count else 0
        sub = d_out // parts
        encoding = 4 * points * 256 * parts if sub >= 16 else 0
        return (copy + 8 * points * (width + d_out) + 20 * width * width + parts * points
                + max(encoding, _pq_training(sub, 256, points, 1000)))
    return 8 * count * (d_in + d_out) + 32 * d_in * d_in  # others (ITQ, a rotation, ...): a few copies, a matrix


def _encoder_training(ivf: faiss.IndexIVF, count: int) -> int:
    """What training an IVF's codes on ``count`` vectors allocates: a product quantiser's k-means per sub-vector and
    its precomputed table (L2 residuals only), or a scalar quantiser's transposed copy (assumed of other codes)."""
    if isinstance(ivf, faiss.IndexIVFPQ):
        pq = ivf.pq
        table = 4 * int(ivf.nlist) * int(pq.M) * int(pq.ksub) if (
            ivf.by_residual and ivf.metric_type == faiss.METRIC_L2 and ivf.use_precomputed_table != -1) else 0
        return _pq_training(int(pq.dsub), int(pq.ksub), count, int(pq.cp.max_points_per_centroid)) + table
    return 0 if isinstance(ivf, faiss.IndexIVFFlat) else 4 * count * int(ivf.d)


def _pq_training(sub: int, centroids: int, count: int, per_centroid: int) -> int:
    """A product quantiser's training, one sub-vector at a time: the slice, the k-means sample when the slice is
    larger (and its permutation), their assignment, the centroids and the blocks of distances to them."""
    most = centroids * per_centroid
    sampled = 4 * most * sub + 4 * count if count > most else 0
    blocks = 4 * faiss.cvar.distance_compute_blas_query_bs * min(faiss.cvar.distance_compute_blas_database_bs,
                                                                 centroids)
    return 4 * count * sub + sampled + 16 * min(count, most) + 8 * centroids * sub + blocks


def memory_left() -> list[tuple[int, str, bool]]:
    """(bytes left, what bounds them, whether it bounds address space rather than resident memory) for each bound
    that applies: the process's RLIMIT_AS past what it maps now, the cgroup's limit past its usage, and the
    machine's available memory and free swap."""
    bounds = []
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        bounds.append((soft - _status("VmSize"), "the process's address-space limit (`ulimit -v`, RLIMIT_AS) leaves",
                       True))
    cgroup = _cgroup_left()
    if cgroup is not None:
        bounds.append((cgroup, "its cgroup's memory limit leaves", False))
    meminfo = _fields(Path("/proc/meminfo"))
    if "MemAvailable" in meminfo:
        bounds.append((meminfo["MemAvailable"] + meminfo.get("SwapFree", 0), "the machine has available", False))
    return bounds


def _status(name: str) -> int:
    return _fields(Path("/proc/self/status")).get(name, 0)


def _fields(path: Path) -> dict[str, int]:
    """A /proc file's ``Name: N kB`` lines, in bytes."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    values = {}
    for line in lines:
        name, _, rest = line.partition(":")
        words = rest.split()
        if len(words) == 2 and words[1] == "kB" and words[0].isdigit():
            values[name] = int(words[0]) * 1024
    return values


def _cgroup_left() -> int | None:
    """The least memory a limit on the process's cgroup, or one above it, allows past that cgroup's usage (v2
    ``memory.max`` and ``memory.current``, v1 ``memory.limit_in_bytes`` and ``memory.usage_in_bytes``)."""
    left = []
    for folder in controller_folders("memory"):
        for limit_name, usage_name in (("memory.max", "memory.current"),
                                       ("memory.limit_in_bytes", "memory.usage_in_bytes")):
            limit, usage = (read_file(folder / name).strip() for name in (limit_name, usage_name))
            if limit.isdigit() and usage.isdigit() and int(limit) < 1 << 60:  # v1 writes no limit as a huge number
                left.append(int(limit) - int(usage))
    return min(left) if left else None


def check_training_memory(index: faiss.Index, count: int, dim: int, spec: str, sampled: bool, *,
                          index_type: str) -> int:
    """The FAISS threads to train on: FAISS's count, or one when only that fits an address-space limit (the other
    threads' stacks and arenas are what does not fit; the index trained is the same). Refuse a training that does
    not fit even so, saying how much it needs, how much there is and the largest --train-size that fits: before
    the sample is read (what it takes at least), and again once it is in memory. ``index_type``: as given, to say
    how to ask for fewer lists (--nlist, or the factory string's own number)."""
    threads = max(1, faiss.omp_get_max_threads())
    for left, bound, address in memory_left():
        if address:
            cap_arenas()
        if address and training_bytes(index, count, dim, sampled, threads)[1] > left:
            threads = 1
        needed = training_bytes(index, count, dim, sampled, threads)[address]
        if needed <= left:
            continue
        fits = _largest_fitting(index, count, dim, address, left, sampled)
        lists = ivf_part(index)
        least = int(faiss.downcast_index(lists).nlist) if lists is not None else 1
        advice = f"--train-size {fits} fits" if fits >= least else "no --train-size fits"
        fewer = fewer_lists(index_type) if lists is not None else None
        raise RetrieverError(f"training {spec!r} on {count} sampled vectors needs about {mib(needed)} of memory and "
                             f"{bound} {mib(max(left, 0))}: use a smaller --train-size ({advice})"
                             f"{' or ' + fewer if fewer else ''}, or free memory or raise the limit, then rerun the "
                             "same command (the encoded shards are kept)")
    return threads


def fixed_address_space(threads: int | None = None) -> int:
    """What a FAISS product maps whatever its size, on ``threads`` threads (FAISS's count if None): OpenBLAS's
    buffer, then each other thread's stack, and its arenas unless they are capped (above)."""
    threads = max(1, threads or faiss.omp_get_max_threads())
    stack = resource.getrlimit(resource.RLIMIT_STACK)[0]
    stack = UNLIMITED_STACK if stack == resource.RLIM_INFINITY else stack
    arenas = 0 if _arenas_capped or threads == 1 else threads * THREAD_ARENA
    return BLAS_BUFFER + (threads - 1) * stack + arenas


def _largest_fitting(index: faiss.Index, count: int, dim: int, address: bool, left: int, sampled: bool) -> int:
    """The largest sample (0 if none) whose training fits in ``left`` bytes (the need grows with the sample)."""
    low, high = 0, count
    while low < high:
        middle = (low + high + 1) // 2
        if training_bytes(index, middle, dim, sampled, 1)[address] <= left:
            low = middle
        else:
            high = middle - 1
    return low


def mib(count: int) -> str:
    return f"{-(-count // MIB)} MiB"
