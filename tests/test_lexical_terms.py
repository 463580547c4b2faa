from __future__ import annotations

import unicodedata

from retriever.lexical_terms import FORMER_PATTERN, record_before_folding, recorded_splitting, tokenizer_record


def split(record: object, text: str) -> list[str]:
    prepare, words = recorded_splitting(record)
    return words(prepare(text))


def test_folders_built_before_split_their_queries_as_their_documents_were():
    """A query is split the way the folder's own documents were: by the recorded pattern and Unicode form."""
    nfd = unicodedata.normalize("NFD", "café हिन्दी co\u00adop")
    assert split(tokenizer_record(), nfd) == ["café", "हिन्दी", "coop"]
    assert split({"pattern": FORMER_PATTERN, "unicode": "NFC", "lowercase": True}, nfd) == ["café", "co", "op"]
    assert split({"pattern": FORMER_PATTERN, "lowercase": True}, nfd) == ["cafe", "co", "op"]
    assert split({}, "İstanbul") == ["stanbul"] and split(tokenizer_record(), "İstanbul") == ["istanbul"]


def test_splitting_keeps_what_the_former_pattern_kept_in_latin_text():
    text = "Covid-19 rose 3.5% in 2020; β-catenin, h₂o₂, km², snake_case, naïve, ÉCOLE"
    before = split({"pattern": FORMER_PATTERN, "unicode": "NFC"}, text)
    assert split(tokenizer_record(), text) == [unicodedata.normalize("NFKC", word) for word in before]  # h2o2, km2


def test_cjk_runs_are_cut_into_overlapping_letter_pairs():
    """Chinese and Japanese have no spaces, so a run of letters was one term and a query found only a passage
    holding that very run; now each run is its overlapping pairs (Lucene's CJKAnalyzer), a letter alone itself."""
    now = tokenizer_record()
    assert split(now, "東京都に住む") == ["東京", "京都", "都に", "に住", "住む"]
    assert split(now, "コーヒー 한국어 東") == ["コー", "ーヒ", "ヒー", "한국", "국어", "東"]
    assert split(now, "PDF文書をabc 《建國》·x²") == ["pdf", "文書", "書を", "abc", "建國", "x2"]
    before = record_before_folding()
    assert split({**before, "cjk": "bigrams"}, "ภาษาไทย 東京都") == ["ภาษาไทย", "東京", "京都"]  # before Thai pairs
    assert split({**before, "cjk": None}, "東京都 abc") == ["東京都", "abc"]  # a folder built before bigrams
    assert split({"pattern": FORMER_PATTERN, "unicode": "NFC"}, "東京都") == ["東京都"]


def test_a_folder_split_before_cjk_bigrams_is_not_the_current_splitting():
    """``info`` says a rebuild would change its terms (for text holding CJK letters)."""
    from retriever.lexical_terms import splits_as_now

    record = record_before_folding()
    assert splits_as_now(tokenizer_record()) and not splits_as_now({k: v for k, v in record.items() if k != "cjk"})


def test_cjk_letters_are_found_in_terms_as_split_words_pairs_them():
    """The check behind a folder split before CJK pairs counting as current: Arrow's engine matches exactly the
    letters ``split_words`` pairs (kana marks, Hangul jamo), not CJK punctuation, fullwidth Latin or ``km²``."""
    import pyarrow as pa

    from retriever.lexical_terms import holds_letter_split_otherwise, split_words, split_without_bigrams

    folded = {**record_before_folding(), "cjk": None, "unicode": "NFKC"}  # as if folded before pairs: pairs alone
    for letter in ["東", "ー", "々", "ㇰ", "𠀋", "ᄀ", "한"]:
        assert holds_letter_split_otherwise(pa.array(["abc", f"x{letter}"]), folded)
        assert split_words(f"ab{letter}") != ["ab" + letter]
    for text in ["・", "。", "《》", "ａｂ", "km²", "naïve", "हिन्दी"]:
        assert not holds_letter_split_otherwise([text], folded) and split_words(text) == split_without_bigrams(text)


def test_only_a_record_made_before_folding_or_letter_pairs_differs_only_in_letters():
    from retriever.lexical_terms import differs_only_in_letters

    now, folding = tokenizer_record(), record_before_folding()
    before = {k: v for k, v in folding.items() if k != "cjk"}
    assert differs_only_in_letters(before, now) and differs_only_in_letters(folding, now)
    assert not differs_only_in_letters(now, now) and not differs_only_in_letters({**before, "unicode": None}, now)
    assert not differs_only_in_letters({"pattern": FORMER_PATTERN, "unicode": "NFC", "lowercase": True}, now)
    assert not differs_only_in_letters({**before, "cjk": None}, now) and not differs_only_in_letters("x", now)


