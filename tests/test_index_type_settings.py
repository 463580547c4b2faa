"""The advice on fewer IVF lists names what the index type takes: --nlist is refused with a factory string."""
import numpy as np
import pytest

from retriever import faiss_index, train_memory
from retriever.errors import RetrieverError
from retriever.faiss_index import IndexParams, new_index
from retriever.index_checks import check_trainable
from retriever.shards import write_shard

IN_THE_STRING = "fewer lists (a smaller number after 'IVF' in --index-type)"


def _refusals(tmp_path, monkeypatch, index_type: str, spec: str) -> list[str]:
    """The trainability, training-memory and FAISS-training refusals of ``index_type`` (built as ``spec``)."""
    messages = []
    with pytest.raises(RetrieverError) as error:  # ivfpq's codes, sized to the one vector, need 2: more lists than that
        check_trainable(IndexParams(index_type, **({"nlist": 64} if index_type == "ivfpq" else {})), 32, 1)
    messages.append(str(error.value))
    monkeypatch.setattr(train_memory, "memory_left", lambda: [(1, "its cgroup's memory limit leaves", False)])
    with pytest.raises(RetrieverError) as error:
        train_memory.check_training_memory(new_index(spec, 32, IndexParams()), 500, 32, spec, False,
                                           index_type=index_type)
    messages.append(str(error.value))
    shard = tmp_path / "embeddings-w000of001-00000.parquet"
    write_shard(shard, [f"d{row}" for row in range(20)], np.random.default_rng(0).random((20, 32), dtype=np.float32), {})
    monkeypatch.setattr(faiss_index, "check_training_memory", lambda *args, **kwargs: 1)
    with pytest.raises(RetrieverError) as error:  # 20 vectors for 64 lists: FAISS refuses
        faiss_index.train(new_index(spec, 32, IndexParams()), [shard], 20, IndexParams(index_type), spec,
                          progress=False)
    return messages + [str(error.value)]


def test_a_factory_string_is_told_to_lower_its_own_ivf_number_not_to_pass_nlist(tmp_path, monkeypatch):
    """'IVF64,Flat' on too few vectors or too little memory was told to use 'fewer lists (--nlist)', a flag refused
    with a factory string; ivfpq keeps --nlist."""
    for message in _refusals(tmp_path, monkeypatch, "IVF64,Flat", "IVF64,Flat"):
        assert IN_THE_STRING in message and "--nlist" not in message, message
    for message in _refusals(tmp_path, monkeypatch, "ivfpq", "IVF64,PQ4"):
        assert "fewer lists (--nlist)" in message, message
