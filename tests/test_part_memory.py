import numpy as np
import pytest

from retriever import part_memory, train_memory
from retriever.errors import RetrieverError
from retriever.faiss_index import IndexParams, new_index


def test_a_part_that_is_one_shard_too_large_names_the_shard_size_not_the_part_size(monkeypatch):
    """A part is at least one whole shard: when that shard alone does not fit, the refusal said 'use a smaller
    --part-size', which cannot help; it names --shard-size (encoding again) instead."""
    index = new_index("IVF4,SQ8", 32, IndexParams("IVF4,SQ8"))
    index.train(np.random.default_rng(0).standard_normal((200, 32), dtype=np.float32))
    monkeypatch.setattr(train_memory, "memory_left", lambda: [(30 << 20, "the machine has available", False)])
    with pytest.raises(RetrieverError, match=r"one shard of 50000 vectors alone does not fit, which --part-size "
                                             r"cannot split: encode the corpus again with a smaller --shard-size"):
        part_memory.check_filling_memory(index, 50_000, 50_000, "part.faiss")
    with pytest.raises(RetrieverError, match=r"use a smaller --part-size"):  # many small shards: it helps there
        part_memory.check_filling_memory(index, 10, 500_000, "part.faiss")
