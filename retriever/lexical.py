"""A BM25 index beside the dense one, in a sub-folder of the index folder (``bm25/``; the manifest's
``lexical.directory`` names it, see ``retriever.lexical_part``).

Built with bm25s (eager sparse BM25 in numpy, saved as plain ``.npy`` arrays that load memory-mapped)
and PyStemmer's Snowball stemmers. Documents are streamed from the index's own doc store, so the
corpus is never held in memory as text and adding BM25 to an existing index needs no encoder. While
building, the token ids are held as flat arrays (``retriever.lexical_build``). Row ``i`` of the BM25
matrix is row ``i`` of the doc store.
"""
from __future__ import annotations

import functools
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from retriever.docstore_texts import document_count, document_texts
from retriever.errors import RetrieverError
from retriever.fusion import is_number
from retriever.integrity import file_records, file_sha256
from retriever.id_order import sorted_position
from retriever.lexical_build import SORTED_VOCAB_FILE, build_bm25s, tokenize_flat
from retriever.lexical_terms import (holds_cjk_letter, prepared, recorded_splitting, split_words,
                                     tokenizer_record)

LEXICAL_DIR = "bm25"
METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
# Query terms whose vocabulary ids a searcher remembers: a lookup in the memory-mapped vocabulary is a
# binary search in Python, and a served index sees the same terms again and again. A few MB at most.
TERM_ID_CACHE_SIZE = 1 << 16
K1_MAX = 1e6  # term counts still rank (tf-idf at larger k1): Lucene's scores were all 0 at 1e300, BM25L's inf at 1e308
# The names bm25s's tokenizer takes for its stopword lists (its ``STOPWORDS_<LIST>`` constants), known here so that
# checking a setting does not import bm25s, whose scipy import costs every command that reads a manifest.
_STOPWORD_LIST_OF = {name: constant for constant, names in (
    ("EN", "english en"), ("EN_PLUS", "english_plus en_plus"), ("GERMAN", "german de"), ("DUTCH", "dutch nl"),
    ("FRENCH", "french fr"), ("SPANISH", "spanish es"), ("PORTUGUESE", "portuguese pt"), ("ITALIAN", "italian it"),
    ("RUSSIAN", "russian ru"), ("SWEDISH", "swedish sv"), ("NORWEGIAN", "norwegian no"), ("CHINESE", "chinese zh"),
    ("TURKISH", "turkish tr"), ("KOREAN", "korean ko"), ("DANISH", "danish da")) for name in names.split()}


@dataclass(frozen=True)
class LexicalParams:
    """Defaults are Pyserini's BEIR "flat" BM25 (k1 0.9, b 0.4, Lucene scoring, English stemming and stopwords)."""

    k1: float = 0.9
    b: float = 0.4
    method: str = "lucene"
    stemmer: str | None = "english"
    stopwords: str | None = "en"

    def __post_init__(self) -> None:
        for name in ("k1", "b"):  # a NumPy float32 as the Python float: bm25s and the manifest write them as JSON
            value = getattr(self, name)
            if is_number(value) and type(value) not in (int, float):
                object.__setattr__(self, name, float(value))

    def check(self) -> None:
        """Refuse an unknown method, stemmer or stopword list up front: `build` learns of it before hours of
        encoding, not after."""
        if self.method not in METHODS:
            raise RetrieverError(f"unknown BM25 method {self.method!r}; use one of {', '.join(METHODS)}")
        # nan passes click's ranges and "<" tests, then makes every score NaN and the manifest invalid JSON
        if not (is_number(self.k1) and 0 <= self.k1 <= K1_MAX):  # past it, scores leave float32's range
            raise RetrieverError(f"--bm25-k1 must be a number from 0 to {K1_MAX:.0e}, not {self.k1!r}".replace("e+0", "e"))
        if not (is_number(self.b) and math.isfinite(self.b) and 0 <= self.b <= 1):
            raise RetrieverError(f"--bm25-b must be a finite number within [0, 1], not {self.b!r}")
        for name, what in (("stemmer", "a stemmer"), ("stopwords", "a stopword list")):  # the manifest records names:
            value = getattr(self, name)  # a list or True built a part that manifest then called damaged
            if not isinstance(value, (str, type(None))):
                raise RetrieverError(f"--bm25-{name} must be the name of {what} or None, not {value!r}")
        _snowball(self.stemmer)
        if self.stopwords and self.stopwords not in _STOPWORD_LIST_OF:
            raise _unknown_stopwords(self.stopwords)

    def record(self) -> dict:
        """What the manifest keeps: enough to tokenise queries exactly as the documents were."""
        import bm25s

        return {**asdict(self), "library": "bm25s", "library_version": bm25s.__version__,
                "tokenizer": tokenizer_record(),
                "stemmer_library": "PyStemmer (Snowball)" if self.stemmer else None,
                "fields": "title + text", "directory": LEXICAL_DIR}


def _tokenizer(params: LexicalParams):
    """bm25s's tokenizer with our pattern, stopwords and stemmer (one place, for documents and queries)."""
    from bm25s.tokenization import Tokenizer

    try:
        return Tokenizer(lower=True, splitter=split_words, stopwords=params.stopwords or None,
                         stemmer=_stemmer(params.stemmer))
    except ValueError:  # bm25s's own message refuses 'English' while listing it, and suggests a list
        raise _unknown_stopwords(params.stopwords) from None


