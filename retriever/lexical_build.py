"""Building the BM25 part with memory that grows with the token count, not with Python objects.

bm25s's ``Tokenizer`` + ``BM25.index`` keep three vocabulary dicts, a Python list per document and a
set of every token id, and score document by document through ``Counter``s. With millions of
passages that was most of an ``ivf-ondisk`` build's memory (benchmarks/README.md, "Scale").
Here the documents become one flat int32 array, numbered by Arrow's dictionary encoding (no Python
object per distinct term), and the vocabulary is written out before the scores are computed. The score matrix is computed with NumPy from
bm25s's own idf and tf formulas (``bm25s.scoring``), saved by ``BM25.save`` and read back by
``BM25.load``: the same files as ``BM25.index`` would write (tested), at a fraction of the memory.
"""
from __future__ import annotations

import json
import os
from array import array
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retriever.id_order import write_arrow_batch

if TYPE_CHECKING:
    import bm25s

SCORE_CHUNK = 4_000_000  # (document, term) pairs scored at once
TERM_CHUNK_DOCS = 1_000_000  # documents whose distinct terms are counted at once
VOCAB_FILE = "vocab.index.json"  # bm25s's name for it (``BM25.save``'s ``vocab_name``)
SORTED_VOCAB_FILE = "vocab.sorted.arrow"  # the same terms sorted, with their ids: searched mapped, never loaded
SORTED_VOCAB_SCHEMA = pa.schema([("term", pa.string()), ("id", pa.int32())])
EMPTY_TOKEN = ""  # bm25s's id 0: the one token of a document with no words left


@dataclass
class FlatTokens:
    """Every document's token ids end to end, each document's length, and the vocabulary (an Arrow
    string array: ``vocabulary[id]`` is the term) in bm25s's numbering: ids by first appearance,
    ``""`` first."""

    vocabulary: pa.Array
    tokens: np.ndarray
    lengths: np.ndarray


def tokenize_flat(texts: Iterable[str], split: Callable[[str], list[str]], stopwords: frozenset[str],
                  stem_words: Callable[[list[str]], list[str]] | None,
                  batch_tokens: int = 1_000_000) -> FlatTokens:
    """bm25s's ``streaming_tokenize`` (split, drop stopwords, stem) of texts already lower-cased (case folded:
    ``lexical_terms.prepared``), into flat arrays; a word stemmed to nothing is dropped, where bm25s kept it as its
    empty token, the one term of a passage without words.

    ``stem_words`` stems a list at once (PyStemmer's C loop and cache), or is None. Terms become
    Arrow strings a batch at a time and Arrow numbers them (``dictionary_encode``, then
    ``unify_dictionaries``), so no Python object per distinct term outlives its batch.
    """
    pool = pa.system_memory_pool()  # frees to the allocator NumPy uses; Arrow's default pool keeps its peak

    def encoded(terms: list[str]) -> pa.DictionaryArray:
        return pc.dictionary_encode(pa.array(terms, pa.string(), memory_pool=pool), memory_pool=pool)

    chunks, lengths, batch = [encoded([EMPTY_TOKEN])], array("i"), []
    for text in texts:
        words = [word for word in split(text) if word not in stopwords]
        if stem_words and words:  # a word stemmed to nothing (Nepali का) is no term: "" is the no-word token
            words = [term for term in stem_words(words) if term]
        terms = words or [EMPTY_TOKEN]
        batch.extend(terms)
        lengths.append(len(terms))
        if len(batch) >= batch_tokens:
            chunks.append(encoded(batch))
            batch = []
    chunks.append(encoded(batch))
    unified = pa.chunked_array(chunks).unify_dictionaries(memory_pool=pool)
    del chunks
    tokens = np.concatenate([chunk.indices.to_numpy() for chunk in unified.chunks[1:]]).astype(np.int32, copy=False)
    vocabulary = unified.chunk(0).dictionary
    del unified
    pool.release_unused()
    return FlatTokens(vocabulary, tokens, np.frombuffer(lengths, dtype=np.int32))


def write_vocab(vocabulary: pa.Array, path: Path, slice_terms: int = 100_000) -> None:
    """The vocabulary as bm25s's JSON object (term → id), a slice at a time."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("{")
        for first in range(0, len(vocabulary), slice_terms):
            terms = vocabulary.slice(first, slice_terms).to_pylist()
            handle.write(",".join(f"{json.dumps(term, ensure_ascii=False)}:{first + number}"
                                  for number, term in enumerate(terms)))
            if first + slice_terms < len(vocabulary):
                handle.write(",")
        handle.write("}")


def write_sorted_vocab(vocabulary: pa.Array, path: Path) -> None:
    """The vocabulary sorted, each term with its id, as one Arrow record batch: searching maps it and
    binary-searches it (``id_order.sorted_position``) instead of loading bm25s's JSON into a dict."""
    pool = pa.system_memory_pool()
    order = pc.sort_indices(vocabulary, memory_pool=pool)
    batch = pa.record_batch([vocabulary.take(order), order.cast(pa.int32())], schema=SORTED_VOCAB_SCHEMA)
    write_arrow_batch(batch, path)
    del order, batch
    pool.release_unused()


