"""What training reads its data into, whatever the source (a BEIR split, a JSONL file): a query with its judged
passages and hard negatives. Here, apart from the readers (`data`), so what works on read examples (`copies`,
`candidates`) needs only these types."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Passage:
    id: str
    text: str


@dataclass(frozen=True)
class TrainExample:
    query_id: str
    query: str
    positives: tuple[Passage, ...]
    negatives: tuple[Passage, ...] = ()
    judged: frozenset[str] = frozenset()
    """Ids of every passage judged relevant to this query (masked when they appear as negatives)."""
