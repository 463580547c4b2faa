"""A caller's query vectors (``Searcher.search_vectors``, ``Searcher.rank(vectors=)``) checked before FAISS sees them:
numpy made None NaN, took text such as "0.5" as a number, dropped a complex number's imaginary part and counted a
date in days, and a ragged list was its ValueError."""
from __future__ import annotations

import numbers

import numpy as np

from retriever.errors import RetrieverError


def query_vectors(vectors: object, dim: int) -> np.ndarray:
    """``vectors`` as a C-contiguous float32 array of rows of ``dim`` finite numbers, or a one-line refusal naming
    what is wrong: a value that is no number (and where), a row of another width, NaN or infinity."""
    shape = f"query vectors must be rows of {dim} numbers (the index's dimension)"
    try:
        array = np.asarray(vectors)
    except ValueError:  # rows of different widths
        widths = list(dict.fromkeys(len(row) if hasattr(row, "__len__") else 1 for row in vectors))
        given = f"rows of {widths[0]} and {widths[1]} numbers" if len(widths) > 1 else "rows nested unevenly"
        raise RetrieverError(f"{shape}, not {given}") from None
    if array.dtype.kind in "OUS":
        for place in np.ndindex(array.shape):
            value = array[place].item() if isinstance(array[place], np.generic) else array[place]
            if not isinstance(value, numbers.Real):
                where = f"row {place[0]}, column {place[1]}" if len(place) == 2 else f"item {place[0]}" if place else ""
                raise RetrieverError(f"query vectors must hold numbers, not {_named(value)}{f' ({where})' * bool(where)}")
    elif array.dtype.kind not in "biuf":
        raise RetrieverError(f"query vectors must hold real numbers, not {array.dtype} values")
    if array.ndim != 2 or array.shape[1] != dim:
        raise RetrieverError(f"{shape}, not an array of shape {array.shape}")
    array = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(array).all():  # FAISS finds nothing for them: no hits, and no word why
        raise RetrieverError("query vectors hold NaN or infinity; an encoder in fp16 may overflow (--dtype fp32)")
    return array


def _named(value: object) -> str:
    """None as itself; anything else by its type and a short repr."""
    return "None" if value is None else f"{type(value).__name__} {value!r:.40}"
