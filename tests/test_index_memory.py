import pytest

from retriever import train_memory
from retriever.corpus_encoding import encode_corpus
from retriever.encoder import Encoder
from retriever.encoder_settings import EncoderSettings
from retriever.errors import RetrieverError
from retriever.faiss_index import IndexParams
from retriever.indexing import build_index


@pytest.mark.parametrize("index_type, per_vector", [("flat", 128), ("hnsw", 128 + 256)])
def test_an_index_the_memory_cannot_hold_is_refused_before_the_corpus_pass(tiny_beir, tiny_model_dir, tmp_path,
                                                                          monkeypatch, index_type, per_vector):
    """An in-memory index larger than the memory left was built until the OOM killer ended the process (after the
    doc store was written, the shards half added), where training and ivf-ondisk parts are checked first."""
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_corpus(tiny_beir, tmp_path / "shards", encoder, shard_size=5, progress=False)
    monkeypatch.setattr("retriever.indexing.iter_documents", lambda *a, **k: pytest.fail("read the corpus first"))
    monkeypatch.setattr(train_memory, "memory_left", lambda: [(12 * per_vector - 1, "the machine has available",
                                                               False)])
    with pytest.raises(RetrieverError, match=r"holds about 1 MiB in memory, and the machine has available 1 MiB: "
                                             r"use --index-type ivf-ondisk \(its lists stay on disk\)"):
        build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", IndexParams(index_type), progress=False,
                    lexical=None)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["shards", "tiny-beir"]
