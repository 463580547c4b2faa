import json

import pytest

from retriever.encoder import Encoder
from retriever.encoder_settings import EncoderSettings
from retriever.errors import RetrieverError
from retriever.faiss_index import IndexParams
from retriever.index_encoding import encode_for_index


class NoEncoding(Encoder):
    """An encoder that fails the test if asked to encode: the refusal must come before any encoding."""

    def encode_passages(self, *args, **kwargs):
        raise AssertionError("encoded before refusing")


def test_a_corpus_the_reader_refuses_is_named_so_before_its_records_are_counted(tiny_model_dir, tmp_path):
    """A JSON array on one line (not JSONL) counted as one record, so a library build of a trained index said 'the
    corpus has 1 document … use fewer lists (--nlist)' where `build` names the file's real fault."""
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps([{"_id": f"d{row}", "text": f"word {row}"} for row in range(50)]))
    encoder = NoEncoding(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    with pytest.raises(RetrieverError, match=r"one JSON array of 50 records, not JSONL"):
        encode_for_index(corpus, tmp_path / "idx", encoder, IndexParams("ivfpq", nlist=2), progress=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["c.json"]
