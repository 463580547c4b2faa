"""A synthetic embedding collection that is hard enough to tell ANN indexes apart.

Well-separated Gaussian clusters make every index look perfect: each cluster falls in one IVF
list and one HNSW neighbourhood. Real sentence embeddings are not like that: they fill a
low-effective-dimension, anisotropic region of the sphere where "topics" overlap. So:

* one global covariance with a power-law spectrum (eigenvalue i ∝ i^-alpha, i = 1..384) in a
  random rotation, so the data fill few effective dimensions of 384, as MiniLM/BERT embeddings
  do (local intrinsic dimension, MLE at k=20 on 5,183 points: 22 here, 16.5 for SciFact's
  MiniLM vectors; the same generator with alpha=1 gives 37 and defeats HNSW too);
* many cluster centres drawn from that same covariance, and points spread around their centre
  by ``spread`` times the centre scale, so neighbouring clusters overlap heavily;
* a little isotropic noise so no direction is exactly empty, then normalisation to the unit
  sphere (inner product = cosine, as the engine uses).

Queries are fresh draws from the same distribution (never copies of database vectors).
Everything is float32, generated in fixed-size chunks from per-chunk seeds, so the same
(seed, n) gives the same vectors whatever the memory, and 1M × 384 needs only the output array.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CHUNK = 50_000


@dataclass(frozen=True)
class SyntheticSpec:
    """The knobs of the generator; the defaults are the benchmark's "hard" set."""

    dim: int = 384
    clusters: int = 10_000
    alpha: float = 1.5        # spectrum decay: eigenvalue i ∝ i ** -alpha
    spread: float = 1.0       # within-cluster scale relative to the spread of the centres
    noise: float = 0.05       # isotropic noise, relative to the unit-norm signal
    seed: int = 0


class SyntheticCollection:
    """Draws database vectors and queries from one fixed mixture."""

    def __init__(self, spec: SyntheticSpec = SyntheticSpec()) -> None:
        self.spec = spec
        world = np.random.default_rng([spec.seed, 0])
        dim = spec.dim
        # Random rotation so the structure is not aligned with PQ's sub-vector boundaries.
        rotation, _ = np.linalg.qr(world.standard_normal((dim, dim)))
        scales = (np.arange(1, dim + 1, dtype=np.float64) ** -spec.alpha) ** 0.5
        scales /= np.sqrt(np.sum(scales ** 2))  # a draw of z * scales has expected squared norm 1
        self._basis = (scales[:, None] * rotation.T).astype(np.float32)  # z @ basis → correlated draw
        self.centres = self._correlated(world, spec.clusters)

    def _correlated(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return rng.standard_normal((count, self.spec.dim), dtype=np.float32) @ self._basis

    def _draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        spec = self.spec
        labels = rng.integers(0, spec.clusters, count)
        vectors = self.centres[labels] + spec.spread * self._correlated(rng, count)
        vectors += rng.standard_normal((count, spec.dim), dtype=np.float32) * np.float32(spec.noise / np.sqrt(spec.dim))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors

    def chunk(self, number: int) -> np.ndarray:
        """Database rows ``number * CHUNK`` up to the next chunk, from that chunk's own seed."""
        return self._draw(np.random.default_rng([self.spec.seed, 1, number]), CHUNK)

    def vectors(self, count: int) -> np.ndarray:
        """The first ``count`` database vectors (a prefix of any larger collection)."""
        output = np.empty((count, self.spec.dim), dtype=np.float32)
        for number, start in enumerate(range(0, count, CHUNK)):
            stop = min(start + CHUNK, count)
            output[start:stop] = self.chunk(number)[:stop - start]
        return output

    def queries(self, count: int) -> np.ndarray:
        """Held-out queries: same distribution, a separate random stream."""
        return np.ascontiguousarray(self._draw(np.random.default_rng([self.spec.seed, 2]), count))
