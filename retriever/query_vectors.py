"""A caller's query vectors (``Searcher.search_vectors``, ``Searcher.rank(vectors=)``) checked before FAISS sees them:
numpy made None NaN, took text such as "0.5" as a number, dropped a complex number's imaginary part and counted a
date in days, and a ragged list was its ValueError."""
from __future__ import annotations

import math
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
            value = _value(array[place])
            if not isinstance(value, numbers.Real):
                where = f"row {place[0]}, column {place[1]}" if len(place) == 2 else f"item {place[0]}" if place else ""
                raise RetrieverError(f"query vectors must hold numbers, not {_named(value)}{f' ({where})' * bool(where)}")
    elif array.dtype.kind not in "biuf":
        raise RetrieverError(f"query vectors must hold real numbers, not {array.dtype} values")
    if array.ndim != 2 or array.shape[1] != dim:
        raise RetrieverError(f"{shape}, not an array of shape {array.shape}")
    try:
        with np.errstate(over="ignore"):  # past float32's range becomes infinity: named below
            vectors = np.ascontiguousarray(array, dtype=np.float32)
    except OverflowError:  # a Python integer past float64's range
        vectors = None
    if vectors is None or not np.isfinite(vectors).all():  # one pass over sound vectors; the rest on refusal only
        place = next((place for place in np.ndindex(array.shape) if _beyond_float32(array[place])), None)
        if place is not None:
            raise RetrieverError(f"query vectors hold {_value(array[place])!r:.40} (row {place[0]}, column {place[1]}), "
                                 "beyond float32's range, which FAISS searches in")
        # FAISS finds nothing for them: no hits, and no word why
        raise RetrieverError("query vectors hold NaN or infinity; an encoder in fp16 may overflow (--dtype fp32)")
    return vectors


def _named(value: object) -> str:
    """None as itself; anything else by its type and a short repr."""
    return "None" if value is None else f"{type(value).__name__} {value!r:.40}"


def _value(value: object) -> object:
    """A numpy scalar as the Python value it holds."""
    return value.item() if isinstance(value, np.generic) else value


def _beyond_float32(value: object) -> bool:
    """A finite number that float32 makes infinity."""
    try:
        number = float(_value(value))
    except OverflowError:
        return True
    return math.isfinite(number) and abs(number) > float(np.finfo(np.float32).max)
