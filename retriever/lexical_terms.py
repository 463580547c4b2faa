"""How BM25 cuts a text into words, for documents and queries alike, and the older ways folders still record.

Python's ``re`` ``\\w`` leaves out combining marks, so a pattern built on it split words at every vowel sign
(Devanagari, Bengali, Tamil, Thai, vowelled Arabic and Hebrew) into single letters, which were then dropped. The
``regex`` module's ``\\w`` is Unicode's word class (letters, marks, digits, connectors); ``\\p{No}`` keeps what
``re`` kept besides (``km²``, ``h₂o₂``). Before splitting, text is put in NFC, characters that sit inside a word
without being one of its letters (soft hyphen, zero-width joiners, word joiner) are dropped, and Turkish İ becomes
I, so lowercasing gives ``i`` (as Lucene's lowercasing does) rather than ``i`` and a combining dot.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

import regex

TOKEN_PATTERN = r"[\w\p{No}]{2,}"  # the regex module's syntax
UNICODE_FORM = "NFC"
INVISIBLE_IN_WORDS = "\u00ad\u200c\u200d\u2060\ufeff"
_FOLDS = str.maketrans({**dict.fromkeys(INVISIBLE_IN_WORDS), "\u0130": "I"})
_FOLDED = re.compile(f"[{INVISIBLE_IN_WORDS}\u0130]")  # str.translate walks every text; a search skips most
# Folders built before: documents split by ``re`` on this pattern, put in NFC first when the record says so.
FORMER_PATTERN = r"(?u)\b\w\w+\b"

split_words: Callable[[str], list[str]] = regex.compile(TOKEN_PATTERN).findall


def prepared(text: str) -> str:
    """A text as it is split: NFC, invisible in-word characters dropped, İ as I (lowercasing comes after)."""
    text = unicodedata.normalize(UNICODE_FORM, text)
    return text if text.isascii() or _FOLDED.search(text) is None else text.translate(_FOLDS)


def tokenizer_record() -> dict:
    """The manifest's ``lexical.tokenizer``: what queries must be split like."""
    return {"pattern": TOKEN_PATTERN, "syntax": "regex", "unicode": UNICODE_FORM,
            "dropped": [f"U+{ord(c):04X}" for c in INVISIBLE_IN_WORDS], "folded": {"U+0130": "I"}, "lowercase": True}


def _unchanged(text: str) -> str:
    return text


def _nfc(text: str) -> str:
    return unicodedata.normalize(UNICODE_FORM, text)


def splits_as_now(record: object) -> bool:
    """Whether a folder's ``lexical.tokenizer`` record is today's splitting; any other was split the former way."""
    return isinstance(record, dict) and record.get("pattern") == TOKEN_PATTERN


def recorded_splitting(record: object) -> tuple[Callable[[str], str], Callable[[str], list[str]]]:
    """(prepare, split) for queries of a folder whose manifest records ``record`` as its tokenizer: the way its
    documents were split, so a folder built before a change keeps matching its own terms."""
    if splits_as_now(record):
        return prepared, split_words
    nfc = isinstance(record, dict) and record.get("unicode") == UNICODE_FORM
    return (_nfc if nfc else _unchanged), re.compile(FORMER_PATTERN).findall
