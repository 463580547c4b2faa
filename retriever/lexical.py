"""A BM25 index beside the dense one, in a sub-folder of the index folder (``bm25/``; the manifest's
``lexical.directory`` names it, see ``retriever.lexical_opening``).

Built with bm25s (eager sparse BM25 in numpy, saved as plain ``.npy`` arrays that load memory-mapped)
and PyStemmer's Snowball stemmers. Documents are streamed from the index's own doc store, so the
corpus is never held in memory as text and adding BM25 to an existing index needs no encoder. While
building, the token ids are held as flat arrays (``retriever.lexical_build``). Row ``i`` of the BM25
matrix is row ``i`` of the doc store. Searching it is ``retriever.lexical_index``'s.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager as ContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from retriever.docstore_texts import document_count, document_texts
from retriever.errors import RetrieverError
from retriever.fusion import is_number
from retriever.integrity import file_records, file_sha256
from retriever.lexical_build import SORTED_VOCAB_FILE, build_bm25s, tokenize_flat
from retriever.lexical_names import canonical, unknown_name
from retriever.lexical_terms import holds_letter_split_otherwise, prepared, split_words, tokenizer_record

LEXICAL_DIR = "bm25"
METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
K1_MAX = 1e6  # term counts still rank (tf-idf at larger k1): Lucene's scores were all 0 at 1e300, BM25L's inf at 1e308


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
        for name in ("stemmer", "stopwords"):  # `en` stems as `english`: one setting, recorded by one name
            object.__setattr__(self, name, canonical(name, getattr(self, name)))

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
        unknown = self.stemmer and unknown_name("stemmer", self.stemmer)
        if unknown:
            raise RetrieverError(f"{unknown} or --bm25-stemmer none")
        if self.stopwords and unknown_name("stopwords", self.stopwords):
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
    return RetrieverError(f"--bm25-stopwords {unknown_name('stopwords', name)} or none")


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
        raise RetrieverError(f"{unknown_name('stemmer', language)} or --bm25-stemmer none") from None


def splits_alike(part: Path, stopwords: str | None, recorded: object = None) -> bool:
    """Whether a BM25 part's terms and stopword list hold no letter today's splitting treats otherwise than the
    ``recorded`` tokenizer (``holds_letter_split_otherwise``; no record: any change's): its sorted vocabulary is
    matched memory-mapped, never loaded. False for a part without one (built before it); a vocabulary that cannot be read raises Arrow's or
    the OS's error, for the caller to name as damage."""
    if not (part / SORTED_VOCAB_FILE).is_file():
        return False
    terms = _sorted_vocabulary(part / SORTED_VOCAB_FILE).column("term")
    listed = _tokenizer(LexicalParams(stemmer=None, stopwords=stopwords)).stopwords or ()
    return not holds_letter_split_otherwise(listed, recorded) and not holds_letter_split_otherwise(terms, recorded)


def _sorted_vocabulary(path: Path):
    """The part's sorted vocabulary, mapped; Arrow's own error where it cannot be read, which the caller's
    ``integrity.reading`` names as damage to the BM25 part (``docstore.open_mapped``'s said to rebuild the index)."""
    import pyarrow as pa

    return pa.ipc.open_file(pa.memory_map(str(path))).get_batch(0)


def unicode_normalised(texts: Iterable[str]) -> Iterator[str]:
    """Each text as documents are split (``lexical_terms.prepared``: NFKC, in-word invisibles dropped, case
    folded)."""
    return map(prepared, texts)


def prepared_stopwords(tokenizer, prepare: Callable[[str], str]) -> frozenset[str]:
    """The tokenizer's stopword list prepared as the words it is matched against (German daß as dass, where case is
    folded): passages and queries alike."""
    return frozenset(map(prepare, tokenizer.stopwords or ()))


def build_lexical(docstore: Path, target: Path, params: LexicalParams = LexicalParams(),
                  progress: bool = True, docstore_sha256: str | None = None,
                  reads: Callable[[], ContextManager] = nullcontext) -> dict:
    """Tokenise every doc-store row and write a bm25s index to ``target``; return the manifest record.
    Built through ``retriever.lexical_build`` (bm25s's formulas and files, flat arrays in memory). The record
    names the doc store by its SHA-256 (``docstore_sha256`` where the caller has it, else hashed here), the
    one the manifest records for it: ``lexical_opening.open_lexical`` refuses a part built from another.
    ``reads`` wraps each read of the doc store (``integrity.reading`` names it damaged), and nothing else."""
    params.check()
    tokenizer = _tokenizer(params)
    with reads():
        count = document_count(docstore)
    texts = tqdm(unicode_normalised(_each_read(document_texts(docstore), reads)), total=count, desc="bm25 tokenise",
                 unit="doc", file=sys.stderr, disable=not progress)
    flat = tokenize_flat(texts, tokenizer.splitter, prepared_stopwords(tokenizer, prepared), _stem_words(params.stemmer))
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
