"""Product-quantiser codebooks trained on fewer vectors than FAISS advises: one note from us in place of FAISS's own
warning, which it prints once per sub-quantiser."""
from __future__ import annotations

import faiss

from retriever.search_settings import ivf_part

# FAISS's ClusteringParameters.min_points_per_centroid: the training points a centroid should have
FAISS_POINTS_PER_CENTROID = 39


def quiet_codebooks(index: faiss.Index, points: int, spec: str) -> str | None:
    """When ``index``'s PQ codebooks will train on ``points`` vectors, fewer than FAISS advises, stop FAISS's warning
    (``WARNING clustering 5183 points to 256 centroids: please provide at least 9984 training points`` once per
    sub-quantiser: 48 identical lines for a 384-dimension `ivfpq` index of SciFact) and return the one line to say."""
    ivf = ivf_part(index)
    if ivf is not None and ivf.nlist == 1:  # one list is the mean of any sample: FAISS warned of it under 39 points
        ivf.cp.min_points_per_centroid = 1
    pq = getattr(faiss.downcast_index(ivf or index), "pq", None)
    if pq is None or points >= FAISS_POINTS_PER_CENTROID * pq.ksub:
        return None
    pq.cp.min_points_per_centroid = 1  # what FAISS compares the points with before warning
    return (f"note: {spec}'s {pq.M} PQ codebooks of {pq.ksub} centroids are trained on {points} vectors, fewer than "
            f"the {FAISS_POINTS_PER_CENTROID * pq.ksub} ({FAISS_POINTS_PER_CENTROID} a centroid) FAISS advises; "
            "recall may be lower than on a larger sample (--train-size, up to the corpus)"
            + (f", or with codes of fewer bits (PQ{pq.M}x{pq.nbits - 1} in a factory string)" if pq.nbits > 1 else ""))
