"""One ranked passage of a search, as the library, the CLI and the server hand it out."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hit:
    """One ranked passage of a search, with its title and text."""

    rank: int
    id: str
    score: float
    title: str
    text: str

    def to_json(self) -> dict:
        return {"rank": self.rank, "id": self.id, "score": self.score, "title": self.title, "text": self.text}
