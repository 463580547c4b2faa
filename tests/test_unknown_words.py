"""What a search that found nothing says (``unknown_words.no_hits_reason``)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from retriever.lexical import LexicalParams
from retriever.lexical_index import QueryTokenizer
from retriever.unknown_words import no_hits_reason


@pytest.mark.parametrize("method, said", [("robertson", "a term found in half the passages or more weighs 0"),
                                          ("atire", "a term found in every passage weighs 0"), ("lucene", None)])
def test_no_bm25_hits_name_the_terms_the_index_method_weighs_zero(method, said):
    """Robertson and ATIRE weigh common terms 0, so a passage holding the query's word is not returned (a
    one-passage index under robertson finds nothing at all), while the note said BM25 returns passages sharing a
    term, which that passage did."""
    lexical = SimpleNamespace(record={"method": method}, tokenize=QueryTokenizer(LexicalParams()))
    searcher = SimpleNamespace(lexical=lexical)
    [reason] = no_hits_reason(searcher, ["lava"], "bm25")
    assert reason.startswith("no hits: BM25 returns only passages that share a term with the query")
    if said:
        assert f"with this index's BM25 method {method}, {said}" in reason, reason
    else:
        assert "weighs 0" not in reason, reason


def test_no_bm25_hits_name_the_words_the_stemmer_leaves_nothing_of():
    """Snowball's Nepali stemmer stems का ("of") to nothing, so it is no term: the note said only stopwords and
    words under two characters are not terms, which का is neither."""
    params = LexicalParams(stemmer="nepali", stopwords=None)
    searcher = SimpleNamespace(lexical=SimpleNamespace(record=params.record(), tokenize=QueryTokenizer(params)))
    [alone, with_other] = no_hits_reason(searcher, ["का", "इतिहास का"], "bm25")
    assert alone == with_other == ("no hits: BM25 returns only passages that share a term with the query (stopwords "
                                   "and words under two characters are not terms, nor is 'का', which the nepali "
                                   "stemmer leaves nothing of)")
    english = SimpleNamespace(record=LexicalParams().record(), tokenize=QueryTokenizer(LexicalParams()))
    [english] = no_hits_reason(SimpleNamespace(lexical=english), ["the"], "bm25")
    assert english.endswith("(stopwords and words under two characters are not terms)"), english