def document_terms(flat: FlatTokens, n_vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(document, term, term frequency) of each distinct term of each document, in document order.
    Takes ``flat.tokens`` (released once counted); the outputs are written in place, never concatenated."""
    tokens, lengths, flat.tokens = flat.tokens, flat.lengths, None
    starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    docs, terms = np.empty(len(tokens), np.int32), np.empty(len(tokens), np.int32)
    counts, filled = np.empty(len(tokens), np.float32), 0
    for first in range(0, len(lengths), TERM_CHUNK_DOCS):
        last = min(first + TERM_CHUNK_DOCS, len(lengths))
        doc = np.repeat(np.arange(last - first, dtype=np.int64), lengths[first:last])
        keys, tf = np.unique(doc * n_vocab + tokens[starts[first]:starts[last]], return_counts=True)
        part = slice(filled, filled + len(keys))
        docs[part], terms[part], counts[part] = keys // n_vocab + first, keys % n_vocab, tf
        filled += len(keys)
    return docs[:filled], terms[:filled], counts[:filled]


def _per_term(function, doc_freq: np.ndarray, dtype: str) -> np.ndarray:
    """``function(df)`` for every term that occurs, called once per distinct df (few: Zipf), as bm25s
    fills its idf array term by term; 0 for terms in no document."""
    values = np.zeros(len(doc_freq), dtype=dtype)
    distinct, where = np.unique(doc_freq, return_inverse=True)
    results = np.array([function(int(df)) if df else 0.0 for df in distinct], dtype=dtype)
    values[:] = results[where]
    return values


def score_matrix(model: bm25s.BM25, flat: FlatTokens, n_vocab: int) -> dict:
    """The CSC score matrix (documents × vocabulary) ``model.build_index_from_ids`` would make, and
    ``model.nonoccurrence_array`` set as it would be. Each array is dropped as soon as it is used."""
    from bm25s.scoring import _select_idf_scorer

    lengths = flat.lengths
    n_docs, avg_len = len(lengths), lengths.mean()
    doc, term, tf = document_terms(flat, n_vocab)
    doc_freq = np.bincount(term, minlength=n_vocab)
    idf_of = _select_idf_scorer(model.idf_method)
    idf = _per_term(lambda df: idf_of(df, N=n_docs), doc_freq, model.dtype)
    model.nonoccurrence_array = None
    if model.method in model.methods_requiring_nonoccurrence:
        absent = _absent_tfc(model, avg_len)
        model.nonoccurrence_array = _per_term(lambda df: idf_of(df, N=n_docs) * absent, doc_freq, model.dtype)
    scores = np.empty(len(tf), dtype=model.dtype)
    for first in range(0, len(tf), SCORE_CHUNK):  # float64 temporaries for a chunk only
        part = slice(first, first + SCORE_CHUNK)
        values = idf[term[part]] * _tfc(model, tf[part], lengths[doc[part]].astype(np.float64), avg_len)
        if model.nonoccurrence_array is not None:
            values -= model.nonoccurrence_array[term[part]]
        scores[part] = values
    del tf
    order = np.argsort(term, kind="stable")  # columns by term, rows (documents) ascending within each
    del term
    data = scores[order]
    del scores
    indices = doc[order].astype(model.int_dtype, copy=False)
    del doc, order
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)  # bm25s's (NumPy backend) index types
    np.cumsum(doc_freq, out=indptr[1:])
    return {"data": data, "indices": indices, "indptr": indptr, "num_docs": n_docs}


def _tfc(model, tf, doc_length, avg_length):
    """bm25s's term-frequency component for the model's method (arrays or scalars, in float64 as bm25s)."""
    from bm25s.scoring import _select_tfc_scorer

    return _select_tfc_scorer(model.method)(tf_array=tf, l_d=doc_length, l_avg=avg_length, k1=model.k1, b=model.b,
                                            delta=model.delta)


def _absent_tfc(model, avg_length: float) -> float:
    """The term-frequency component bm25l and bm25+ give a term a passage lacks: bm25s's at tf 0, but BM25+'s is
    its delta alone, as it is for every k1 above 0: at k1 0 bm25s's (k1 + 1) tf / (tf + k1 ...) is 0 / 0, NaN, and
    made every score NaN (no query found anything)."""
    if model.method == "bm25+":
        return float(model.delta)
    return _tfc(model, 0, avg_length, avg_length)


def build_bm25s(flat: FlatTokens, target: Path, k1: float, b: float, method: str) -> tuple[int, int]:
    """Write a bm25s index of ``flat`` into ``target``; return (vocabulary size, token count).
    ``flat`` is emptied on the way, so its arrays are freed as soon as they are used."""
    import bm25s

    target.mkdir(parents=True, exist_ok=True)
    n_vocab, n_tokens = len(flat.vocabulary), len(flat.tokens)
    write_vocab(flat.vocabulary, target / (VOCAB_FILE + ".part"))
    write_sorted_vocab(flat.vocabulary, target / SORTED_VOCAB_FILE)
    flat.vocabulary = None
    model = bm25s.BM25(k1=k1, b=b, method=method)
    model.scores = score_matrix(model, flat, n_vocab)
    flat.lengths = None
    model.vocab_dict = {}  # BM25.save writes it; the real one is already on disk
    model.save(str(target), show_progress=False)
    os.replace(target / (VOCAB_FILE + ".part"), target / VOCAB_FILE)
    return n_vocab, n_tokens
