from __future__ import annotations

import unicodedata

from retriever.lexical_terms import FORMER_PATTERN, recorded_splitting, tokenizer_record


def split(record: object, text: str) -> list[str]:
    prepare, words = recorded_splitting(record)
    return words(prepare(text).lower())


def test_folders_built_before_split_their_queries_as_their_documents_were():
    """A query is split the way the folder's own documents were: by the recorded pattern and Unicode form."""
    nfd = unicodedata.normalize("NFD", "café हिन्दी co\u00adop")
    assert split(tokenizer_record(), nfd) == ["café", "हिन्दी", "coop"]
    assert split({"pattern": FORMER_PATTERN, "unicode": "NFC", "lowercase": True}, nfd) == ["café", "co", "op"]
    assert split({"pattern": FORMER_PATTERN, "lowercase": True}, nfd) == ["cafe", "co", "op"]
    assert split({}, "İstanbul") == ["stanbul"] and split(tokenizer_record(), "İstanbul") == ["istanbul"]


def test_splitting_keeps_what_the_former_pattern_kept_in_latin_text():
    text = "Covid-19 rose 3.5% in 2020; β-catenin, h₂o₂, km², snake_case, naïve, ÉCOLE"
    assert split(tokenizer_record(), text) == split({"pattern": FORMER_PATTERN, "unicode": "NFC"}, text)
