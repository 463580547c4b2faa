"""A value made on its first use, once, however many threads ask for it at the same time."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class OnFirstUse(Generic[T]):
    """``make()``'s value, made by the first ``get`` (the others wait for it under a lock, so it is made once); a
    ``make`` that raises makes nothing, and the next ``get`` tries again. ``Searcher.encoder`` is one: a BM25 search
    needs no model, and a served index's first dense requests, arriving together, share one load."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make, self._value, self._made, self._lock = make, None, False, threading.Lock()

    def get(self) -> T:
        if not self._made:  # once made, no lock is taken
            with self._lock:
                if not self._made:
                    self._value, self._made = self._make(), True
        return self._value

    @property
    def made(self) -> T | None:
        """The value if made, else None (nothing is made here)."""
        return self._value if self._made else None
