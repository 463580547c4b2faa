"""Opening an index folder's BM25 part (``retriever.lexical_opening``): its manifest record checked on its own, its
files, and the part checked against the dense part and the doc store it was built from."""
from __future__ import annotations

import json
import re

import pytest

from fixtures_indexes import bm25_hits, with_lexical_record

from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.index_folder import read_manifest
from retriever.indexing import MANIFEST_FILE, IndexParams, encode_and_index
from retriever.lexical_part import add_lexical
from retriever.searching import Searcher


def _reversed_corpus_index(tiny_beir, tiny_model_dir, tmp_path):
    """An index of the same documents in the opposite order: as many rows, each BM25 row another document."""
    from fixtures_corpora import write_jsonl

    rows = [json.loads(line) for line in (tiny_beir / "corpus.jsonl").read_text().splitlines()][::-1]
    corpus = write_jsonl(tmp_path / "reversed.jsonl", rows)
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(corpus, tmp_path / "other", encoder, IndexParams("flat"), progress=False)
    return tmp_path / "other"


def test_a_bm25_part_copied_from_another_index_of_as_many_documents_is_refused(index, tiny_beir, tiny_model_dir,
                                                                               tmp_path):
    """The BM25 record held nothing of the doc store it was built from: a part (folder and record) copied from an
    index of as many documents opened, and its rows were read as this index's documents."""
    import shutil

    from retriever.errors import RetrieverError

    other = _reversed_corpus_index(tiny_beir, tiny_model_dir, tmp_path)
    manifest, theirs = (json.loads((folder / MANIFEST_FILE).read_text()) for folder in (index, other))
    shutil.rmtree(index / manifest["lexical"]["directory"])
    shutil.copytree(other / theirs["lexical"]["directory"], index / theirs["lexical"]["directory"])
    (index / MANIFEST_FILE).write_text(json.dumps({**manifest, "lexical": theirs["lexical"]}))
    for mode in ("bm25", "hybrid"):
        with pytest.raises(RetrieverError, match=rf"^{index}/bm25: this BM25 part was built from another doc store "
                                                 rf".*; rebuild it with `retriever bm25 {index} --overwrite`"):
            Searcher(index, device="cpu", mode=mode)
    add_lexical(index, overwrite=True, progress=False)
    assert bm25_hits(index)[0][0] == "d6"  # the bee passage, by this index's own rows


