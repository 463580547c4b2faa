"""Item 1 of issue #10: a shard is valid only for the documents it was made from."""
from __future__ import annotations

import json

import pytest

from retriever.corpus import Fields
from retriever.corpus_encoding import encode_corpus
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, build_index, encode_and_index
from retriever.searching import Searcher
from retriever.shard_completeness import check_complete
from retriever.shards import list_shards


def _encoder(model_dir, **settings) -> Encoder:
    return Encoder(EncoderSettings(model=str(model_dir), **settings), device="cpu", dtype="fp32")


def _edit(corpus, doc_id: str, text: str) -> None:
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    for row in rows:
        if row["_id"] == doc_id:
            row["text"] = text
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_corpus_edit_reencodes_exactly_the_changed_part(tiny_beir, tiny_model_dir, tmp_path, capsys,
                                                        one_torch_thread):
    encoder = _encoder(tiny_model_dir)
    index = tmp_path / "idx"
    encode_and_index(tiny_beir, index, encoder, shard_size=4, progress=False)
    before = {p.name: p.read_bytes() for p in list_shards(tmp_path / "idx.shards")}
    new_text = "a storm of bread and ink over the glacier"
    _edit(tiny_beir / "corpus.jsonl", "d6", new_text)  # d6 is in the second part of three
    encode_and_index(tiny_beir, index, encoder, shard_size=4, overwrite=True, progress=True)
    assert "re-encoded 1 part whose documents changed" in capsys.readouterr().err
    after = {p.name: p.read_bytes() for p in list_shards(tmp_path / "idx.shards")}
    assert [name for name in before if before[name] != after[name]] == ["embeddings-w000of001-00001.parquet"]
    hit = Searcher(index, device="cpu", dtype="fp32").search([f"Bees {new_text}"], k=1)[0][0]
    assert (hit.id, hit.text) == ("d6", new_text) and hit.score > 0.999


def test_index_refuses_shards_of_an_edited_corpus(tiny_beir, tiny_model_dir, tmp_path):
    encode_corpus(tiny_beir, tmp_path / "shards", _encoder(tiny_model_dir), shard_size=5, progress=False)
    _edit(tiny_beir / "corpus.jsonl", "d12", "an edited text")
    with pytest.raises(RetrieverError, match=r"00002\.parquet: encoded from other documents than .*corpus\.jsonl"):
        build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx").exists()


def test_shrunk_corpus_drops_the_parts_it_no_longer_has(tiny_beir, tiny_model_dir, tmp_path):
    encoder = _encoder(tiny_model_dir)
    encode_corpus(tiny_beir, tmp_path / "shards", encoder, shard_size=5, progress=False)
    corpus = tiny_beir / "corpus.jsonl"
    corpus.write_text("".join(corpus.read_text().splitlines(keepends=True)[:4]))
    result = encode_corpus(tiny_beir, tmp_path / "shards", encoder, shard_size=5, progress=False)
    assert (result.changed_parts, result.removed_parts, result.shards) == (1, 2, 1)
    build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", progress=False)


def test_unfinished_rerun_is_not_complete(tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    encoder = _encoder(tiny_model_dir)
    encode_corpus(tiny_beir, tmp_path / "shards", encoder, shard_size=5, progress=False)
    _edit(tiny_beir / "corpus.jsonl", "d12", "an edited text")
    monkeypatch.setattr(Encoder, "encode_passages", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(tiny_beir, tmp_path / "shards", encoder, shard_size=5, progress=False)
    with pytest.raises(RetrieverError, match="worker 0 of 1 has not finished"):
        check_complete(tmp_path / "shards")


def test_build_overwrite_after_a_model_change_starts_clean(tiny_beir, tiny_model_dir, tmp_path):
    encode_and_index(tiny_beir, tmp_path / "idx", _encoder(tiny_model_dir), shard_size=5, progress=False)
    other = _encoder(tiny_model_dir, pooling="cls")
    with pytest.raises(RetrieverError, match="different encoder"):
        encode_corpus(tiny_beir, tmp_path / "idx.shards", other, shard_size=5, progress=False)
    manifest = encode_and_index(tiny_beir, tmp_path / "idx", other, shard_size=5, overwrite=True, progress=False)
    assert manifest["encoder"]["pooling"] == "cls"


def test_index_read_with_other_fields_than_encode_names_the_flags(tmp_path, tiny_model_dir):
    """`encode --title-field head` then `index` without it: the corpus did not change, the reading did, and the
    advice to rerun `encode` alone re-encoded every part without titles."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "cat dog", "head": "Cats"}\n')
    encode_corpus(corpus, tmp_path / "shards", _encoder(tiny_model_dir), fields=Fields(title="head"), progress=False)
    with pytest.raises(RetrieverError, match=r"shards: its shards were encoded from the corpus read with "
                                             r"--title-field head, this run reads it with --title-field title; "
                                             r"rerun with --title-field head to use them"):
        build_index(tmp_path / "shards", corpus, tmp_path / "idx", progress=False)
