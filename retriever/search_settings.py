"""Search settings on a FAISS index: reaching nprobe / efSearch through its wrappers, bounding them to what FAISS
takes, refusing one the index would ignore, and passing them per call so threads sharing an index do not race.
"""
from __future__ import annotations

import math
import numbers
import threading

import faiss
import numpy as np

from retriever.errors import NotForThisIndex, RetrieverError
from retriever.fusion import MODES

_PASS_THROUGH = (faiss.IndexIDMap, faiss.IndexIDMap2, faiss.IndexPreTransform, faiss.IndexRefine)


def _wrapped(index: faiss.Index) -> faiss.Index:
    """The index inside one of FAISS's ``_PASS_THROUGH`` wrappers."""
    return faiss.downcast_index(index.base_index if isinstance(index, faiss.IndexRefine) else index.index)


def inner_index(index: faiss.Index):
    """The index inside id maps, pre-transforms and refinements (None for an object that is not an index)."""
    try:
        index = faiss.downcast_index(index)
        while isinstance(index, _PASS_THROUGH):
            index = _wrapped(index)
    except (RuntimeError, TypeError):
        return None
    return index


def downcast_hnsw(index: faiss.Index):
    """The HNSW index itself, also inside id maps, pre-transforms (e.g. ``PCA64,HNSW32``) and refinements."""
    index = inner_index(index)
    return index if isinstance(index, faiss.IndexHNSW) else None


def ivf_part(index: faiss.Index):
    """The IndexIVF inside ``index``'s wrappers, or None. Asked on every search: FAISS's ``extract_index_ivf`` raises
    for a flat index, and a C++ exception costs more than the whole lookup."""
    return faiss.try_extract_index_ivf(index)


