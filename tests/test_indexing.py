from __future__ import annotations

import json

import faiss
import pandas as pd
import pyarrow.parquet as pq
import pytest

from retriever.corpus_encoding import encode_corpus
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import (DOCSTORE_FILE, IDS_FILE, INDEX_FILE, MANIFEST_FILE, IndexParams, build_index,
                                encode_and_index)
from retriever.lexical import LEXICAL_DIR
from retriever.shards import METADATA_KEY, list_shards


@pytest.fixture()
def tiny_encoder(tiny_model_dir) -> Encoder:
    return Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")


def test_index_folder_contents_and_manifest(tiny_beir, tiny_encoder, tmp_path):
    manifest = encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, IndexParams("flat"), shard_size=5,
                                progress=False)
    folder = tmp_path / "idx"
    assert {p.name for p in folder.iterdir()} == {INDEX_FILE, IDS_FILE, DOCSTORE_FILE, MANIFEST_FILE, LEXICAL_DIR}
    assert json.loads((folder / MANIFEST_FILE).read_text()) == manifest
    lexical = manifest["lexical"]
    assert (lexical["k1"], lexical["b"], lexical["stemmer"], lexical["stopwords"]) == (0.9, 0.4, "english", "en")
    assert lexical["tokenizer"]["lowercase"] and lexical["documents"] == 12
    assert manifest["index"]["count"] == 12 and manifest["corpus"]["documents"] == 12
    assert manifest["encoder"]["pooling"] == "mean" and manifest["encoder"]["weights_sha256"]
    assert len(manifest["corpus"]["sha256"]) == 64 and "faiss" in manifest["versions"]
    assert faiss.read_index(str(folder / INDEX_FILE)).ntotal == 12


def test_shards_and_docstore_open_with_plain_pyarrow_and_pandas(tiny_beir, tiny_encoder, tmp_path):
    encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, shard_size=5, progress=False)
    shard = list_shards(tmp_path / "idx.shards")[0]
    table = pq.read_table(shard)
    assert str(table.schema.field("embedding").type) == "fixed_size_list<element: float>[32]"
    assert table.schema.field("id").type == "string"
    metadata = json.loads(table.schema.metadata[METADATA_KEY])
    assert metadata["pooling"] == "mean" and metadata["dim"] == 32 and metadata["normalize"] is True
    frame = pd.read_parquet(shard)
    assert list(frame.columns) == ["id", "embedding"] and len(frame) == 5
    docs = pd.read_parquet(tmp_path / "idx" / DOCSTORE_FILE)
    assert list(docs.columns) == ["id", "title", "text"] and docs.iloc[0]["title"] == "Cats"


@pytest.mark.parametrize("index_type", ["hnsw", "ivfpq", "IVF2,Flat"])
def test_approximate_indexes_build(tiny_beir, tiny_encoder, tmp_path, index_type):
    params = IndexParams(index_type, nlist=2, pq_m=4)
    manifest = encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, params, progress=False)
    assert manifest["index"]["count"] == 12


def test_bad_factory_string_leaves_nothing(tiny_beir, tiny_encoder, tmp_path):
    with pytest.raises(RetrieverError, match="FAISS cannot build"):
        encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, IndexParams("NotAnIndex"), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx.shards", "tiny-beir"]


def test_existing_index_is_not_overwritten_without_flag(tiny_beir, tiny_encoder, tmp_path):
    encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, progress=False)
    with pytest.raises(RetrieverError, match="already exists"):
        build_index(tmp_path / "idx.shards", tiny_beir, tmp_path / "idx")
    build_index(tmp_path / "idx.shards", tiny_beir, tmp_path / "idx", overwrite=True, progress=False)


def test_corpus_must_match_shards(tiny_beir, tiny_encoder, tmp_path):
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, progress=False)
    other = tmp_path / "other.jsonl"
    other.write_text('{"_id": "z", "text": "x"}\n')
    with pytest.raises(RetrieverError, match="holds 1 documents but the shards"):
        build_index(tmp_path / "shards", other, tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx").exists()


def test_target_recall_is_measured_and_recorded(tiny_beir, tiny_encoder, tmp_path):
    from retriever.searching import Searcher

    params = IndexParams("hnsw", target_recall=0.9, tuning_queries=12, tuning_k=3)
    manifest = encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, params, progress=False)
    tuning = manifest["index"]["tuning"]
    assert tuning["parameter"] == "ef_search" and tuning["measured_recall"] >= 0.9
    assert manifest["index"]["search_defaults"]["ef_search"] == tuning["value"]
    assert Searcher(tmp_path / "idx", device="cpu").default_ef_search == tuning["value"]


def test_vectors_held_out_for_tuning_are_added_after_it(tiny_beir, tiny_encoder, tmp_path):
    """Tuning queries stay out of the index while it is measured, then every document is in, id-mapped right."""
    params = IndexParams("flat", target_recall=0.9, tuning_queries=5, tuning_k=3)
    manifest = encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, params, progress=False)
    assert manifest["index"]["tuning"]["sample_queries"] == 5
    index = faiss.read_index(str(tmp_path / "idx" / "index.faiss"))
    ids = pq.read_table(tmp_path / "idx" / "ids.parquet")["id"].to_pylist()
    assert index.ntotal == len(ids) == len(set(ids)) == manifest["corpus"]["documents"]
    vectors = index.reconstruct_n(0, index.ntotal)
    shard_vectors = {}
    for shard in sorted((tmp_path / "idx.shards").glob("*.parquet")):
        table = pq.read_table(shard)
        shard_vectors.update(zip(table["id"].to_pylist(), table["embedding"].to_pylist()))
    for row, doc_id in enumerate(ids):
        assert vectors[row].tolist() == pytest.approx(shard_vectors[doc_id], abs=1e-6)


def test_given_queries_tune_instead_of_held_out_vectors(tiny_beir, tiny_encoder, tmp_path):
    texts = ["where does honey come from", "hot lava rock", "ice and snow"]
    params = IndexParams("hnsw", target_recall=0.9, tuning_k=3)
    manifest = encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, params, progress=False,
                                tuning_query_texts=texts)
    tuning = manifest["index"]["tuning"]
    assert tuning["queries"] == "given queries" and tuning["sample_queries"] == len(texts)
    corpus_ids = [json.loads(line)["_id"] for line in (tiny_beir / "corpus.jsonl").read_text().splitlines()]
    assert pq.read_table(tmp_path / "idx" / "ids.parquet")["id"].to_pylist() == corpus_ids, "nothing was held out"


def test_tuning_queries_without_a_target_recall_are_refused(tiny_beir, tiny_encoder, tmp_path):
    with pytest.raises(RetrieverError, match="add --target-recall"):
        encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, IndexParams("hnsw"), progress=False,
                         tuning_query_texts=["hot lava rock"])
    assert not (tmp_path / "idx").exists()


def test_id_map_points_at_each_documents_docstore_row_with_split_shards(tiny_beir, tiny_encoder, tmp_path):
    for worker in range(3):
        encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=2, worker_index=worker, num_workers=3,
                      progress=False)
    params = IndexParams("flat", target_recall=0.9, tuning_queries=4, tuning_k=3)
    build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", params, progress=False)
    id_map = pq.read_table(tmp_path / "idx" / IDS_FILE).to_pydict()
    docstore_ids = pq.read_table(tmp_path / "idx" / DOCSTORE_FILE)["id"].to_pylist()
    assert sorted(id_map["id"]) == sorted(docstore_ids) and len(docstore_ids) == 12
    assert [docstore_ids[row] for row in id_map["docstore_row"]] == id_map["id"]
