"""DPR answer recall: tokens as DPR normalises them, contiguous matches, and refusals of misshapen input."""
from __future__ import annotations

import pytest

from retriever.answer_recall import answer_recall, answer_tokens
from retriever.errors import RetrieverError


def test_answer_tokens_normalise_case_accents_and_punctuation() -> None:
    assert answer_tokens("The U.S.-Canada border, Café!") == ["the", "u", "s", "canada", "border", "cafe\u0301"]
    # NFC and NFD spellings of the same word normalise to the same token.
    assert answer_tokens("caf\u00e9") == answer_tokens("cafe\u0301")


def test_answer_recall_hand_case() -> None:
    texts = {
        "p1": "Paris is the capital of France.",
        "p2": "The Eiffel Tower was completed in 1889.",
        "p3": "Barack Obama was born in Honolulu, Hawaii.",
        "p4": "Lyon is a city.",
    }
    ranked = {
        "q_paris": ["p4", "p1"],  # answer at rank 2
        "q_year": ["p2", "p1"],  # answer at rank 1
        "q_obama": ["p1", "p4", "p2"],  # never found
        "q_partial": ["p3"],  # "Honolulu Hawaii" matches across punctuation, "bama" must not match
    }
    answers = {
        "q_paris": ["PARIS"],
        "q_year": ["1889", "nineteenth century"],
        "q_obama": ["Honolulu"],
        "q_partial": ["bama", "honolulu hawaii"],
        "q_missing": ["France"],  # not in the run: a miss
        "q_no_answer": ["!!", ""],  # no usable answer: not counted
    }
    result = answer_recall(ranked, answers, texts, ks=(1, 2, 100))
    assert result == {"answer_recall@1": 2 / 5, "answer_recall@2": 3 / 5, "answer_recall@100": 3 / 5}
    # A callable works like a mapping.
    assert answer_recall(ranked, answers, texts.__getitem__, ks=(1, 2, 100)) == result


def test_answer_recall_does_not_match_partial_words() -> None:
    assert answer_recall({"q": ["p"]}, {"q": ["bama"]}, {"p": "Obama"}, ks=(1,)) == {"answer_recall@1": 0.0}


def test_answer_recall_errors() -> None:
    with pytest.raises(RetrieverError, match="no text for document 'p9'"):
        answer_recall({"q": ["p9"]}, {"q": ["x"]}, {}, ks=(1,))
    with pytest.raises(RetrieverError, match="non-empty answer"):
        answer_recall({"q": ["p"]}, {"q": []}, {"p": "x"})


def test_answer_recall_refuses_an_answer_or_ranking_given_as_one_string() -> None:
    """A query's answers given as a string were read letter by letter, so "a cat" matched any passage holding the
    word "a" (answer recall 1.0 for a passage about dogs); a ranking given as a string looked up document 'd'."""
    with pytest.raises(RetrieverError, match=r"^the answers of query 'q' must be a list of strings, not the string "
                                             r"'a cat'; wrap one answer as \['a cat'\]"):
        answer_recall({"q": ["p"]}, {"q": "a cat"}, {"p": "a dog ran"}, ks=(1,))
    with pytest.raises(RetrieverError, match=r"^the ranking of query 'q' must be a list of document ids, not the "
                                             r"string 'p1'"):
        answer_recall({"q": "p1"}, {"q": ["dog"]}, {"p1": "a dog ran"}, ks=(1,))