def test_a_bm25_part_recorded_before_its_doc_store_fingerprint_still_opens(index):
    manifest = json.loads((index / MANIFEST_FILE).read_text())
    assert manifest["lexical"]["docstore"]["sha256"] == manifest["integrity"]["files"]["docstore.parquet"]["sha256"]
    del manifest["lexical"]["docstore"]
    (index / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert bm25_hits(index)[0][0] == "d6"


@pytest.mark.parametrize("docstore", ["x", None, {"file": 5}, ["docstore.parquet"]])
def test_a_broken_bm25_record_fails_only_bm25_and_hybrid_and_bm25_overwrite_repairs_it(index, docstore):
    """The lexical entries were checked with the whole manifest: a broken lexical.docstore failed dense search,
    `info` and the repair itself, saying to rebuild the whole index with `retriever build`."""
    from retriever.errors import RetrieverError
    from retriever.info import index_summary

    with_lexical_record(index, docstore=docstore)
    searcher = Searcher(index, device="cpu")
    assert searcher.search(["honey bee"], k=2)[0]
    for mode in ("bm25", "hybrid"):
        with pytest.raises(RetrieverError, match=rf"lexical\.docstore.*; rebuild it with `retriever bm25 {index} "
                                                 "--overwrite`"):
            searcher.search(["honey bee"], k=2, mode=mode)
    assert "retriever bm25" in index_summary(index)["bm25"]["damage"]
    add_lexical(index, overwrite=True, progress=False)
    assert bm25_hits(index)[0][0] == "d6"


@pytest.mark.parametrize("docstore", [{}, {"sha256": "0" * 64}, {"file": "ids.parquet"}, "ids.parquet"])
def test_an_incomplete_or_mispointed_doc_store_record_is_refused(index, docstore):
    """An empty record, or one naming another file of the folder by that file's own hash, passed the check."""
    from retriever.errors import RetrieverError

    manifest = json.loads((index / MANIFEST_FILE).read_text())
    if docstore == "ids.parquet":
        docstore = {"file": "ids.parquet", "sha256": manifest["integrity"]["files"]["ids.parquet"]["sha256"]}
    with_lexical_record(index, docstore=docstore)
    with pytest.raises(RetrieverError, match=rf"; rebuild it with `retriever bm25 {index} --overwrite`"):
        Searcher(index, device="cpu", mode="bm25")


@pytest.mark.parametrize("field, value, said", [
    ("stopwords", "klingon", "stopword list"), ("stemmer", "klingon", "stemmer"),
    ("tokenizer", "cjk", "way of splitting words"), ("tokenizer", "field", "way of splitting words")])
def test_a_bm25_record_this_version_does_not_know_names_the_record_not_a_flag(index, field, value, said):
    """A stopword list or stemmer unknown here (a hand edit, or a newer retriever's part) failed bm25 search with
    "--bm25-stopwords 'klingon' is not a stopword list", a flag never given, while `info` showed no damage; an
    unknown tokenizer record was searched by splitting queries otherwise than its passages, without a word."""
    from retriever.info import index_summary, verify_index
    from retriever.index_folder import read_manifest

    record = read_manifest(index)["lexical"]
    if field == "tokenizer":
        value = {**record["tokenizer"], **({"cjk": "trigrams"} if value == "cjk" else {"emoji": "split"})}
    with_lexical_record(index, **{field: value})
    expected = (rf"{index / MANIFEST_FILE}: lexical\.{field} .* {said} this version of retriever does not know.*"
                rf"rebuild it with `retriever bm25 {index} --overwrite`.*upgrade retriever")
    searcher = Searcher(index, device="cpu")
    assert searcher.search(["honey bee"], k=2)[0]
    with pytest.raises(RetrieverError, match=expected) as error:
        searcher.search(["honey bee"], k=2, mode="bm25")
    assert "--bm25" not in str(error.value)
    assert re.search(expected, index_summary(index)["bm25"]["damage"])
    with pytest.raises(RetrieverError, match=expected):
        verify_index(index, progress=False)
    add_lexical(index, overwrite=True, progress=False)
    assert bm25_hits(index)[0][0] == "d6"


@pytest.mark.parametrize("damage", ["zeroed", "truncated"])
def test_an_unreadable_sorted_vocabulary_is_named_by_search_not_its_folder(index, damage):
    """BM25 search named the whole bm25/ folder (its read was wrapped as one), where `info` names the file."""
    from retriever.index_folder import read_manifest

    vocabulary = index / read_manifest(index)["lexical"]["directory"] / "vocab.sorted.arrow"
    size = vocabulary.stat().st_size
    vocabulary.write_bytes(b"\0" * size if damage == "zeroed" else vocabulary.read_bytes()[:size // 2] + b"\0" * (
        size - size // 2))  # the recorded size: the cheap checks pass
    with pytest.raises(RetrieverError, match=rf"^{re.escape(str(vocabulary))}: cannot be read \([^\n]*\); the BM25 "
                                             rf"part is damaged; rebuild it with `retriever bm25 {index} --overwrite`"):
        Searcher(index, device="cpu").search(["honey bee"], k=2, mode="bm25")


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(lexical="yes"), "lexical is str 'yes', not dict or null"),
    (lambda m: m.update(lexical={"directory": "../other/bm25"}),
     "lexical.directory is str '../other/bm25', not the name of a folder inside the index folder"),
    (lambda m: m.update(lexical={"directory": "/tmp/bm25"}),
     "lexical.directory is str '/tmp/bm25', not the name of a folder inside the index folder"),
    (lambda m: m.update(lexical={"stemmer": ["english"]}), "lexical.stemmer is list \"['english']\", not str or null"),
    (lambda m: m.update(lexical={"stopwords": 5}), "lexical.stopwords is int '5', not str or null"),
    (lambda m: m.update(lexical={"tokenizer": "bm25s"}), "lexical.tokenizer is str 'bm25s', not dict"),
])
def test_a_bm25_record_entry_of_the_wrong_type_damages_the_bm25_part_alone(tmp_path, edit, message):
    """The BM25 record was checked with the whole manifest: a broken entry refused every reader of the folder and
    said to rebuild all of it (`retriever build`), where `retriever bm25 --overwrite` replaces the record."""
    import json

    from retriever.errors import IndexDamaged
    from retriever.lexical_opening import lexical_record

    manifest = {"encoder": {}, "corpus": {"documents": 2}, "lexical": None,
                "index": {"type": "flat", "count": 2, "tuning": None, "search_defaults": {}},
                "integrity": {"files": {"index.faiss": {"bytes": 10, "sha256": "ab"}}, "ids_sha256": "cd"}}
    edit(manifest)
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    read_manifest(tmp_path)
    with pytest.raises(IndexDamaged) as raised:
        lexical_record(tmp_path, read_manifest(tmp_path))
    assert str(raised.value) == (f"{tmp_path / MANIFEST_FILE}: {message}, so the BM25 part's record is damaged; "
                                 f"rebuild it with `retriever bm25 {tmp_path} --overwrite` (no re-encoding)")
