"""The warning naming queries whose text is empty, or of invisible characters alone."""
from __future__ import annotations

from retriever.blank_queries import blank_queries_warning
from retriever.corpus import Query


def test_queries_of_invisible_characters_are_warned_of_as_blank():
    queries = [Query("q1", "honey"), Query("q2", "\u200b"), Query("q3", " \ufffd ")]
    assert blank_queries_warning(queries, "dense").startswith(
        "warning: 2 of 3 queries have empty text (e.g. 'q2', 'q3')")
