"""The served indexes: their searchers and batchers, as the routes reach them, and how /indexes describes one."""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes

from retriever.choices import MAX_QUEUE_SECONDS, MAX_WAITING_QUERIES, MAX_WAITING_REQUESTS
from retriever.encoder_settings import SERVED_FIELDS
from retriever.searching import Searcher
from retriever.serving.batcher import MicroBatcher
from retriever.serving.inputs import ApiError, Limits
from retriever.serving.problems import clipped, sent_path

MAX_NAME_CHARS = 64


def valid_index_name(name: str) -> bool:
    """Names end up in URLs and log lines only, never in paths, but stay boring on purpose: letters, marks and digits
    of any script, '_' and '-' (``schemas.NAME_RULE``)."""
    return 0 < len(name) <= MAX_NAME_CHARS and all(name_character(char) for char in name)


def name_character(char: str) -> bool:
    """A letter, mark or digit of any script (a mark: й's breve, a Devanagari virama), `_` or `-`."""
    return char in "_-" or unicodedata.category(char)[0] in "LMN"


def served_name(name: str) -> str:
    """An index name from a request's path, in the form names are served in (NFC, as `serve` reads them): a client
    writing й as и and a combining breve (as macOS names folders) asked for a name that looked the same and was not."""
    return unicodedata.normalize("NFC", name)


def requested_name(scope: dict, name: str) -> str:
    """``served_name`` of the index name in a request's path, whose bytes must be UTF-8 once %-decoded, as a query
    string's must: uvicorn decodes others to U+FFFD, so `/indexes/%ff/search` was a 404 naming '\ufffd', a character
    the client never sent."""
    raw = scope.get("raw_path") or b""
    try:
        unquote_to_bytes(raw.decode("latin-1")).decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, f"the path {sent_path(scope)} is not UTF-8 once %-decoded; percent-encode the index "
                            "name's UTF-8 bytes") from None
    return served_name(name)


@dataclass(frozen=True)
class BatchSettings:
    """How the micro-batchers group concurrent queries (see ``retriever.serving.batcher``)."""

    max_batch: int = 32
    max_wait_ms: float = 2.0
    max_pending: int = MAX_WAITING_REQUESTS
    max_pending_queries: int = MAX_WAITING_QUERIES
    max_queue_seconds: float = MAX_QUEUE_SECONDS
    workers: int = 1
    warm_up: bool = True


@dataclass
class ServedIndexes:
    """What the routes need: the searchers, their batchers (while the app runs) and the limits."""

    searchers: dict[str, Searcher]
    default: str
    limits: Limits
    batching: BatchSettings
    batchers: dict[str, MicroBatcher] = field(default_factory=dict)

    def searcher(self, name: str) -> Searcher:
        if name not in self.searchers:  # clipped as any name a client sends: one of 30,000 characters came back whole
            raise ApiError(404, f"no index named {clipped(name)!r}; served: {', '.join(self.searchers)}")
        return self.searchers[name]

    def batcher(self, name: str) -> MicroBatcher:
        self.searcher(name)
        if name not in self.batchers:
            raise ApiError(503, "the server is starting or stopping")
        return self.batchers[name]

    def check_mode(self, name: str, mode: str | None) -> None:
        """A mode the index cannot do, refused in the client's terms (``mode``), not the CLI's. A damaged BM25 part
        is left to the searcher (as is a damaged fusion record), whose error for it is the server's fault (a 500), not
        the client's."""
        searcher = self.searcher(name)
        if mode not in (None, *searcher.modes()) and searcher.lexical is None and not searcher.lexical_problem:
            raise ApiError(400, f"index {name!r} has no BM25 part, so mode {mode} cannot run on it: ask for "
                                "mode dense (the server's operator can add BM25 with `retriever bm25`, "
                                "without re-encoding)")

    def start(self) -> None:
        for name, searcher in self.searchers.items():
            self.batchers[name] = MicroBatcher(searcher, self.batching.max_batch, self.batching.max_wait_ms,
                                               self.batching.max_pending, name=name, workers=self.batching.workers,
                                               max_pending_queries=self.batching.max_pending_queries,
                                               max_queue_seconds=self.batching.max_queue_seconds)
            if self.batching.warm_up:
                self.batchers[name].warm_up()

    def stop(self) -> None:
        for batcher in self.batchers.values():
            batcher.close()
        self.batchers.clear()


def summary(name: str, searcher: Searcher) -> dict:
    """An index as /indexes lists it: ``modes`` are those that work now, so a BM25 part that could not be opened
    leaves bm25 and hybrid out and says why in ``bm25_damage`` (null otherwise), a damaged fusion record leaves hybrid
    out and says why in ``fusion_damage``; requests for them get a 500."""
    manifest = searcher.manifest
    encoder = manifest.get("encoder", {})
    damage = searcher.lexical_problem
    return {"name": name, "documents": int(searcher.index.ntotal),
            "modes": searcher.modes(), "bm25_damage": str(damage) if damage else None,
            "fusion_damage": str(searcher.fusion_problem) if searcher.fusion_problem else None,
            "index_type": manifest.get("index", {}).get("type"),
            "encoder": {key: encoder.get(key) for key in SERVED_FIELDS}}
