"""Input checks without a server: JSON depth, lone surrogates, the hit cap."""
from __future__ import annotations

import json
import time

import pytest

from retriever.errors import RetrieverError
from retriever.serving.inputs import ApiError, Limits, check_hits, check_query, check_query_string
from retriever.serving.json_body import json_depth


@pytest.mark.parametrize("raw, depth", [
    (b'{"queries": ["cat"], "k": 3}', 2),
    (b"7", 0),
    (b"[]", 1),
    (b'{"a": "[[[[{{{{"}', 1),               # brackets inside strings do not count
    (b'{"a": "quote \\" [[[", "b": [[1]]}', 3),  # nor after an escaped quote
    (b"[" * 5000 + b"]" * 5000, 5000),
    (b"[" * 5000, 5000),                     # unbalanced: still measured, json.loads reports the rest
    (b'[["a", "b\\\\"], "[[[', 2),             # an unterminated string runs to the end
    (b'[["x\\', 2),                           # ... even one ending in a lone backslash
])
def test_json_depth_counts_nesting_outside_strings(raw, depth):
    assert json_depth(raw) == depth


def test_json_depth_is_linear_on_unterminated_strings():
    """A body of escaped quotes with no closing one made the old pattern rescan from every quote:
    quadratic, minutes at the body limit, all of it on the event loop every client shares."""
    started = time.perf_counter()
    for body in (b'"' + b'\\"' * 128_000, b'"' * 256_000, b'"\\' * 128_000):
        assert json_depth(body) == 0
    assert time.perf_counter() - started < 2.0  # linear: milliseconds; the old pattern took minutes


def test_check_query_refuses_lone_surrogates_with_the_reason():
    assert check_query("caf\u00e9 \U0001F600", Limits()) == "caf\u00e9 \U0001F600"
    with pytest.raises(ApiError) as raised:
        check_query(json.loads('"ok \\ud800"'), Limits())
    assert raised.value.status == 400 and "lone surrogate U+D800 at character 4" in raised.value.message


def test_check_hits_caps_queries_times_k():
    check_hits(10, 1000, Limits(max_hits=10_000))
    with pytest.raises(ApiError, match="256 queries x k=1000 asks for 256000 hits; the limit is 10000"):
        check_hits(256, 1000, Limits(max_hits=10_000))
    with pytest.raises(ApiError, match="^1 query x k=20000 asks for 20000 hits"):  # it said "1 queries"
        check_hits(1, 20_000, Limits(max_hits=10_000))


def test_max_hits_below_the_default_k_is_refused_since_no_request_without_k_would_fit():
    check_hits(1, 10, Limits(max_hits=10))
    with pytest.raises(RetrieverError, match="--max-hits is 9; it must be at least 10"):
        Limits(max_hits=9)


@pytest.mark.parametrize("raw, unknown, hint", [
    (b"q=honey&K=1", "K", ""), (b"q=honey&foo", "foo", ""),
    (b"q=honey&fusion=convex&mode=hybrid", "fusion", " (fusion is set when the server starts: retriever serve --fusion)"),
    (b"q=honey&alpha=0.3", "alpha", " (alpha is set when the server starts: retriever serve --alpha)"),
    (b"rrf_k=5&q=honey", "rrf_k", " (rrf_k is set when the server starts: retriever serve --rrf-k)"),
    (b"q=honey&index=other", "index", " (an index is searched at /indexes/NAME/search)")])
def test_get_refuses_parameters_it_does_not_take(raw, unknown, hint):
    """Each unknown parameter said "(fusion is set by `retriever serve --fusion`)": for ?index= (the search page's own
    parameter) it named no way to search another index, for ?alpha= a flag that does not set alpha."""
    with pytest.raises(ApiError) as caught:
        check_query_string(raw, "/indexes/other/search")
    assert caught.value.status == 400
    assert caught.value.message == (f"unknown parameter {unknown!r}; GET /indexes/other/search takes only q, k, "
                                    f"mode{hint}")
    check_query_string(b"q=honey&k=1&mode=hybrid")
    check_query_string(b"")


@pytest.mark.parametrize("text", ["", "   ", "\u200b", "\ufeff \u2060", "\u200b\u200d\t", "\x00", "\x01\x02", "\x7f",
                                  "\ufffd", "\u0301", "\ue000 \U000f0000"])
def test_a_query_of_nothing_but_invisible_characters_is_empty(text):
    """U+200B and its kin are not whitespace to str.strip, but BERT's tokenizer drops them: such a query searched
    for nothing and returned arbitrary hits."""
    with pytest.raises(ApiError, match="the query is empty"):
        check_query(text, Limits())
    assert check_query("\u200bbee", Limits()) == "\u200bbee"


def test_the_default_limits_take_the_most_queries_a_request_may_send_without_a_k():
    """With the defaults, 256 queries and no k asked for 2,560 hits against --max-hits 2,000: a request inside
    every limit a client reads was refused. The CLI's defaults are these."""
    from retriever.cli.serving import serve_command
    from retriever.searching import DEFAULT_K

    limits = Limits()
    check_hits(limits.max_queries, DEFAULT_K, limits)
    defaults = {option.name: option.default for option in serve_command.params}
    assert (defaults["max_queries"], defaults["max_hits"]) == (limits.max_queries, None)  # None: max_queries x k
    assert limits.max_hits == limits.max_queries * DEFAULT_K