def test_combining_marks_latin_shares_with_kana_stay_in_their_latin_word():
    """U+0305 and U+0323 are listed for Katakana as well as Latin; in ``x̅`` or ``ạ`` they belong to the Latin
    letter before them, so Latin text holding them is split as before CJK pairs."""
    from retriever.lexical_terms import split_without_bigrams, split_words
    for text in ("x\u0305 mean", "g\u0323 sound", "a\u0323b\u0305c 東京"):
        assert split_words(text)[:2] == split_without_bigrams(text)[:2], text


def test_thai_lao_khmer_and_myanmar_runs_are_cut_into_overlapping_cluster_pairs():
    """Written without spaces, a Thai sentence was one term, so no word of it was ever found; now each run is its
    overlapping pairs of grapheme clusters (a letter with its marks), so a word's pairs are a sentence's too."""
    now = tokenizer_record()
    sentence = split(now, "แมวนอนบนเสื่อ")
    assert sentence == ["แม", "มว", "วน", "นอ", "อน", "นบ", "บน", "นเ", "เสื่", "สื่อ"]
    assert set(split(now, "แมว")) <= set(sentence) and set(split(now, "เสื่อ")) <= set(sentence)
    assert split(now, "ភាសាខ្មែរ") == ["ភាសា", "សាខ្មែ", "ខ្មែរ"]  # Khmer subscripts stay in their cluster
    assert split(now, "ພາສາລາວ")[:2] == ["ພາ", "າສ"] and split(now, "မြန်မာ") == ["မြန်", "န်မ", "မာ"]
    assert split(now, "ก GPU2ภาษา 東京") == ["ก", "gpu2", "ภา", "าษ", "ษา", "東京"]
    assert split(now, "Thai: ok ไทย") == ["thai", "ok", "ไท", "ทย"]


def test_a_folder_split_before_cluster_pairs_keeps_its_splitting_and_differs_only_by_them():
    from retriever.lexical_terms import differs_only_in_letters, holds_letter_split_otherwise, knows_splitting, \
        splits_as_now

    now = tokenizer_record()
    cjk_only = {**record_before_folding(), "cjk": "bigrams"}
    assert knows_splitting(cjk_only) and not splits_as_now(cjk_only) and differs_only_in_letters(cjk_only, now)
    assert not knows_splitting({**cjk_only, "cjk": "bigrams+thai"}) and not knows_splitting({**now, "cjk": "bigrams"})
    # Before cluster pairs, only Thai, Lao, Khmer or Myanmar letters can make a term change; before CJK ones, any
    assert holds_letter_split_otherwise(["ไทย"], cjk_only) and not holds_letter_split_otherwise(["東京"], cjk_only)
    assert holds_letter_split_otherwise(["東京"]) and holds_letter_split_otherwise(["ໄທ"], None)
    assert not holds_letter_split_otherwise(["hindi", "हिन्दी"])


def test_compatibility_forms_and_case_are_folded_but_symbols_still_part_words():
    """Fullwidth letters, ligatures, the micro sign and ß were terms of their own, so ``bm25`` never found
    ``ＢＭ２５`` for ``bm25``; they are folded as NFKC_Casefold does. A symbol NFKC spells with letters (™) stays
    the gap between words it was, and a folder built before keeps its queries lowercased NFC."""
    now, before = tokenizer_record(), record_before_folding()
    assert split(now, "ＢＭ２５ ﬁnance µm Straße ΟΔΟΣ ǰ") == split(now, "bm25 finance μm STRASSE οδος ǰ")
    assert split(now, "ＢＭ２５ ﬁnance µm Straße ΟΔΟΣ") == ["bm25", "finance", "μm", "strasse", "οδοσ"]
    assert split(now, "Windows™ 5㎏ Ⅻ") == ["windows", "xii"] and split(now, "İSTANBUL") == ["istanbul"]
    assert split(before, "ＢＭ２５ ﬁnance Straße Windows™") == ["ｂｍ２５", "ﬁnance", "straße", "windows"]
    assert split({"pattern": FORMER_PATTERN, "lowercase": True}, "ＢＭ２５ Straße") == ["ｂｍ２５", "straße"]
