"""Searching a BM25 part: its saved bm25s arrays memory-mapped, queries split, stopworded and stemmed as its
documents were (``QueryTokenizer``), each term's posting list read once. Row ``i`` is row ``i`` of the doc store."""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager as ContextManager, nullcontext
from pathlib import Path

import numpy as np

from retriever.errors import IndexDamaged, RetrieverError
from retriever.id_order import sorted_position
from retriever.lexical import LEXICAL_DIR, LexicalParams, _sorted_vocabulary, _tokenizer, prepared_stopwords
from retriever.lexical_build import SORTED_VOCAB_FILE
from retriever.lexical_terms import recorded_splitting, tokenizer_record

# Query terms whose vocabulary ids a searcher remembers: a lookup in the memory-mapped vocabulary is a
# binary search in Python, and a served index sees the same terms again and again. A few MB at most.
TERM_ID_CACHE_SIZE = 1 << 16


class QueryTokenizer:
    """The documents' tokenisation for query texts, without growing a vocabulary per query. ``recorded``: the
    manifest's tokenizer record, so a folder built before a change splits its queries as its documents were."""

    def __init__(self, params: LexicalParams, recorded: object = None) -> None:
        tokenizer = _tokenizer(params)
        self._stem = tokenizer.stemmer
        self._prepare, self._split = recorded_splitting(tokenizer_record() if recorded is None else recorded)
        self._stopwords = prepared_stopwords(tokenizer, self._prepare)

    def __call__(self, text: str) -> list[str]:
        words = self._words(text)
        # a word stemmed to nothing is no term, as in documents: "" is the token of passages without words
        return [term for term in map(self._stem, words) if term] if self._stem else words

    def stemmed_to_nothing(self, text: str) -> list[str]:
        """The words of ``text`` that its stemmer leaves nothing of (Nepali का), so are no terms: a no-hits note
        names them."""
        return [word for word in self._words(text) if not self._stem(word)] if self._stem else []

    def _words(self, text: str) -> list[str]:
        return [w for w in self._split(self._prepare(text)) if w not in self._stopwords]


