"""Words in messages: counts ("1 shard", "2 shards", "1 query": summaries said "into 1 shards" and "wrote 1
queries"), recorded numbers, byte sizes."""
from __future__ import annotations

import math
from collections.abc import Callable


def counted(count: object, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural unless the count is exactly one ('query' → 'queries', else noun + 's'); a
    count that is not a number (a damaged manifest's '?') takes the plural."""
    if count == 1 and not isinstance(count, bool):
        return f"{count} {noun}"
    if plural is None:
        plural = noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"
    return f"{count} {plural}"


def agree(count: object, singular: str, plural: str) -> str:
    """The word that agrees with ``count``: ``singular`` when it is exactly one ('1 of 3 queries was cut'), else
    ``plural``: such lines said '1 of 3 queries were'."""
    return singular if count == 1 and not isinstance(count, bool) else plural


def none_of(count: object, noun: str, the: str = "the", plural: str | None = None) -> str:
    """'none of the 2 documents', but 'the 1 document' for one, whose sentence then negates its verb ('is not' for
    'is', with ``agree``): messages said 'none of the 1 documents'. ``the``: the determiner ('the run's')."""
    return f"{the} {counted(count, noun, plural)}" if count == 1 else f"none of {the} {counted(count, noun, plural)}"


def shown_number(value: object, spec: str = "g") -> str:
    """A recorded number as ``spec`` formats it, or '?' where a damaged or hand-edited record holds something else
    (``info`` read such entries as numbers: a TypeError traceback, or Python's None shown)."""
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def size_text(count: int, rounded: Callable[[float], int] = math.ceil) -> str:
    """A byte count in a unit that keeps it apart from a close one (one decimal of MiB made 150 and 100 KB alike),
    ``rounded`` up for what is needed and down for what is free, so the first always reads larger."""
    if count < 2**20:
        return f"{rounded(count / 2**10)} KiB"
    scale, unit = (2**30, "GiB") if count >= 2**30 else (2**20, "MiB")
    return f"{rounded(count * 10 / scale) / 10:.1f} {unit}"
