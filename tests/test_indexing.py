from __future__ import annotations

import json
import shutil

import faiss
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from retriever.corpus_encoding import encode_corpus
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.evaluation import evaluate_index
from retriever.indexing import (DOCSTORE_FILE, IDS_FILE, INDEX_FILE, MANIFEST_FILE, IndexParams, build_index,
                                encode_and_index)
from retriever.lexical import LEXICAL_DIR
from retriever.run_reading import read_run
from retriever.runs import write_run
from retriever.searching import Searcher
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
def test_approximate_indexes_build(tiny_beir, tiny_encoder, tmp_path, index_type, capsys):
    params = IndexParams(index_type, **({"nlist": 2, "pq_m": 4} if index_type == "ivfpq" else {}))
    manifest = encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, params, progress=False)
    assert manifest["index"]["count"] == 12
    assert capsys.readouterr() == ("", "")  # "training IVF... on N sampled vectors" printed at progress=False


def test_bad_factory_string_leaves_nothing(tiny_beir, tiny_encoder, tmp_path):
    with pytest.raises(RetrieverError, match="FAISS cannot build"):
        encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, IndexParams("PQ5"), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-beir"]  # refused before encoding


def test_existing_index_is_not_overwritten_without_flag(tiny_beir, tiny_encoder, tmp_path):
    encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, progress=False)
    with pytest.raises(RetrieverError, match="already exists"):
        build_index(tmp_path / "idx.shards", tiny_beir, tmp_path / "idx")
    build_index(tmp_path / "idx.shards", tiny_beir, tmp_path / "idx", overwrite=True, progress=False)


def test_corpus_must_match_shards(tiny_beir, tiny_encoder, tmp_path):
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, progress=False)
    other = tmp_path / "other.jsonl"
    other.write_text('{"_id": "z", "text": "x"}\n')
    with pytest.raises(RetrieverError, match="holds 1 document but the shards"):
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


class NoEncoding(Encoder):
    """An encoder that fails the test if asked to encode: the refusal must come before any encoding."""

    def encode_passages(self, *args, **kwargs):
        raise AssertionError("encoded before refusing")


