"""The flat builder writes what bm25s's own Tokenizer + BM25.index + save write, for every method."""
from __future__ import annotations

import json
from array import array

import numpy as np
import pytest

from retriever import lexical_build
from retriever.lexical import METHODS, LexicalParams, _stem_words, _tokenizer, unicode_normalised
from retriever.lexical_build import SORTED_VOCAB_FILE, build_bm25s, tokenize_flat

TEXTS = ["Honey bees collect nectar from flowers; bees love flowers.",
         "",  # no words: bm25s gives it the empty token
         "the of and",  # only stopwords: likewise
         "A volcano erupts hot lava, lava and more LAVA.",
         "Flowering plants and their pollinators: café, naïve, 東京 tokens.",
         "glacier glaciers glacial valley valleys"]


def reference(texts: list[str], params: LexicalParams, folder):
    import bm25s
    from bm25s.tokenization import Tokenized

    tokenizer = _tokenizer(params)
    ids = [array("i", doc) for doc in tokenizer.streaming_tokenize(texts)]
    model = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
    model.index(Tokenized(ids=ids, vocab=tokenizer.get_vocab_dict()), show_progress=False)
    model.save(str(folder), show_progress=False)


def flat(texts: list[str], params: LexicalParams, folder, batch_tokens: int = 4):
    """Small Arrow batches, so terms are numbered across batches as bm25s numbers them in one pass."""
    tokenizer = _tokenizer(params)
    tokens = tokenize_flat(unicode_normalised(texts), tokenizer.splitter, frozenset(tokenizer.stopwords or ()),
                           _stem_words(params.stemmer), batch_tokens)
    return build_bm25s(tokens, folder, params.k1, params.b, params.method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("stemmer,stopwords", [("english", "en"), (None, None)])
def test_flat_build_writes_the_files_bm25s_writes(tmp_path, monkeypatch, method, stemmer, stopwords):
    monkeypatch.setattr(lexical_build, "SCORE_CHUNK", 5)  # several chunks even on six documents
    monkeypatch.setattr(lexical_build, "TERM_CHUNK_DOCS", 2)
    params = LexicalParams(method=method, stemmer=stemmer, stopwords=stopwords)
    reference(TEXTS, params, tmp_path / "bm25s")
    vocabulary, tokens = flat(TEXTS, params, tmp_path / "flat")
    ours, theirs = tmp_path / "flat", tmp_path / "bm25s"
    assert sorted(p.name for p in ours.iterdir()) == sorted([p.name for p in theirs.iterdir()] + [SORTED_VOCAB_FILE])
    for array_file in theirs.glob("*.npy"):
        expected, got = np.load(array_file), np.load(ours / array_file.name)
        assert got.dtype == expected.dtype and np.array_equal(got, expected), array_file.name
    vocab = json.loads((ours / "vocab.index.json").read_text(encoding="utf-8"))
    assert vocab == json.loads((theirs / "vocab.index.json").read_text(encoding="utf-8"))
    assert vocabulary == len(vocab) and tokens > len(TEXTS)
    assert json.loads((ours / "params.index.json").read_text()) == json.loads((theirs / "params.index.json").read_text())
    assert not list(ours.glob("*.part"))


def test_flat_build_loads_and_scores_like_bm25s(tmp_path):
    import bm25s

    params = LexicalParams()
    reference(TEXTS, params, tmp_path / "bm25s")
    flat(TEXTS, params, tmp_path / "flat")
    ours = bm25s.BM25.load(str(tmp_path / "flat"), mmap=True, load_vocab=True)
    theirs = bm25s.BM25.load(str(tmp_path / "bm25s"), mmap=True, load_vocab=True)
    query = [ours.vocab_dict[t] for t in ("lava", "bee", "flower")]
    assert np.array_equal(ours.get_scores_from_ids(query), theirs.get_scores_from_ids(query))


def test_sorted_vocabulary_holds_every_term_with_its_id(tmp_path):
    from retriever.docstore import open_mapped

    flat(TEXTS, LexicalParams(), tmp_path)
    vocab = json.loads((tmp_path / "vocab.index.json").read_text(encoding="utf-8"))
    batch = open_mapped(tmp_path / SORTED_VOCAB_FILE).get_batch(0)
    terms = batch.column("term").to_pylist()
    assert terms == sorted(vocab) and dict(zip(terms, batch.column("id").to_pylist())) == vocab


def test_a_word_its_stemmer_leaves_nothing_of_is_no_term(tmp_path):
    """Snowball's Nepali stemmer stems का ("of") to "": that is bm25s's empty token, the one term of a passage with
    no words, so the query का found the empty and punctuation-only passages first, ahead of the one holding का."""
    from retriever.lexical_index import LexicalIndex

    params = LexicalParams(stemmer="nepali", stopwords=None)
    flat(["नेपाल का इतिहास", "", "...", "हिमाल सुन्दर छ"], params, tmp_path / "bm25")
    index = LexicalIndex(tmp_path, params.record())
    assert index.tokenize("का") == []
    scores, rows = index.search(["का", "इतिहास का"], 4)
    assert rows[0].tolist() == [-1] * 4 and rows[1].tolist() == [0, -1, -1, -1]
