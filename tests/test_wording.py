"""Counts in messages take the noun's plural only when they are not one."""
from __future__ import annotations

import pytest

from retriever.wording import agree, counted, none_of


@pytest.mark.parametrize("count, noun, shown", [
    (1, "shard", "1 shard"), (0, "shard", "0 shards"), (2, "query", "2 queries"), (1, "query", "1 query"),
    (3, "day", "3 days"), ("?", "vector", "? vectors"), (True, "file", "True files"), (1.0, "hit", "1.0 hit"),
])
def test_counted(count, noun, shown):
    assert counted(count, noun) == shown


def test_an_irregular_plural_is_given():
    assert counted(2, "index", "indexes") == "2 indexes" and counted(1, "index", "indexes") == "1 index"


def test_agree_and_none_of_follow_the_count():
    assert [agree(n, "was", "were") for n in (0, 1, 2, True)] == ["were", "was", "were", "were"]
    assert none_of(1, "judged document") == "the 1 judged document"
    assert none_of(2, "query", the="the run's") == "none of the run's 2 queries"
