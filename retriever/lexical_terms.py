"""How BM25 cuts a text into words, for documents and queries alike, and the older ways folders still record.

Python's ``re`` ``\\w`` leaves out combining marks, so a pattern built on it split words at every vowel sign
(Devanagari, Bengali, Tamil, Thai, vowelled Arabic and Hebrew) into single letters, which were then dropped. The
``regex`` module's ``\\w`` is Unicode's word class (letters, marks, digits, connectors); ``\\p{No}`` keeps what
``re`` kept besides (``km²``, ``h₂o₂``). Before splitting, text is put in NFC, characters that sit inside a word
without being one of its letters (soft hyphen, zero-width joiners, word joiner) are dropped, and Turkish İ becomes
I, so lowercasing gives ``i`` (as Lucene's lowercasing does) rather than ``i`` and a combining dot.

Chinese and Japanese are written without spaces, so a run of their letters was one term, and a query matched only
a passage holding the very same run. Runs of Han, Hiragana, Katakana and Hangul are cut into overlapping pairs of
letters (``東京都`` is ``東京`` and ``京都``; a letter alone is itself), as Lucene's CJKAnalyzer does (its
CJKBigramFilter); letters of other scripts beside them in one run are a word of their own, by the same rule as any.
Thai, Lao, Khmer and Myanmar are written without spaces between words too; splitting them into words needs a
dictionary (ICU's), so a run of their letters is cut into overlapping pairs of grapheme clusters (a letter with its
vowel and tone marks: ``แมวนอน`` is ``แม``, ``มว``, ``วน``, ``นอ``, ``อน``), as CJK runs are into letter pairs, and a
word found inside a sentence. The manifest's ``cjk`` records both (``CJK``; ``CJK_ONLY`` before Thai, Lao, Khmer
and Myanmar pairs, none before CJK ones): a folder built before either splits its queries as its passages were.

Letters in a compatibility form (fullwidth ``ＢＭ２５``, the ligature ``ﬁ``, the micro sign ``µ``, ``Ⅻ``, ``²``) are
put in NFKC, so they are the plain letters a query types, and case is folded (``casefold``: ``Straße`` is
``strasse``, a final ``ς`` is ``σ``), as ICU's NFKC_Casefold (Lucene's ICUFoldingFilter) does. Symbols NFKC would
spell with letters (``™`` as ``TM``, ``㎏`` as ``kg``) stay what they were, a gap between words: ``Windows™`` is
``windows``, not ``windowstm``. The manifest records ``unicode: NFKC`` and ``casefold``; a folder built before (NFC,
lowercased) splits its queries that way.
"""
from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable

import regex

TOKEN_PATTERN = r"[\w\p{No}]{2,}"  # the regex module's syntax
UNICODE_FORM = "NFKC"
FORMER_UNICODE_FORM = "NFC"  # folders built before compatibility forms and case were folded
# Characters between words that NFKC rewrites (™, ㎏, ℃, fullwidth punctuation): a space, as they split words
_SYMBOLS_NFKC_REWRITES = regex.compile(r"(?V1)[\p{NFKC_QC=N}--[\w\p{No}]]")
INVISIBLE_IN_WORDS = "\u00ad\u200c\u200d\u2060\ufeff"
_FOLDS = str.maketrans({**dict.fromkeys(INVISIBLE_IN_WORDS), "\u0130": "I"})
_FOLDED = re.compile(f"[{INVISIBLE_IN_WORDS}\u0130]")  # str.translate walks every text; a search skips most
# The record's ``cjk``: CJK runs cut into letter pairs, and Thai, Lao, Khmer, Myanmar ones into cluster pairs; folders
# recorded with ``CJK_ONLY`` split only CJK runs so, and folders without it split either as words
CJK = "bigrams+southeast-asian-cluster-bigrams"
CJK_ONLY = "bigrams"
# Word characters of these scripts (scx: the prolonged sound mark ー too; the middle dot and 《》 are no letters),
# but for the two combining marks Latin shares with Katakana (x̅, ạ belong to the Latin letter before them)
_CJK_LETTER = r"[[\w&&[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}]]--\p{scx=Latin}]"
_CJK_RUN = regex.compile(f"(?V1){_CJK_LETTER}+")
_CJK_ANY = regex.compile(r"[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}]")  # letter or not: quicker
_WORD_OR_CJK_RUN = regex.compile(f"(?V1){_CJK_LETTER}+|(?:(?!{_CJK_LETTER})[\\w\\p{{No}}]){{2,}}")
_SEA_SCRIPTS = r"\p{scx=Thai}\p{scx=Lao}\p{scx=Khmer}\p{scx=Myanmar}"
_SEA_LETTER = f"[[\\w&&[{_SEA_SCRIPTS}]]--\\p{{scx=Latin}}]"  # three marks Latin shares stay with Latin
_PAIRED_ANY = regex.compile(f"[\\p{{scx=Han}}\\p{{scx=Hiragana}}\\p{{scx=Katakana}}\\p{{scx=Hangul}}{_SEA_SCRIPTS}]")
_PAIRED_RUNS = regex.compile(f"(?V1)({_CJK_LETTER}+)|({_SEA_LETTER}+)|"
                             f"(?:(?!{_CJK_LETTER}|{_SEA_LETTER})[\\w\\p{{No}}]){{2,}}")
