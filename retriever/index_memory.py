"""The memory an in-memory index (flat, HNSW, IVF: every type but ivf-ondisk) holds once filled, checked before the
corpus pass: past the memory left, the OOM killer ended the build once the doc store was written and part of the
vectors added, where training and ivf-ondisk parts are checked first (``train_memory``, ``part_memory``)."""
from __future__ import annotations

import faiss

from retriever import train_memory  # its bounds are looked up there at each call (tests replace them)
from retriever.errors import RetrieverError
from retriever.search_settings import downcast_hnsw, ivf_part


def vector_bytes(index: faiss.Index) -> int:
    """The least each vector added to ``index`` keeps in memory: its code (or its float32 values), an IVF list's id
    beside it, an HNSW node's bottom-layer links (2·M ints) and level record."""
    hnsw = downcast_hnsw(index)
    if hnsw is not None:
        return _code_bytes(faiss.downcast_index(hnsw.storage)) + 4 * int(hnsw.hnsw.nb_neighbors(0)) + 12
    ivf = ivf_part(index)
    if ivf is not None:
        return int(faiss.downcast_index(ivf).code_size) + 8
    return _code_bytes(index)


def _code_bytes(index: faiss.Index) -> int:
    try:
        return int(index.sa_code_size())
    except RuntimeError:  # a type without standalone codes: its vectors' floats at least
        return 4 * int(index.d)


def check_index_memory(index: faiss.Index, count: int, spec: str) -> None:
    """Refuse an index of ``count`` vectors whose codes alone (a lower bound: adding takes more) exceed a memory
    bound, naming the type whose lists stay on disk."""
    needed = count * vector_bytes(index)
    for left, bound, _ in train_memory.memory_left():
        if needed > left:
            raise RetrieverError(f"the {spec!r} index of {count} vectors holds about {train_memory.mib(needed)} in "
                                 f"memory, and {bound} {train_memory.mib(max(left, 0))}: use --index-type ivf-ondisk "
                                 "(its lists stay on disk) or codes of fewer bytes (ivfpq), or free memory or raise "
                                 "the limit, then rerun (the encoded shards are kept)")
