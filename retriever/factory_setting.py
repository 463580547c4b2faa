"""The search setting an index of a FAISS factory string takes, read from the string as FAISS's ``index_factory``
parses it, without building the index: an empty 'IVF1048576_HNSW32,PQ96x16' holds its million lists and its codebooks
(257 MB at 384 dimensions), which `info` made only to learn that it takes nprobe."""
from __future__ import annotations

import re

from retriever.choices import FACTORY_MAX

# What FAISS takes off the string before it reads the index searched (index_factory_sub, in its order): an id map,
# a refinement (the index searched is the one before it) and the vector transforms in front.
_WRAPPED = [re.compile(r"(.+),IDMap2?"), re.compile(r"IDMap2?,(.+)"), re.compile(r"(.+),RFlat"),
            re.compile(r"(.+),Refine\(.+\)")]
_TRANSFORM = re.compile(r"PCAW?R?\d+|L2[nN]orm|RR\d*|ITQ\d*|OPQ\d+(_\d+)?|Pad\d+")
_EXACT = re.compile(r"(Flat|LSH|ZnLattice|SQ|PQ|RQ|RCQ|LSQ|LSCQ|PRQ|PLSQ|RaBitQ)[^,]*|NSG\d*([,_].*)?"
                    r"|MinMax(FP16)?,.+|Residual\d+(x\d+)?,.+")  # MinMax: FAISS's wrapper hides what is inside
_HNSW = re.compile(r"HNSW\d*([,_].*)?")
_IVF = re.compile(r"(IVF\d+[kM]?(_HNSW\d*|_NSG\d+|<>)?|IMI2x\d+),.+")


def factory_setting(factory: str) -> str | None:
    """``search_settings.taken_setting`` of the index FAISS would build from ``factory``: nprobe for IVF lists,
    ef_search for an HNSW graph, None for an exact index. ValueError for a string not read as FAISS reads one, or
    longer than a build takes (its reading here grows as the square of its length)."""
    if len(factory) > FACTORY_MAX:
        raise ValueError(f"a factory string of {len(factory)} characters")
    description = _searched(factory)
    if _EXACT.fullmatch(description):
        return None
    if _HNSW.fullmatch(description):
        return "ef_search"
    if _IVF.fullmatch(description):
        return "nprobe"
    raise ValueError(f"not a FAISS factory string: {factory!r}")


def _searched(description: str) -> str:
    """The part of ``description`` naming the index searched: wrappers and transforms taken off, and what
    parentheses hold (an IVF's own quantizer, ``IVF16(PQ2)``) emptied."""
    while True:
        match = next((found for found in (pattern.fullmatch(description) for pattern in _WRAPPED) if found), None)
        first, comma, rest = description.partition(",")
        if match:
            description = match.group(1)
        elif comma and _TRANSFORM.fullmatch(first):
            description = rest
        else:
            break
    while "(" in description:  # innermost first, as FAISS reads them
        emptied = re.sub(r"\([^()]*\)", "<>", description)
        if emptied == description:
            break
        description = emptied
    return description
