"""Model paths recorded in shards and index folders stay meaningful when a folder or its model moves."""
from __future__ import annotations

import pytest

from fixtures_models import make_tiny_bert
from retriever.corpus_encoding import encode_corpus
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import build_index
from retriever.searching import Searcher


def test_an_index_built_while_its_shards_model_was_away_still_records_where_it_belongs(tiny_beir, tmp_path,
                                                                                      monkeypatch):
    """`index` needs no model, so it builds while the shards' model folder is elsewhere; it recorded the model by name
    alone, so `search` then looked it up on the hub ("neither a local folder nor reachable on the Hugging Face hub")
    and moving the model back did not help from another working folder."""
    model = make_tiny_bert(tmp_path / "project" / "model", seed=2)
    encoder = Encoder(EncoderSettings(model=str(model)), device="cpu", dtype="fp32")
    encode_corpus(tiny_beir, tmp_path / "project" / "shards", encoder, shard_size=6, progress=False)
    model.rename(tmp_path / "model-away")
    build_index(tmp_path / "project" / "shards", tiny_beir, tmp_path / "project" / "idx", progress=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RetrieverError, match=r"idx: its model was recorded at \.\./model \(relative to it\), which is "
                                             "not there now: the folder moved away from its model"):
        Searcher(tmp_path / "project" / "idx", device="cpu")
    (tmp_path / "model-away").rename(model)
    assert Searcher(tmp_path / "project" / "idx", device="cpu").search(["honey"], k=1)[0][0].id == "d6"


def test_a_model_sharing_nothing_below_the_root_with_its_index_is_recorded_by_its_path():
    """An index in /data of a model in /models (a container's mounts) recorded the model by name alone, so `search`
    right after the build looked 'm' up on the hub ("neither a local folder nor reachable on the Hugging Face
    hub"), and shards in /scratch of a corpus in /data recorded its name alone, so encoding another corpus over them
    did not see that theirs was still there and replaced them."""
    from retriever.recorded_paths import recorded_model, relative_path

    assert relative_path("/models/m", "/data/idx") == "../../models/m"
    assert relative_path("/data/corpus.jsonl", "/scratch/shards") == "../../data/corpus.jsonl"
    with pytest.raises(RetrieverError, match=r"idx: its model was recorded at \.\./\.\./models/m \(relative to it\), "
                                             "which is not there now"):
        recorded_model({"model": "m", "model_path": relative_path("/models/m", "/data/idx")}, "/data/idx")
