"""Whether FAISS can read a factory string at all, before any vector's width is known: strings its parser crashes on
or that name an IDMap are refused (``check_factory``), and ones it cannot parse are worded once for the CLI's flag,
``IndexParams`` and ``new_index`` (``unreadable_index_type``, ``unreadable_words``). Held apart from ``faiss_index``
(what index a collection gets, its training and search defaults) as the reading of the string alone."""
from __future__ import annotations

import re
from functools import lru_cache

import faiss

from retriever.choices import FACTORY_MAX, INDEX_TYPES
from retriever.errors import RetrieverError, faiss_message


def check_factory(spec: str) -> None:
    """Refuse up front, before any encoding, what FAISS would only refuse when vectors are added (an IDMap
    index wants ids with every vector, and the tool numbers the vectors itself: the id map), or not refuse at all:
    its parser's regexes recurse once a character, so a long string overflowed the stack and crashed the process
    (SIGSEGV), at a length that depends on the stack's size."""
    if len(spec) > FACTORY_MAX:
        raise RetrieverError(f"--index-type is {len(spec)} characters long; a FAISS factory string is a few short "
                             f"parts ('IVF4096,PQ48') and FAISS's parser crashes on long ones: give at most "
                             f"{FACTORY_MAX} characters")
    if "IDMap" in spec:
        rest = ",".join(part for part in spec.split(",") if not part.strip().startswith("IDMap"))
        raise RetrieverError(f"--index-type {spec!r}: IDMap indexes are not supported (the index keeps its own id "
                             f"map, ids.parquet); drop the IDMap part" + (f", e.g. {rest!r}" if rest else ""))


UNPARSED = "could not parse"  # FAISS's words for a string, or a part of one, its parser cannot read


def unreadable_index_type(spec: str) -> str | None:
    """Why FAISS cannot read ``spec`` at all, or None when it can (or when only the vectors' width can tell: 'PQ7'
    fits 384 dimensions, not 1). FAISS's parser matches a string's parts by name and number alone, so an index of
    one dimension tells 'could not parse ...' (of the whole string, or of the codes after 'IVF16,' or 'HNSW32,')
    apart from a part that does not fit a width, before any width is known: `build` refused 'Flatt' and
    'IVF16,Flatt' only once the model had loaded, with exit 1."""
    if spec in INDEX_TYPES:
        return None
    check_factory(spec)  # FAISS's parser crashes on a long string
    return _unreadable(spec)


@lru_cache(maxsize=32)
def _unreadable(spec: str) -> str | None:
    """FAISS's parse of ``spec`` with one list an IVF (FAISS reads any 'IVF([0-9]+[kM]?)' alike), not making
    the lists of 'IVF10000000,Flat' (GBs, or a bad_alloc); a refused one is parsed as given, for FAISS's words."""
    one_list = _COUNT.sub(lambda count: "IVF1" if len(count.group(1)) <= 1 else count.group(), spec)
    said = _parse_refusal(one_list, spec)
    return said if said is None or one_list == spec else _parse_refusal(spec, spec)


_COUNT = re.compile(r"IVF[0-9]+([kM]*)")  # 'IVF16kM' is no count FAISS reads, and stays as it is


def _parse_refusal(given: str, spec: str) -> str | None:
    try:
        faiss.index_factory(1, given, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        return unreadable_words(spec, faiss_message(error))
    except MemoryError:  # read, and too large to make: the build's memory checks size it at its width
        return None
    return None


def unreadable_words(spec: str, reason: str) -> str | None:
    """The one wording of a string FAISS cannot read (``reason``, FAISS's own), for the CLI's flag and the library;
    None for any other refusal."""
    if UNPARSED not in reason:
        return None
    reason = reason[reason.index(UNPARSED):]  # without the "'index_ivf' failed: " of FAISS's assertion
    return (f"FAISS cannot read {spec!r} as an index type ({reason}); give {', '.join(INDEX_TYPES)} or a FAISS factory "
            "string, e.g. 'IVF1024,PQ48' or 'HNSW64,Flat'")