def _unknown_stopwords(name: object) -> RetrieverError:
    return RetrieverError(f"--bm25-stopwords {name!r} is not a stopword list; use one of "
                          f"{', '.join(stopword_lists())} (lower case) or none")


def stopword_lists() -> list[str]:
    """The stopword lists bm25s ships (its ``STOPWORDS_<NAME>`` constants), by the names it takes."""
    return sorted({constant.lower() for constant in _STOPWORD_LIST_OF.values()})


def _stemmer(language: str | None):
    stemmer = _snowball(language)
    return stemmer.stemWord if stemmer else None


def _stem_words(language: str | None):
    """A whole list at once (PyStemmer's C loop), for documents."""
    stemmer = _snowball(language)
    return stemmer.stemWords if stemmer else None


def _snowball(language: str | None):
    if not language:
        return None
    import Stemmer

    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise RetrieverError(f"no stemmer for {language!r}; use one of {', '.join(Stemmer.algorithms())} "
                             "or --bm25-stemmer none") from None


def cjk_free(part: Path, stopwords: str | None, recorded: object = None) -> bool:
    """Whether a BM25 part's terms and stopword list hold no letter that a pairing the ``recorded`` tokenizer
    lacks cuts (``holds_cjk_letter``; no record: any pairing's): its sorted vocabulary is matched memory-mapped,
    never loaded. False for a part without one (built before it); a vocabulary that cannot be read raises Arrow's or
    the OS's error, for the caller to name as damage."""
    if not (part / SORTED_VOCAB_FILE).is_file():
        return False
    terms = _sorted_vocabulary(part / SORTED_VOCAB_FILE).column("term")
    listed = _tokenizer(LexicalParams(stemmer=None, stopwords=stopwords)).stopwords or ()
    return not holds_cjk_letter(listed, recorded) and not holds_cjk_letter(terms, recorded)


def _sorted_vocabulary(path: Path):
    """The part's sorted vocabulary, mapped; Arrow's own error where it cannot be read, which the caller's
    ``integrity.reading`` names as damage to the BM25 part (``docstore.open_mapped``'s said to rebuild the index)."""
    import pyarrow as pa

    return pa.ipc.open_file(pa.memory_map(str(path))).get_batch(0)


def unicode_normalised(texts: Iterable[str]) -> Iterator[str]:
    """Each text as documents are split (``lexical_terms.prepared``: NFC, in-word invisibles dropped)."""
    return map(prepared, texts)


class QueryTokenizer:
    """The documents' tokenisation for query texts, without growing a vocabulary per query. ``recorded``: the
    manifest's tokenizer record, so a folder built before a change splits its queries as its documents were."""

    def __init__(self, params: LexicalParams, recorded: object = None) -> None:
        tokenizer = _tokenizer(params)
        self._stem = tokenizer.stemmer
        self._stopwords = frozenset(tokenizer.stopwords or ())
        self._prepare, self._split = recorded_splitting(tokenizer_record() if recorded is None else recorded)

    def __call__(self, text: str) -> list[str]:
        words = [w for w in self._split(self._prepare(text).lower()) if w not in self._stopwords]
        return [self._stem(w) for w in words] if self._stem else words


def build_lexical(docstore: Path, target: Path, params: LexicalParams = LexicalParams(),
                  progress: bool = True, docstore_sha256: str | None = None,
                  reads: Callable[[], ContextManager] = nullcontext) -> dict:
    """Tokenise every doc-store row and write a bm25s index to ``target``; return the manifest record.
    Built through ``retriever.lexical_build`` (bm25s's formulas and files, flat arrays in memory). The record
    names the doc store by its SHA-256 (``docstore_sha256`` where the caller has it, else hashed here), the
    one the manifest records for it: ``lexical_part.open_lexical`` refuses a part built from another.
    ``reads`` wraps each read of the doc store (``integrity.reading`` names it damaged), and nothing else."""
    params.check()
    tokenizer = _tokenizer(params)
    with reads():
        count = document_count(docstore)
    texts = tqdm(unicode_normalised(_each_read(document_texts(docstore), reads)), total=count, desc="bm25 tokenise",
                 unit="doc", file=sys.stderr, disable=not progress)
    flat = tokenize_flat(texts, tokenizer.splitter, frozenset(tokenizer.stopwords or ()), _stem_words(params.stemmer))
    vocabulary, tokens = build_bm25s(flat, target, params.k1, params.b, params.method)
    return {**params.record(), "documents": count, "vocabulary": vocabulary, "tokens": tokens,
            "docstore": {"file": docstore.name, "sha256": docstore_sha256 or file_sha256(docstore)},
            "files": file_records(target)}


def _each_read(items: Iterator[str], reads: Callable[[], ContextManager]) -> Iterator[str]:
    """``items``, each taken from it inside ``reads()``: an error reading is the doc store's, one tokenising not."""
    while True:
        with reads():
            item = next(items, None)
        if item is None:
            return
        yield item


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
