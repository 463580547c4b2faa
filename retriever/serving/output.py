"""Writing search results as JSON in small pieces, within ``Limits.max_response_bytes``.

``json.dumps`` is one C call that holds the GIL until it returns: while it writes a response of
many megabytes the event loop cannot answer even ``/health`` (benchmarks/README.md). Writing one
hit per call lets the loop thread take the GIL between hits, and lets an oversized response stop
at the hit that crosses the limit rather than after all of it was built.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence

from retriever.searching import Hit
from retriever.serving.inputs import ApiError, Limits


def json_bytes(value: object) -> bytes:
    """``value`` as JSON; a NaN or infinity raises, where ``json.dumps`` wrote ``NaN``, which no JSON parser reads."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode()


def list_object(head: dict, key: str, items: Iterable[Iterable[bytes]]) -> Iterator[bytes]:
    """The pieces of ``{**head, key: [item, ...]}``, each item given as the pieces of its own JSON."""
    yield json_bytes(head)[:-1] + (b", " if head else b"") + json_bytes(key) + b": ["
    for number, item in enumerate(items):
        if number:
            yield b", "
        yield from item
    yield b"]}"


def hits_list(head: dict, hits: Sequence[Hit]) -> Iterator[bytes]:
    return list_object(head, "hits", ([json_bytes(hit.to_json())] for hit in hits))


def bounded(pieces: Iterable[bytes], limits: Limits) -> bytes:
    """The pieces joined, or a 400 as soon as they pass ``max_response_bytes``."""
    written, size = [], 0
    for piece in pieces:
        size += len(piece)
        if size > limits.max_response_bytes:
            raise ApiError(400, f"the response would be over {limits.max_response_bytes} bytes, the limit: "
                                "ask for fewer hits (a smaller k or fewer queries)")
        written.append(piece)
    return b"".join(written)
