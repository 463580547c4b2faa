"""Counts in messages: "1 shard", "2 shards", "1 query": summaries said "into 1 shards" and "wrote 1 queries"."""
from __future__ import annotations


def counted(count: object, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural unless the count is exactly one ('query' → 'queries', else noun + 's'); a
    count that is not a number (a damaged manifest's '?') takes the plural."""
    if count == 1 and not isinstance(count, bool):
        return f"{count} {noun}"
    if plural is None:
        plural = noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"
    return f"{count} {plural}"