@pytest.fixture()
def no_encoding(tiny_model_dir) -> Encoder:
    return NoEncoding(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")


def _hidden(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_overwrite_never_replaces_what_is_not_an_index(tiny_beir, no_encoding, tmp_path, kind):
    victim = tmp_path / "victim"
    if kind == "folder":
        victim.mkdir()
        (victim / "notes.txt").write_text("mine")
    else:
        victim.write_text("mine")
    with pytest.raises(RetrieverError, match="victim: exists and is not an index folder.*remove it or choose"):
        encode_and_index(tiny_beir, victim, no_encoding, overwrite=True, progress=False)
    assert (victim / "notes.txt" if kind == "folder" else victim).read_text() == "mine"
    assert not (tmp_path / "victim.shards").exists() and _hidden(tmp_path) == []


def test_overwrite_replaces_an_index_folder_or_an_empty_one(tiny_beir, tiny_encoder, tmp_path):
    (tmp_path / "idx").mkdir()
    encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, overwrite=True, progress=False, lexical=None)
    build_index(tmp_path / "idx.shards", tiny_beir, tmp_path / "idx", overwrite=True, progress=False, lexical=None)
    assert (tmp_path / "idx" / MANIFEST_FILE).is_file() and _hidden(tmp_path) == []


def test_overwrite_keeps_what_a_user_put_in_the_shard_folder(tiny_beir, tiny_encoder, tmp_path):
    """Shards of another encoder are deleted, the user's other files in NAME.shards are not."""
    encode_corpus(tiny_beir, tmp_path / "idx.shards", tiny_encoder, progress=False)
    (tmp_path / "idx.shards" / "notes.txt").write_text("mine")
    other = Encoder(EncoderSettings(model=str(tiny_encoder.settings.model), normalize=False), device="cpu",
                    dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", other, overwrite=True, progress=False, lexical=None)
    assert (tmp_path / "idx.shards" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("where", ["shards-is-a-file", "parent-is-a-file"])
def test_an_output_that_cannot_be_made_is_refused_before_encoding(tiny_beir, no_encoding, tmp_path, where):
    if where == "shards-is-a-file":
        (tmp_path / "idx.shards").write_text("mine")
        output, expected = tmp_path / "idx", "idx.shards: is a file where the build keeps its shards folder"
    else:
        (tmp_path / "afile").write_text("mine")
        output, expected = tmp_path / "afile" / "idx", "cannot be created: .*afile is a file"
    with pytest.raises(RetrieverError, match=expected):
        encode_and_index(tiny_beir, output, no_encoding, progress=False)
    assert (tmp_path / ("idx.shards" if where == "shards-is-a-file" else "afile")).read_text() == "mine"


def test_dot_as_output_is_the_current_folder(tiny_beir, tiny_encoder, tmp_path, monkeypatch):
    (tmp_path / "idx").mkdir()
    monkeypatch.chdir(tmp_path / "idx")
    encode_and_index(tiny_beir, ".", tiny_encoder, overwrite=True, progress=False, lexical=None)
    assert (tmp_path / "idx" / MANIFEST_FILE).is_file() and (tmp_path / "idx.shards").is_dir()


def test_a_path_starting_with_a_tilde_is_in_the_home_folder(tiny_beir, tiny_encoder, tmp_path, monkeypatch):
    """As the shell and model paths read it: `~/idx` made a literal `~` folder in the working folder while pyarrow,
    which expands it, wrote the shards under the home folder, failing after the encoding; `write_run` wrote
    `./~/runs/r.trec`; `Searcher`, `read_run` and evaluation said no such folder or file."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    shutil.copytree(tiny_beir, home / "beir")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    encode_and_index("~/beir", "~/idx", tiny_encoder, progress=False, lexical=None)
    searcher = Searcher("~/idx", device="cpu", dtype="fp32")
    write_run(searcher.run(["q1"], ["honey"], k=2), "~/runs/r.trec")
    assert list(read_run("~/runs/r.trec")["q1"]) == [hit.id for hit in searcher.search(["honey"], k=2)[0]]
    assert evaluate_index(searcher, "~/beir", "test", progress=False)[0].evaluation.num_queries == 4
    assert (home / "idx" / MANIFEST_FILE).is_file() and list(work.iterdir()) == []


def test_an_idmap_factory_is_refused_before_encoding(tiny_beir, no_encoding, tmp_path):
    with pytest.raises(RetrieverError, match="IDMap indexes are not supported.*e.g. 'Flat'"):
        encode_and_index(tiny_beir, tmp_path / "idx", no_encoding, IndexParams("IDMap,Flat"), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-beir"]


@pytest.mark.parametrize("arguments, message", [
    (lambda encoder: ("minilm", IndexParams("flat")), r"encoder must be Encoder, e.g. Encoder\(EncoderSettings"),
    (lambda encoder: (encoder, "hnsw"), r"params must be IndexParams, e.g. IndexParams\('flat'\), not str 'hnsw'"),
])
def test_library_arguments_of_the_wrong_kind_are_named_before_encoding(tiny_beir, no_encoding, tmp_path, arguments,
                                                                       message):
    """encode_and_index(corpus, out, "minilm") or (…, encoder, "hnsw"): AttributeError tracebacks ('str' object has
    no attribute 'metadata' / 'index_type')."""
    with pytest.raises(RetrieverError, match=message):
        encode_and_index(tiny_beir, tmp_path / "idx", *arguments(no_encoding), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-beir"]


@pytest.mark.parametrize("option", [{"stemmer": "klingon"}, {"stopwords": "xx"}, {"method": "bm99"}])
def test_bad_bm25_settings_are_refused_before_encoding(tiny_beir, no_encoding, tmp_path, option):
    from retriever.lexical import LexicalParams

    with pytest.raises(RetrieverError, match="klingon|'xx'|bm99"):
        encode_and_index(tiny_beir, tmp_path / "idx", no_encoding, lexical=LexicalParams(**option), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-beir"]


def _rewrite_first_shard(folder, change) -> str:
    import pyarrow as pa

    shard = list_shards(folder)[0]
    table = pq.read_table(shard)
    metadata = table.schema.metadata
    if change == "broken-json":
        table = table.replace_schema_metadata({METADATA_KEY: b"{broken"})
    elif change == "no-shard-record":
        record = json.loads(metadata[METADATA_KEY])
        del record["shard"]
        table = table.replace_schema_metadata({METADATA_KEY: json.dumps(record).encode()})
    elif change == "fewer-rows":
        table = table.slice(0, 1).replace_schema_metadata(metadata)
    elif change == "reversed-ids":
        table = table.set_column(0, "id", pa.array(table["id"].to_pylist()[::-1])).replace_schema_metadata(metadata)
    else:  # truncated
        data = shard.read_bytes()
        shard.write_bytes(data[:len(data) // 2])
        return shard.name
    pq.write_table(table, shard)
    return shard.name


SHARD_DAMAGE = {"broken-json": "metadata is not valid JSON", "no-shard-record": "has no shard record",
                "fewer-rows": "holds 1 row where its metadata records 5",
                "reversed-ids": "its id column does not list its part's documents",
                "truncated": "not a readable Parquet file"}


@pytest.mark.parametrize("change", sorted(SHARD_DAMAGE))
def test_a_damaged_shard_is_refused_by_name_and_a_rerun_of_encode_repairs_it(tiny_beir, tiny_encoder, tmp_path,
                                                                            change):
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=5, progress=False)
    name = _rewrite_first_shard(tmp_path / "shards", change)
    with pytest.raises(RetrieverError, match=f"{name}: .*{SHARD_DAMAGE[change]}.*rerun `retriever encode`") as error:
        build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", progress=False, lexical=None)
    assert "\n" not in str(error.value) and not (tmp_path / "idx").exists()
    result = encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=5, progress=False)
    assert (result.encoded, result.damaged_parts, result.changed_parts) == (5, 1, 0)
    build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", progress=False, lexical=None)
    id_map = pq.read_table(tmp_path / "idx" / IDS_FILE).to_pydict()
    docstore_ids = pq.read_table(tmp_path / "idx" / DOCSTORE_FILE)["id"].to_pylist()
    assert [docstore_ids[row] for row in id_map["docstore_row"]] == id_map["id"]


def test_a_parts_folder_that_is_not_a_builds_is_refused_before_encoding(tiny_beir, no_encoding, tmp_path):
    """An ivf-ondisk build's OUTPUT.parts is checked with the output, not after the whole corpus is encoded."""
    (tmp_path / "idx.parts" / "photos").mkdir(parents=True)
    (tmp_path / "idx.parts" / "inputs.json").write_text("[]")
    with pytest.raises(RetrieverError, match="idx.parts: exists and is not the parts folder of an ivf-ondisk build"):
        encode_and_index(tiny_beir, tmp_path / "idx", no_encoding, IndexParams("ivf-ondisk"), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx.parts", "tiny-beir"]
    assert sorted(p.name for p in (tmp_path / "idx.parts").iterdir()) == ["inputs.json", "photos"]


@pytest.mark.parametrize("spec, expected", [
    ("NotAnIndex", "could not parse index string NotAnIndex"), ("PQ5", "multiple of the number of subquantizers"),
    ("LSH", "METRIC_L2"), ("NSG16,Flat", "NSG needs every vector in one add"),
    ("PCA64,Flat", "a PCA cannot output 64 dimensions from 32"), ("OPQ5,IVF2,PQ4", "OPQ's 5 sub-quantisers"),
    ("HNSW1,Flat", "an HNSW graph needs at least 2 neighbours a node"), ("HNSW0", "HNSW graph needs at least 2"),
    ("PCA16,HNSW1,SQ8", "HNSW graph needs at least 2"), ("IVF2_HNSW1,Flat", "HNSW graph needs at least 2")])
def test_a_factory_string_faiss_cannot_build_is_refused_before_encoding(tiny_beir, no_encoding, tmp_path, spec,
                                                                          expected):
    """Each was refused only after the whole corpus was encoded (NSG even built, then failed at a second add; an
    HNSW of fewer than 2 neighbours killed the build with SIGSEGV or a FAISS abort, leaving its work folder)."""
    with pytest.raises(RetrieverError, match=expected):
        encode_and_index(tiny_beir, tmp_path / "idx", no_encoding, IndexParams(spec), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-beir"]


@pytest.mark.parametrize("params, expected", [
    (IndexParams("IVF64,Flat"), "'IVF64,Flat' trains on at least 64 vectors, and the corpus has 12 documents"),
    (IndexParams("ivfpq", nlist=20), "'ivfpq' trains on at least 20 vectors"),
    (IndexParams("ivf-ondisk", nlist=13), "'ivf-ondisk' trains on at least 13 vectors"),
    (IndexParams("PQ4", train_size=100), "'PQ4' trains on at least 256 vectors"),
    (IndexParams("IVF8,Flat", train_size=5), "'IVF8,Flat' trains on at least 8 vectors, and --train-size is 5"),
    (IndexParams("ivfpq", train_size=2), "'ivfpq' trains on at least 8 vectors, and --train-size is 2"),
    (IndexParams("OPQ4,Flat"), r"'OPQ4,Flat' trains on at least 256 vectors, .*\(OPQ's 8-bit codes"),
    (IndexParams("HNSW8,PQ4"), r"'HNSW8,PQ4' trains on at least 256 vectors, .*\(8-bit PQ codes of 256"),
    (IndexParams("PCA16,Flat"), r"'PCA16,Flat' trains on at least 16 vectors, .*\(a PCA to 16 dimensions"),
    (IndexParams("RQ1x4"), r"'RQ1x4' trains on at least 32 vectors, .*\(a residual quantizer of 32 dimensions"),
])
def test_an_index_with_more_lists_or_codes_than_vectors_is_refused_before_encoding(tiny_beir, no_encoding, tmp_path,
                                                                                  params, expected):
    """FAISS refused it only at training, once the whole corpus had been encoded."""
    with pytest.raises(RetrieverError, match=expected):
        encode_and_index(tiny_beir, tmp_path / "idx", no_encoding, params, progress=False)


def test_index_refuses_an_index_the_shards_cannot_train_before_reading_the_corpus(tiny_beir, tiny_encoder, tmp_path,
                                                                                   monkeypatch):
    """`retriever index` wrote the doc store, hashed the corpus and built BM25 before FAISS refused the training."""
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=5, progress=False)
    monkeypatch.setattr("retriever.indexing.iter_documents", lambda *a, **k: pytest.fail("read the corpus first"))
    monkeypatch.setattr("retriever.ondisk.iter_documents", lambda *a, **k: pytest.fail("read the corpus first"))
    for params, expected in [(IndexParams("IVF64,Flat"), "at least 64 vectors, and the shards in .* hold 12"),
                             (IndexParams("ivf-ondisk", nlist=13), "'ivf-ondisk' trains on at least 13 vectors"),
                             (IndexParams("OPQ4,Flat"), "'OPQ4,Flat' trains on at least 256 vectors")]:
        with pytest.raises(RetrieverError, match=expected):
            build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", params, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards", "tiny-beir"]


@pytest.mark.parametrize("index_type", ["flat", "hnsw", "ivf-ondisk"])
def test_target_recall_on_one_document_is_refused_before_encoding_or_the_corpus_pass(tmp_path, no_encoding,
                                                                                     tiny_encoder, index_type,
                                                                                     monkeypatch):
    """One own vector cannot be both the held-out query and what it finds: this was refused only after the encoding,
    the doc store and BM25. Real tuning queries (--tuning-queries-file) still tune a one-document index."""
    corpus = tmp_path / "one.jsonl"
    corpus.write_text('{"_id": "d1", "text": "the cat sat on the mat"}\n')
    trained = {"nlist": 1, "train_size": 1} if index_type == "ivf-ondisk" else {}
    params = IndexParams(index_type, target_recall=0.9, **trained)
    with pytest.raises(RetrieverError, match="--target-recall needs at least 2 vectors .* and the corpus has 1; "
                                             "tune on real queries with --tuning-queries-file"):
        encode_and_index(corpus, tmp_path / "idx", no_encoding, params, progress=False)
    encode_corpus(corpus, tmp_path / "shards", tiny_encoder, progress=False)
    monkeypatch.setattr("retriever.indexing.iter_documents", lambda *a, **k: pytest.fail("read the corpus first"))
    monkeypatch.setattr("retriever.ondisk.iter_documents", lambda *a, **k: pytest.fail("read the corpus first"))
    with pytest.raises(RetrieverError, match="--target-recall needs at least 2 vectors .* and the shards in .* hold 1"):
        build_index(tmp_path / "shards", corpus, tmp_path / "idx", params, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl", "shards"]
    monkeypatch.undo()
    queries = tiny_encoder.encode_queries(["a cat"])
    manifest = build_index(tmp_path / "shards", corpus, tmp_path / "idx", params, progress=False, lexical=None,
                           tuning_queries=queries)
    assert manifest["index"]["count"] == 1 and manifest["index"]["tuning"]["queries"] == "given queries"


@pytest.mark.parametrize("params", [IndexParams("hnsw"), IndexParams("IVF12,Flat"),
                                    IndexParams("IVF4,PQ4x3")])
def test_an_index_the_corpus_can_train_is_built(tiny_beir, tiny_encoder, tmp_path, params):
    assert encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, params, progress=False)["index"]["count"] == 12


@pytest.mark.parametrize("spec, m, ef_construction", [("HNSW8,Flat", 8, 200), ("PCA8,HNSW4,Flat", 4, 200),
                                                      ("IVF2_HNSW4,Flat", None, None), ("hnsw", 32, 200)])
def test_the_manifest_records_the_hnsw_the_index_has(tiny_beir, tiny_encoder, tmp_path, spec, m, ef_construction):
    """hnsw_m was the --hnsw-m default (32) for any string holding 'HNSW', also an IVF's HNSW quantizer."""
    manifest = encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, IndexParams(spec),
                                progress=False, lexical=None)
    assert (manifest["index"]["hnsw_m"], manifest["index"]["ef_construction"]) == (m, ef_construction)


@pytest.mark.parametrize("where, failure", [
    ("retriever.docstore.pq.ParquetWriter.write_table",  # Arrow: errno 28, no file name
     OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device")),
    ("bm25s.BM25.save", OSError("84305 requested and 4064 written")),  # numpy's tofile: no errno, no file
    ("retriever.indexing.faiss.write_index", RuntimeError(
        "Error in void faiss::write_index: 'ret == (size * 4)' failed: write error in /x/.idx.building-7/index.faiss: "
        "102355 != 384000 (No space left on device)")),
])
def test_a_disk_filling_inside_the_index_folder_is_one_line_naming_the_output(tiny_beir, tiny_encoder, tmp_path,
                                                                               monkeypatch, where, failure):
    """A full disk met by a library writing into the folder being built: the error named no path (Arrow), named
    the hidden building folder (FAISS), or was numpy's short-write OSError traceback (bm25s's np.save)."""
    shards = tmp_path / "shards"
    encode_corpus(tiny_beir, shards, tiny_encoder, progress=False)

    def fails(*_, **__):
        raise failure

    monkeypatch.setattr(where, fails)
    with pytest.raises(RetrieverError) as caught:
        build_index(shards, tiny_beir, tmp_path / "idx", progress=False)
    assert str(caught.value).startswith(f"no space left on the device writing {tmp_path / 'idx'}; free some space")
    assert not (tmp_path / "idx").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["shards", "tiny-beir"]


def test_library_tuning_queries_that_are_not_query_vectors_are_named_before_the_corpus_pass(tiny_beir, tiny_encoder,
                                                                                         tmp_path, monkeypatch):
    """build_index(tuning_queries=...) of the wrong width failed with a bare AssertionError from FAISS, a 1-d array
    with a ValueError and an empty one with StopIteration, after the doc store was written; NaN rows tuned on
    nothing and the build succeeded, warning that no setting reaches the target."""
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=5, progress=False)
    monkeypatch.setattr("retriever.indexing.iter_documents", lambda *a, **k: pytest.fail("read the corpus first"))
    params, dim = IndexParams("hnsw", target_recall=0.9), tiny_encoder.metadata()["dim"]
    for queries, expected in [(np.zeros((3, dim + 1)), rf"tuning_queries: 3 rows of {dim + 1} numbers"),
                              (np.zeros(dim), rf"tuning_queries: an array of shape \({dim},\)"),
                              (np.zeros((0, dim)), "tuning_queries: 0 rows"),
                              (np.full((2, dim), np.nan), "tuning_queries: row 1 holds NaN or an infinity"),
                              ([["a"] * dim], "tuning_queries: not an array of numbers")]:
        with pytest.raises(RetrieverError, match=expected):
            build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", params, progress=False,
                        tuning_queries=queries, lexical=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards", "tiny-beir"]


def test_faiss_refusing_an_add_is_said_without_its_cpp_function_and_source_line():
    from retriever.indexing import _add

    untrained = faiss.index_factory(8, "IVF4,Flat", faiss.METRIC_INNER_PRODUCT)  # FAISS's own refusal, not a mock
    with pytest.raises(RetrieverError) as refused:
        _add(untrained, np.zeros((3, 8), dtype=np.float32), "IVF4,Flat")
    assert str(refused.value).startswith("FAISS cannot add vectors to 'IVF4,Flat': 'is_trained' failed; use ")
    assert "faiss::" not in str(refused.value) and ".cpp" not in str(refused.value)


def test_a_build_makes_one_empty_index_of_a_factory_string_for_its_checks_and_one_to_fill(tiny_beir, tiny_encoder,
                                                                                          tmp_path, monkeypatch):
    """The checks made five (whether the string trains, its structure and its training needs before the encoding,
    the last two again after it), each holding 257 MB for 'IVF1048576_HNSW32,PQ96x16' at 384 dimensions. Before
    them, IndexParams reads the string once with a 1-dimension index of one list (``unreadable_index_type``)."""
    from retriever.factory_parsing import _unreadable
    from retriever.index_checks import empty_index_facts

    empty_index_facts.cache_clear()
    _unreadable.cache_clear()
    made = []
    factory = faiss.index_factory
    monkeypatch.setattr(faiss, "index_factory", lambda *arguments: made.append(arguments[:2]) or factory(*arguments))
    encode_and_index(tiny_beir, tmp_path / "idx", tiny_encoder, IndexParams("IVF3,SQ8"), progress=False)
    assert made == [(1, "IVF1,SQ8"), (32, "IVF3,SQ8"), (32, "IVF3,SQ8")]  # the parse's with one list