def bounded(value: int, most: int, name: str) -> int:
    """A setting FAISS can take: at least 1, and at most ``most`` (an IVF's lists, the vectors an HNSW graph
    holds), since more gives the same hits while FAISS overflows its C int past 2**31 - 1 (an OverflowError
    traceback) or allocates heaps of efSearch entries first (``std::bad_alloc`` at 2**31 - 1)."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)
            or int(value) != value or value < 1):
        raise RetrieverError(f"{name} must be a whole number of at least 1, not {value!r}")
    return int(min(value, max(int(most), 1)))


# Where a mode goes in a call that takes one by name (search, rank), in run (the Searcher's own), in search_vectors
MODE_BY_NAME = "to search in mode {mode!r}, pass it by name: mode={mode!r}"
RUN_MODE = ("run searches in the Searcher's mode: to search in mode {mode!r}, open it with Searcher(index_dir, "
            "mode={mode!r})")
NO_MODE = "search_vectors searches the dense index alone and takes no mode"


def check_call_settings(nprobe: int | None, ef_search: int | None, mode_goes: str = MODE_BY_NAME) -> None:
    """Refuse per-call settings below 1: FAISS's search parameters read 0 as the index's own value, silently; and a
    mode given by position, ``search(queries, 5, "hybrid")``, which lands in nprobe (``mode_goes`` says where the
    calling method takes a mode, formatted with it)."""
    for name, value in (("nprobe", nprobe), ("ef_search", ef_search)):
        if isinstance(value, str) and value in MODES:
            raise RetrieverError(f"{name} must be a whole number of at least 1, not {value!r}; "
                                 f"{mode_goes.format(mode=value)}")
        if value is not None:
            bounded(value, 1, name)


def apply_search_params(index: faiss.Index, nprobe: int | None = None, ef_search: int | None = None) -> None:
    """Set nprobe / efSearch on whichever part of the index has them."""
    if nprobe is not None:
        ivf = ivf_part(index)
        if ivf is not None:
            ivf.nprobe = bounded(nprobe, ivf.nlist, "nprobe")
    if ef_search is not None:
        hnsw = downcast_hnsw(index)
        if hnsw is not None:
            hnsw.hnsw.efSearch = bounded(ef_search, hnsw.ntotal, "ef_search")


def taken_setting(index: faiss.Index) -> str | None:
    """The setting the index takes: nprobe for IVF lists, ef_search for an HNSW graph, None for an exact one."""
    if ivf_part(index) is not None:
        return "nprobe"
    return "ef_search" if downcast_hnsw(index) is not None else None


# The setting each kind of index takes, as its flag names it.
SETTING_KINDS = {"nprobe": ("IVF", "--nprobe"), "ef_search": ("HNSW", "--ef-search")}


def untaken_setting(settings: dict, taken: str | None) -> str | None:
    """The first of ``settings`` (name: value, None where not given) that an index taking ``taken`` (None: an exact
    one) would ignore, or None: a search's flags and a build's search defaults are refused alike."""
    return next((name for name, value in settings.items() if value is not None and name != taken), None)


def check_settings_apply(index: faiss.Index, nprobe: int | None, ef_search: int | None) -> None:
    """Refuse an nprobe for an index without IVF lists, or an efSearch for one without an HNSW graph:
    the value would be ignored, and the user believe they had traded speed for recall."""
    if (nprobe is None and ef_search is None) or not isinstance(index, faiss.Index):
        return
    taken = taken_setting(index)
    name = untaken_setting({"nprobe": nprobe, "ef_search": ef_search}, taken)
    if name is not None:
        kind, flag = SETTING_KINDS.get(taken, ("flat", None))
        applies, given_flag = SETTING_KINDS[name]
        hint = f"use {flag}" if flag else f"it is exact and takes neither setting; drop {given_flag}"
        raise NotForThisIndex(f"{given_flag} applies to {applies} indexes, and this index is {kind}: {hint}")


def check_mode_settings(index: faiss.Index, mode: str, nprobe: int | None, ef_search: int | None) -> None:
    """Refuse a search setting in mode bm25, which searches the BM25 part alone (it was left unused, the user believing
    they had traded speed for recall), one the index would ignore (``check_settings_apply``) or one below 1."""
    check_call_settings(nprobe, ef_search)  # first: a setting of the wrong kind (a mode by position) is not one to drop
    for flag, value in (("--nprobe", nprobe), ("--ef-search", ef_search)) if mode == "bm25" else ():
        if value is not None:
            raise NotForThisIndex(f"{flag} sets how the dense index is searched, and mode bm25 searches the BM25 part "
                                  f"alone; drop {flag}, or search in dense or hybrid mode")
    check_settings_apply(index, nprobe, ef_search)


def search_parameters(index: faiss.Index, nprobe: int | None = None, ef_search: int | None = None):
    """nprobe / efSearch for one call, as FAISS ``SearchParameters`` nested like the index's wrappers, so
    a call never changes the shared index: threads setting different values on it race (wrong hits, or
    FAISS's "Invalid key" error). None when the index takes no setting; LookupError for a wrapper that
    has no parameter form in FAISS; None for an object that only looks like an index."""
    if not isinstance(index, faiss.Index):
        return None
    index = faiss.downcast_index(index)
    if isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2)):  # they pass the parameters through
        return search_parameters(_wrapped(index), nprobe, ef_search)
    if isinstance(index, (faiss.IndexPreTransform, faiss.IndexRefine)):
        inner = search_parameters(_wrapped(index), nprobe, ef_search)
        if inner is None:
            return None
        if isinstance(index, faiss.IndexRefine):
            params = faiss.IndexRefineSearchParameters()
            params.base_index_params, params.k_factor = inner, index.k_factor
        else:
            params = faiss.SearchParametersPreTransform()
            params.index_params = inner
        params.referenced_objects = [inner]  # FAISS holds a bare pointer to it
        return params
    if isinstance(index, faiss.IndexIVF):
        params = faiss.SearchParametersIVF()
        params.nprobe = bounded(index.nprobe if nprobe is None else nprobe, index.nlist, "nprobe")
        params.max_codes = index.max_codes
        return params
    if isinstance(index, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW()
        params.efSearch = bounded(index.hnsw.efSearch if ef_search is None else ef_search, index.ntotal, "ef_search")
        return params
    if ivf_part(index) is not None:
        raise LookupError(type(index).__name__)
    return None


_SETTINGS_ON_THE_INDEX = threading.Lock()


def search_with(index: faiss.Index, vectors: np.ndarray, k: int, nprobe: int | None = None,
                ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` with these settings for this call alone, safe for threads sharing the index."""
    try:
        params = search_parameters(index, nprobe, ef_search)
    except LookupError:
        with _SETTINGS_ON_THE_INDEX:  # no per-call form: set on the index, searched before another thread sets
            apply_search_params(index, nprobe, ef_search)
            return index.search(vectors, k)
    return index.search(vectors, k) if params is None else index.search(vectors, k, params=params)