class LexicalIndex:
    """A saved bm25s index, memory-mapped, searched by doc-store row; ``reads(file)`` wraps a file's read to name it."""

    def __init__(self, index_dir: Path, record: dict, reads: Callable[[Path], ContextManager] = nullcontext) -> None:
        import bm25s

        if not (index_dir / record.get("directory", LEXICAL_DIR)).is_dir():
            raise RetrieverError(f"{index_dir}: the manifest records a BM25 index but {LEXICAL_DIR}/ is missing; "
                                 f"rebuild it with `retriever bm25 {index_dir} --overwrite`")
        self.record = record
        params = {name: record[name] for name in ("k1", "b", "method", "stemmer", "stopwords") if name in record}
        self.tokenize = QueryTokenizer(LexicalParams(**params), record.get("tokenizer", {}))
        folder = index_dir / record.get("directory", LEXICAL_DIR)
        sorted_vocab = folder / SORTED_VOCAB_FILE
        mapped_vocab = sorted_vocab.is_file()
        self.model = bm25s.BM25.load(str(folder), mmap=True, load_vocab=not mapped_vocab)
        if mapped_vocab:
            with reads(sorted_vocab):
                vocabulary = _sorted_vocabulary(sorted_vocab)
            self._terms, self._term_ids = vocabulary.column("term"), vocabulary.column("id")
            self._mapped_term_id = functools.lru_cache(maxsize=TERM_ID_CACHE_SIZE)(self._look_up_term_id)
        else:  # a folder built before the sorted vocabulary: bm25s's JSON, loaded whole
            self._terms = None
        _check_scores_are_numbers(index_dir, record, self.model.scores["data"])
        self.count = int(self.model.scores["num_docs"])
        # plain views of the memory maps, made once: slicing an np.memmap makes a memmap object per posting list
        self._postings = tuple(np.asarray(self.model.scores[name]) for name in ("data", "indices", "indptr"))

    def term_id(self, term: str) -> int | None:
        """The vocabulary id of a term, or None when the index does not know it."""
        if self._terms is None:
            return self.model.vocab_dict.get(term)
        return self._mapped_term_id(term)

    def _look_up_term_id(self, term: str) -> int | None:
        position = sorted_position(self._terms, term)
        return None if position is None else self._term_ids[position].as_py()

    def term_counts(self, terms: list[str]) -> tuple[list[int], list[int]]:
        """Ids of the distinct known terms, in first-occurrence order, and how often the query holds each: each
        is looked up once."""
        known = [(self.term_id(term), count) for term, count in Counter(terms).items()]
        known = [(term_id, count) for term_id, count in known if term_id is not None]
        return [term_id for term_id, _ in known], [count for _, count in known]

    def scores(self, ids: list[int], counts: list[int]) -> np.ndarray:
        """Every document's BM25 score for these terms, each counted as often as the query holds it (as Anserini
        weights a repeated query term): bm25s's sum, but each posting list is read once, so a query repeating a
        term 100,000 times costs one read of it, not 100,000 (a 1M-character query took minutes)."""
        data, indices, indptr = self._postings
        total = np.zeros(self.count, dtype=np.dtype(self.model.dtype))
        for term, count in zip(ids, counts):
            start, end = indptr[term], indptr[term + 1]
            weights = data[start:end]
            np.add.at(total, indices[start:end], weights if count == 1 else weights * total.dtype.type(count))
        if self.model.nonoccurrence_array is not None:  # bm25l and bm25+ score absent terms too
            total += (self.model.nonoccurrence_array[ids] * np.asarray(counts, dtype=total.dtype)).sum()
        return total

    def _holding(self, ids: list[int]) -> np.ndarray:
        """Which documents hold at least one of these terms: the only ones a search returns."""
        _, indices, indptr = self._postings
        held = np.zeros(self.count, dtype=bool)
        for term in ids:
            held[indices[indptr[term]:indptr[term + 1]]] = True
        return held

    def search(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, doc-store rows) per query, rows padded with -1; documents sharing no term are left out."""
        k = max(1, min(k, self.count))
        scores = np.full((len(texts), k), -np.inf, dtype=np.float32)
        rows = np.full((len(texts), k), -1, dtype=np.int64)
        for i, text in enumerate(texts):
            ids, counts = self.term_counts(self.tokenize(text))
            if not ids:
                continue
            all_scores = self.scores(ids, counts)
            if self.model.nonoccurrence_array is not None:  # bm25l and bm25+ give every document a score
                all_scores[~self._holding(ids)] = 0
            top = np.argpartition(-all_scores, k - 1)[:k] if k < len(all_scores) else np.arange(len(all_scores))
            top = top[np.lexsort((top, -all_scores[top]))]
            top = top[all_scores[top] > 0]
            scores[i, :len(top)] = all_scores[top]
            rows[i, :len(top)] = top
        return scores, rows


def _check_scores_are_numbers(index_dir: Path, record: dict, scores: np.ndarray) -> None:
    """Refuse a BM25+ part built at k1 0 before its absent-term score was mended (``lexical_build._absent_tfc``):
    every score it holds is NaN, so bm25 and hybrid search found nothing and said no passage shared a term. Its
    first stored score tells (each is NaN there), read alone from the memory map."""
    if record.get("method") == "bm25+" and len(scores) and np.isnan(scores[0]):
        settings = (f"--bm25-method bm25+ --bm25-k1 0 --bm25-b {record.get('b')} --bm25-stemmer "
                    f"{record.get('stemmer') or 'none'} --bm25-stopwords {record.get('stopwords') or 'none'}")
        raise IndexDamaged(f"{index_dir}: its BM25 part scores every passage NaN (BM25+ at k1 0, built before that was "
                           f"mended), so it finds nothing; rebuild it with `retriever bm25 {index_dir} --overwrite "
                           f"{settings}` (no re-encoding)")
