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


def test_no_hybrid_hits_at_alpha_0_or_1_say_which_half_the_fusion_weighs():
    """Hybrid at alpha 0 weighs BM25 alone, so it finds nothing where BM25 does, and said nothing of why; at alpha 1
    a query of no word the model knows loses the only half weighed (the note said it was ranked by BM25 alone)."""
    from retriever.fusion import FusionParams

    lexical = SimpleNamespace(record={"method": "lucene"}, tokenize=QueryTokenizer(LexicalParams()))
    searcher = SimpleNamespace(lexical=lexical, fusion=FusionParams("convex", alpha=0.0),
                               unknown_words=lambda queries: [query == "?!" for query in queries])
    assert no_hits_reason(searcher, ["the", "?!"], "hybrid") == [
        "no hits: hybrid weighs BM25 alone (its fusion's alpha is 0), and BM25 returns only passages that share a "
        "term with the query (stopwords and words under two characters are not terms)"] * 2
    searcher.fusion = FusionParams("convex", alpha=1.0)
    assert no_hits_reason(searcher, ["the", "?!"], "hybrid") == [
        None, "no hits: the query holds no word the model knows, so hybrid drops its dense half, the only one its "
              "fusion weighs (alpha 1); rephrase it, or search it in bm25 mode"]
    searcher.fusion = FusionParams("convex", alpha=0.5)
    assert no_hits_reason(searcher, ["the", "?!"], "hybrid")[0] is None
