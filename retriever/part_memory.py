"""The memory filling an ivf-ondisk part takes, checked before its first shard is read: a part worker under
`ulimit -v` died of SIGSEGV, and parts filled at once ran the machine out of memory."""
from __future__ import annotations

import faiss

from retriever import train_memory  # its bounds are looked up there at each call (tests replace them)
from retriever.errors import RetrieverError
from retriever.train_memory import mib

READ_BUFFER = 1 << 22  # the buffer ``shards.read_shard`` reads a shard's Parquet through


def check_filling_memory(index: faiss.Index, shard_rows: int, part_rows: int, output: str, sharing: int = 1,
                         sharing_flag: str = "--parallel-parts") -> None:
    """Refuse, before its first shard is read, a part whose filling the memory left cannot hold: the largest shard
    read whole through Arrow's read buffer, with its labels and the copy of the rows it keeps, its coarse
    assignment (FAISS adds in blocks of 65,536: their list numbers and the distance blocks, with the BLAS buffer)
    and the part's lists, which may double as they grow (a worker under `ulimit -v` died of SIGSEGV, said as 'a
    part worker died'). The ``sharing`` workers filling parts at once on one machine (``sharing_flag`` sets how many)
    share the resident bounds (each passed alone, and together the OOM killer ended them); an address-space limit is
    each process's own."""
    resident = _filling_bytes(index, shard_rows, part_rows)
    for left, bound, address in train_memory.memory_left():
        fixed = train_memory.fixed_address_space() if address else 0
        shared = 1 if address else max(1, sharing)
        if (resident + fixed) * shared <= left:
            continue
        together = f", and {shared} parts are filled at once ({sharing_flag})," if shared > 1 else ""
        fewer = f" (or fewer {sharing_flag})" if shared > 1 else ""
        if (_filling_bytes(index, shard_rows, shard_rows) + fixed) * shared > left:  # a part is one shard at least
            advice = (f"a part holds whole shards, and one shard of {shard_rows} vectors alone does not fit, which "
                      f"--part-size cannot split: encode the corpus again with a smaller --shard-size{fewer}, or "
                      "free memory or raise the limit")
        else:
            advice = (f"use a smaller --part-size{fewer}, or free memory or raise the limit, then rerun the same "
                      "command")
        raise RetrieverError(f"{output}: filling this part of {part_rows} vectors needs about "
                             f"{mib(resident + fixed)} of memory{together} and {bound} {mib(max(left, 0))}: {advice} "
                             "(finished parts are kept)")


def _filling_bytes(index: faiss.Index, shard_rows: int, part_rows: int) -> int:
    """What filling a part of ``part_rows`` vectors whose largest shard holds ``shard_rows`` keeps resident."""
    block = 4 * faiss.cvar.distance_compute_blas_query_bs * faiss.cvar.distance_compute_blas_database_bs
    return (READ_BUFFER + 8 * shard_rows * index.d + 16 * shard_rows + 8 * min(shard_rows, 65_536) + block
            + 2 * part_rows * (int(faiss.extract_index_ivf(index).code_size) + 8))
