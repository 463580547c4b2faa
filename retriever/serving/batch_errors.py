"""What a micro-batcher raises, as the app turns each into a status: a client to retry later (``Overloaded``), the
server stopping (``Closed``), one request's own queries the encoder failed on (``QueryRejected``), and an index that
failed its warm-up search (``warm_up_failure``, ``retriever serve``'s one-line error)."""
from __future__ import annotations

from retriever.errors import RetrieverError


class Overloaded(RetrieverError):
    """More requests (``max_pending``) or queries (``max_pending_queries``) would wait, or a request waited over
    ``max_queue_seconds``; the client should retry later."""


class Closed(RetrieverError):
    """The batcher was closed (the server is shutting down)."""


class QueryRejected(RetrieverError):
    """The encoder failed on this request's queries alone; the other requests were served."""


def warm_up_failure(name: str, error: Exception) -> RetrieverError:
    """A RetrieverError's own message says what to do; anything else gets its type and a hint."""
    if isinstance(error, QueryRejected) and error.__cause__ is not None:  # its advice is for clients' queries
        error = error.__cause__
    if isinstance(error, RetrieverError):
        return RetrieverError(f"index {name!r} failed its warm-up search: {error}")
    return RetrieverError(f"index {name!r} failed its warm-up search ({type(error).__name__}: {error}); "
                          "its files (or its model's) may be damaged: rebuild the index")
