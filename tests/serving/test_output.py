"""Results written in small JSON pieces: the same bytes as json.dumps, refused at the byte limit."""
from __future__ import annotations

import json

import pytest

from retriever.searching import Hit
from retriever.serving.inputs import ApiError, Limits
from retriever.serving.output import bounded, hits_list, list_object


def test_results_are_written_as_json_dumps_would_until_the_limit():
    hits = [Hit(rank=r, id=f"d{r}", score=0.5 / r, title="t\u00e9", text="x " * 40) for r in (1, 2, 3)]
    head = {"index": "tiny", "k": 3, "took_ms": 1.5}
    expected = {**head, "results": [{"query": q, "hits": [h.to_json() for h in hits]} for q in ("a", "b\u00e9")]}

    def pieces():
        return list_object(head, "results", (hits_list({"query": q}, hits) for q in ("a", "b\u00e9")))

    written = bounded(pieces(), Limits())
    assert written == json.dumps(expected, ensure_ascii=False).encode()
    assert bounded(hits_list({}, []), Limits()) == b'{"hits": []}'
    assert bounded(pieces(), Limits(max_response_bytes=len(written))) == written
    with pytest.raises(ApiError, match=f"over {len(written) - 1} bytes"):
        bounded(pieces(), Limits(max_response_bytes=len(written) - 1))