_CLUSTER = regex.compile(r"\X")
# Folders built before: documents split by ``re`` on this pattern, put in NFC first when the record says so.
FORMER_PATTERN = r"(?u)\b\w\w+\b"

split_without_bigrams: Callable[[str], list[str]] = regex.compile(TOKEN_PATTERN).findall


def split_words(text: str) -> list[str]:
    """The words of a text (``TOKEN_PATTERN``), a CJK run's as its overlapping letter pairs and a Thai, Lao, Khmer
    or Myanmar run's as its overlapping grapheme cluster pairs (module docstring)."""
    if text.isascii() or not _PAIRED_ANY.search(text):  # other text is split exactly as before either pairing
        return split_without_bigrams(text)
    words = []
    for run in _PAIRED_RUNS.finditer(text):
        cjk, southeast_asian = run.group(1), run.group(2)
        if cjk or southeast_asian:
            letters = cjk or _CLUSTER.findall(southeast_asian)
            words.extend([letters[at] + letters[at + 1] for at in range(len(letters) - 1)] or [run.group(0)])
        else:
            words.append(run.group(0))
    return words


def split_cjk_pairs(text: str) -> list[str]:
    """``split_words`` as it was before Thai, Lao, Khmer and Myanmar pairs: their runs are words, for folders
    recorded with ``CJK_ONLY``."""
    if text.isascii() or not _CJK_ANY.search(text):
        return split_without_bigrams(text)
    words = []
    for word in _WORD_OR_CJK_RUN.findall(text):
        if _CJK_RUN.match(word):
            words.extend([word[at:at + 2] for at in range(len(word) - 1)] or [word])
        else:
            words.append(word)
    return words


def prepared(text: str) -> str:
    """A text as documents and queries are split: NFKC within words, invisible in-word characters dropped, İ as I,
    case folded (module docstring). The one place both go through; stopword lists too."""
    if text.isascii():  # NFKC leaves ASCII as it is, and casefold is lower there
        return text.lower()
    if not unicodedata.is_normalized(UNICODE_FORM, text):  # NFKC text holds none of the symbols NFKC rewrites
        text = unicodedata.normalize(UNICODE_FORM, _SYMBOLS_NFKC_REWRITES.sub(" ", text))
    text = _folded(text)
    return unicodedata.normalize(UNICODE_FORM, text.casefold())  # ǰ folds to j and a combining caron


def _folded(text: str) -> str:
    """Invisible in-word characters dropped and İ as I."""
    return text if _FOLDED.search(text) is None else text.translate(_FOLDS)


def _prepared_before_nfkc(text: str) -> str:
    """``prepared`` as folders built before NFKC and case folding prepared their texts: NFC, lowercased."""
    return (text if text.isascii() else _folded(unicodedata.normalize(FORMER_UNICODE_FORM, text))).lower()


def tokenizer_record() -> dict:
    """The manifest's ``lexical.tokenizer``: what queries must be split like."""
    return {**record_before_folding(), "unicode": UNICODE_FORM, "casefold": True}


def record_before_folding() -> dict:
    """The tokenizer record folders built before NFKC and case folding carry (with the pairs of ``CJK``)."""
    return {"pattern": TOKEN_PATTERN, "syntax": "regex", "unicode": FORMER_UNICODE_FORM,
            "dropped": [f"U+{ord(c):04X}" for c in INVISIBLE_IN_WORDS], "folded": {"U+0130": "I"}, "lowercase": True,
            "cjk": CJK}


def _lowercased(text: str) -> str:
    return text.lower()


