"""A hit-less answer says why, as ``retriever search`` does on stderr (``unknown_words.no_hits_reason``)."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from retriever.unknown_words import no_hits_reason
from serving_fixtures import served  # noqa: F401 - fixtures

BM25_WHY = ("no hits: BM25 returns only passages that share a term with the query (stopwords and words under two "
            "characters are not terms)")
HYBRID_WHY = ("no hits: the query holds no word the model knows, so hybrid ranks it by BM25 alone, and BM25 returns "
              "only passages that share a term with the query (stopwords and words under two characters are not terms)")


@pytest.mark.parametrize("query, mode, why", [("the", "bm25", BM25_WHY), ("?!", "hybrid", HYBRID_WHY)])
def test_a_hit_less_answer_carries_the_note_the_cli_prints(served, query, mode, why):
    """It was a 200 with ``hits: []`` and no word of why, where ``retriever search`` says so on stderr."""
    assert no_hits_reason(served.searchers["tiny"], [query], mode) == [why]
    reply = served.get(f"/search?q={quote(query)}&mode={mode}")
    assert reply.status == 200 and reply.json()["hits"] == [] and reply.json()["note"] == why, reply.body
    reply = served.post_json("/search", {"queries": ["hot volcanoes", query], "mode": mode})
    found, empty = reply.json()["results"]
    assert found["hits"] and "note" not in found and empty["hits"] == [] and empty["note"] == why, reply.body


def test_an_answer_with_hits_has_no_note(served):
    assert "note" not in served.get("/search?q=the&mode=hybrid").json()
