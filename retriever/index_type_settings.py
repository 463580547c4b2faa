"""Which build settings each index type uses: a setting given for a type that never reads it is refused, by the
library (``IndexParams``) and by the CLI's flags alike, rather than ignored in silence."""
from __future__ import annotations

from collections.abc import Iterable

from retriever.choices import ONDISK_TYPE

_IVF_TYPES = ("ivfpq", ONDISK_TYPE)
# The index types each build setting is used by, and how to say so: given with another type it was ignored in silence.
SETTING_USERS = {
    "hnsw_m": (lambda kind: kind == "hnsw", "--index-type hnsw (a factory string gives M itself: 'HNSW64,Flat')"),
    "ef_construction": (lambda kind: kind == "hnsw" or "HNSW" in kind, "an index with an HNSW graph"),
    "nlist": (lambda kind: kind in _IVF_TYPES, "--index-type ivfpq or ivf-ondisk (a factory string gives its lists "
                                               "itself: 'IVF1024,PQ48')"),
    "pq_m": (lambda kind: kind == "ivfpq", "--index-type ivfpq (a factory string gives its codes itself: "
                                           "'IVF1024,PQ48')"),
    "ondisk_codes": (lambda kind: kind == ONDISK_TYPE, f"--index-type {ONDISK_TYPE}"),
    "part_size": (lambda kind: kind == ONDISK_TYPE, f"--index-type {ONDISK_TYPE}"),
    "parallel_parts": (lambda kind: kind == ONDISK_TYPE, f"--index-type {ONDISK_TYPE}"),
    "refine_k_factor": (lambda kind: "RFlat" in kind or "Refine" in kind, "factory strings ending in ',RFlat'"),
    "train_size": (lambda kind: kind not in ("flat", "hnsw"), "an index that is trained (ivfpq, ivf-ondisk or a "
                                                              "factory string such as 'IVF1024,PQ48')"),
}


def flag(name: str) -> str:
    """The CLI flag of an ``IndexParams`` field, as every refusal names it."""
    return "--" + name.replace("_", "-")


def unused_setting(index_type: str, given: Iterable[str]) -> str | None:
    """The refusal of the first of the ``given`` settings (``IndexParams`` field names) that ``index_type`` does not
    use, or None when it uses them all."""
    given = set(given)
    for name, (uses, users) in SETTING_USERS.items():
        if name in given and not uses(index_type):
            return (f"{flag(name)} is used only by {users}, not by --index-type {index_type!r}; drop it or choose an "
                    "index type that uses it")
    return None


def untuned_refusal(given: str) -> str:
    """The refusal of a tuning setting (--tuning-queries, --tuning-queries-file) without --target-recall."""
    return (f"{given} is used only with --target-recall (what recall is measured on); add --target-recall or drop "
            "it")


def ray_refusal(given: str, ondisk: str) -> str:
    """The refusal of Ray (``given``: the CLI's --ray, the library's ray_address) for an index type other than
    ivf-ondisk (``ondisk``: how to ask for that type), whose parts alone are Ray tasks: it was left unused."""
    return (f"{given} fills the parts of an {ONDISK_TYPE} index; other index types are built in one process: add "
            f"{ondisk} or drop {given}")


def untrained_refusal(index_type: str) -> str:
    """The refusal of --train-size for a factory string that trains nothing ('HNSW32,Flat', 'SQfp16')."""
    return (f"--train-size is used only by {SETTING_USERS['train_size'][1]}, not by --index-type {index_type!r}, "
            "which trains nothing; drop it or choose an index type that uses it")


def fewer_lists(index_type: str) -> str | None:
    """How to ask for fewer IVF lists, None for an index without them: --nlist for ivfpq and ivf-ondisk, while a
    factory string (which refuses --nlist) gives its lists itself ('IVF1024,PQ48')."""
    if index_type in _IVF_TYPES:
        return "fewer lists (--nlist)"
    return "fewer lists (a smaller number after 'IVF' in --index-type)" if "IVF" in index_type else None