def _nfc_lowercased(text: str) -> str:
    return unicodedata.normalize(FORMER_UNICODE_FORM, text).lower()


def splits_as_now(record: object) -> bool:
    """Whether a folder's ``lexical.tokenizer`` record is today's splitting; any other was split a former way."""
    return record == tokenizer_record()


def knows_splitting(record: object) -> bool:
    """Whether this version can split queries as a ``lexical.tokenizer`` record's passages were: today's record, one
    an earlier version wrote, or none (the first builds). Any other (a newer retriever's, a hand edit) cannot be."""
    if record is None:
        return True
    former = {"pattern": FORMER_PATTERN, "lowercase": True}
    return record in (tokenizer_record(), *_records_before(), former, {**former, "unicode": FORMER_UNICODE_FORM})


def _records_before() -> tuple[dict, dict, dict]:
    """The records of today's pattern earlier versions wrote, all before NFKC and case folding: with CJK and Thai,
    Lao, Khmer and Myanmar pairs, with CJK pairs alone, and with neither."""
    before = record_before_folding()
    return before, {**before, "cjk": CJK_ONLY}, {k: v for k, v in before.items() if k != "cjk"}


def differs_only_in_letters(old: object, new: object) -> bool:
    """Whether tokenizer record ``old`` is ``new`` (today's) but for what some letters become: recorded before NFKC
    and case folding, and maybe before CJK pairs or Thai, Lao, Khmer and Myanmar ones, and else alike."""
    return new == tokenizer_record() and old in _records_before()


def holds_letter_split_otherwise(terms: Iterable[str], recorded: object = None) -> bool:
    """Whether any term holds a letter today's splitting treats otherwise than the ``recorded`` tokenizer did: one
    ``split_words`` pairs and it did not, or one NFKC or case folding changes (a pyarrow string array is matched by
    Arrow, a memory mapped vocabulary a page at a time, no Python object per term; with no record, the letters of
    every change). Without one among the terms and stopwords of a part split so, such a letter of its passages stood
    alone (a longer run was a term, and a stemmer strips only letters of its own script, German ß as case folding
    does), so today's splitting changes its terms only by such a letter."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(terms, (pa.Array, pa.ChunkedArray)):
        terms = pa.array(list(terms), pa.string())
    if splits_as_now(recorded):
        return False
    pairs = recorded.get("cjk") if isinstance(recorded, dict) else None
    folded = isinstance(recorded, dict) and recorded.get("unicode") == UNICODE_FORM
    letters = _letter_class(pairs not in (CJK, CJK_ONLY), pairs != CJK, not folded)
    return bool(pc.any(pc.match_substring_regex(terms, letters)).as_py())


@functools.cache
def _letter_class(cjk: bool, southeast_asian: bool, folding: bool) -> str:
    """The letters CJK pairs cut, those Thai, Lao, Khmer and Myanmar pairs cut, and those NFKC or case folding
    changes (each where asked) as a character class of RE2 (Arrow's regex engine), its code points found by the
    regex module itself, so they cannot disagree. Case folding's are a few more than it changes in lowercased text."""
    every = "".join(map(chr, range(0x110000)))
    letters = [_CJK_LETTER] * cjk + [_SEA_LETTER] * southeast_asian
    letters += [r"[\p{NFKC_Quick_Check=N}\p{Changes_When_Casefolded}]"] * folding
    runs = regex.compile(f"(?V1)(?:{'|'.join(letters)})+").finditer(every)
    return "[" + "".join(f"\\x{{{run.start():X}}}-\\x{{{run.end() - 1:X}}}" for run in runs) + "]"


def _pattern_now(record: object) -> bool:
    return isinstance(record, dict) and record.get("pattern") == TOKEN_PATTERN


def recorded_splitting(record: object) -> tuple[Callable[[str], str], Callable[[str], list[str]]]:
    """(prepare, split) for queries of a folder whose manifest records ``record`` as its tokenizer: the way its
    documents were split, so a folder built before a change keeps matching its own terms."""
    if splits_as_now(record):
        return prepared, split_words
    if _pattern_now(record):  # before NFKC and case folding
        split = {CJK: split_words, CJK_ONLY: split_cjk_pairs}.get(record.get("cjk"), split_without_bigrams)
        return _prepared_before_nfkc, split
    nfc = isinstance(record, dict) and record.get("unicode") == FORMER_UNICODE_FORM
    return (_nfc_lowercased if nfc else _lowercased), re.compile(FORMER_PATTERN).findall
