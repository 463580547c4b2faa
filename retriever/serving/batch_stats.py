"""How well the micro-batchers group requests, counted for /health and the load test."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BatchStats:
    """Counters for /health and the load test: how well requests are being grouped."""

    batches: int = 0
    requests: int = 0
    queries: int = 0
    largest_batch: int = 0

    def to_json(self) -> dict:
        mean = self.queries / self.batches if self.batches else 0.0
        return {"batches": self.batches, "requests": self.requests, "queries": self.queries,
                "largest_batch": self.largest_batch, "mean_batch": round(mean, 2)}
