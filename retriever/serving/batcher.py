"""Micro-batching: concurrent queries share one encoder forward pass.

On a CPU one forward pass over 8 short queries costs clearly less than 8 passes over one
(benchmarks/README.md), so a server that groups requests saturates later than one that encodes
each alone. A worker thread takes the first waiting request and whatever else is queued (up to
``max_batch`` queries: a request that would take the batch past it is left first in line, so a POST of 256 long
queries never carries the one-query requests queued before it through its many passes); if another pass is running it also waits up to ``max_wait_ms`` from the
first request's arrival for more, since the encoder is busy anyway, while a query that finds
every worker idle goes at once (waiting would only add to its latency). It encodes and searches
them together and resolves each request's future. Requests that queued during a pass have waited
already, so they go out at once in the next; one that waited over ``max_queue_seconds`` is refused unencoded (a 503
to retry: its client has likely gone, and those behind it go on). ``workers`` such threads may run batches side by
side (the forward pass is read-only), each on its own small torch thread pool (``threads.configure_threads``).
Each index has its own batcher: indexes sharing one loaded encoder (``SharedEncoders``) are never batched
together; their passes run side by side on the read-only model, as two copies' would.

One request's input must not fail the others it was batched with: when a batch fails, each of its
requests is searched again alone, so only the request that caused the failure gets an error. A
failure to encode a request's own queries is ``QueryRejected`` (a 400 on the server, logged as one
warning line without a traceback); any other failure is passed on as it is (a 500).
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future

import faiss
import torch

from retriever.choices import MAX_QUEUE_SECONDS, MAX_WAITING_QUERIES, MAX_WAITING_REQUESTS
from retriever.errors import RetrieverError
from retriever.searching import Hit, Searcher
from retriever.serving.batch_errors import Closed, Overloaded, QueryRejected, warm_up_failure
from retriever.serving.batch_search import Request, search_batch
from retriever.serving.batch_stats import BatchStats

WARM_UP_SIZES = (1, 2, 4, 8, 16, 32)
log = logging.getLogger(__name__)


_STOP = object()


class _WaitingRequests(queue.Queue):
    """The requests waiting for a batch, one of which can be put back first in line (``put_back``)."""

    def put_back(self, item: object) -> None:
        """``item`` first in line again, whatever ``maxsize`` says: it was taken from the queue a moment ago."""
        with self.not_empty:
            self.queue.appendleft(item)
            self.unfinished_tasks += 1
            self.not_empty.notify()


class MicroBatcher:
    """Groups ``submit``-ted queries into batches searched by one background thread."""

    def __init__(self, searcher: Searcher, max_batch: int = 32, max_wait_ms: float = 2.0,
                 max_pending: int = MAX_WAITING_REQUESTS, name: str = "default", workers: int = 1,
                 max_pending_queries: int = MAX_WAITING_QUERIES, max_queue_seconds: float = MAX_QUEUE_SECONDS) -> None:
        if max_batch < 1:
            raise RetrieverError("max_batch must be at least 1")
        if max_wait_ms < 0:
            raise RetrieverError("max_wait_ms must not be negative")
        if not max_queue_seconds > 0:
            raise RetrieverError(f"max_queue_seconds must be a positive number of seconds, not {max_queue_seconds!r}")
        self.searcher = searcher
        self.name = name
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.stats = BatchStats()
        self._queue = _WaitingRequests(maxsize=max_pending)
        self._closed = False
        self._torch_threads = torch.get_num_threads()
        self._faiss_threads = faiss.omp_get_max_threads()
        self._lock = threading.Lock()  # guards stats and _busy, the count of passes running
        self._busy = 0
        # Queries not yet in a batch: thousands of waiting POSTs of 256 long queries held gigabytes. A larger one waits alone.
        self.max_pending_queries, self._waiting = max_pending_queries, 0
        self.max_queue_seconds = max_queue_seconds  # longer in the queue: refused unencoded (``_shed``)
        self._threads = [threading.Thread(target=self._run, name=f"batcher-{name}-{i}", daemon=True)
                         for i in range(max(1, workers))]
        self._start_workers()

    def _start_workers(self) -> None:
        """Start the worker threads; at the process's thread limit (ulimit -u, a container's pids.max) the ones started
        are stopped and the limit said in one line, where a traceback ended `serve --workers 2000`."""
        for started, thread in enumerate(self._threads):
            try:
                thread.start()
            except RuntimeError as error:
                workers, self._threads = len(self._threads), self._threads[:started]
                self.close()
                raise RetrieverError(f"index {self.name!r} could not start batcher worker {started + 1} of {workers} "
                                     f"({error}): the process is at its limit of threads; give fewer --workers (each "
                                     "index starts that many)") from error

    def submit(self, queries: Sequence[str], k: int, mode: str | None = None, cut_at: list | None = None,
               listed: bool = False) -> Future:
        """A future of one hit list per query; the queries go out with the next batch.

        ``mode`` (dense, bm25, hybrid) defaults to the searcher's; one the index cannot do is refused here.
        ``cut_at`` is filled before the future resolves, per query: the tokens it was cut to, or None. ``listed``
        queries (a POST body's) are named ``queries.N`` in a refusal.
        """
        if self._closed:
            raise Closed("the server is shutting down")
        cut_at = [] if cut_at is None else cut_at
        cut_at[:] = [None] * len(queries)
        request = Request(list(queries), k, Future(), self.searcher.check_mode(mode or self.searcher.mode), cut_at,
                           listed=listed)
        return self._enqueue(request)

    def _enqueue(self, request: Request) -> Future:
        queries = request.queries
        with self._lock:
            if self._waiting and self._waiting + len(queries) > self.max_pending_queries:
                raise Overloaded(f"too many queries are waiting ({self._waiting:,}, at most "
                                 f"{self.max_pending_queries:,} per index); retry shortly")
            try:
                self._queue.put_nowait(request)
            except queue.Full:
                raise Overloaded("too many requests are waiting; retry shortly") from None
            self._waiting += len(queries)
        return request.future

    async def search(self, queries: Sequence[str], k: int, mode: str | None = None,
                     cut_at: list | None = None, listed: bool = False) -> list[list[Hit]]:
        """``submit`` for asyncio code: awaits the batch without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(queries, k, mode, cut_at, listed))

    def warm_up(self) -> None:
        """Run a few batch shapes once so the first real requests don't pay for kernel set-up.

        The query is fixed, so a failure here is the index's (damaged files, say): it is raised as one
        ``RetrieverError`` naming the index, which ``retriever serve`` prints as its one-line error. It is searched
        even where the model knows none of its words (a vocabulary of another script), which a client's is not.
        """
        try:
            for size in WARM_UP_SIZES:
                if size > self.max_batch and size > 1:
                    break
                self._warm_up_search(size, self.searcher.mode)
            if "hybrid" in self.searcher.modes():  # not where the BM25 part or fusion record is damaged (a warning said)
                self._warm_up_search(1, "hybrid")
        except Exception as error:  # noqa: BLE001 - reported as the index's fault, the original kept as the cause
            raise warm_up_failure(self.name, error) from error
        self.stats = BatchStats()

    def _warm_up_search(self, size: int, mode: str) -> None:
        self._enqueue(Request(["warm up query"] * size, 1, Future(), mode, warm_up=True)).result()

    def close(self) -> None:
        """Finish the batches already queued (a forced stop has cancelled them, so they are skipped), then stop the
        workers, waiting for a batch being searched however long it takes: with a worker still inside torch the
        interpreter's exit aborted (exit code 134, "terminate called without an active exception")."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()

    def _run(self) -> None:
        # OpenMP thread counts are per OS thread: a new thread starts with one per core whatever
        # the main thread chose, so the setting is repeated here where the model actually runs.
        torch.set_num_threads(self._torch_threads)
        faiss.omp_set_num_threads(self._faiss_threads)
        while True:
            first = self._taken(self._queue.get())
            if first is _STOP:
                return
            batch, stop = self._gather(first)
            with self._lock:
                self._busy += 1
            try:
                self._process(batch)
            finally:
                with self._lock:
                    self._busy -= 1
            if stop:
                return

    def _gather(self, first: Request) -> tuple[list[Request], bool]:
        batch, size = [first], len(first.queries)
        with self._lock:
            others_busy = self._busy > 0
        # Waiting for company only pays when the encoder is busy anyway; a query that finds every
        # worker idle goes out with whatever is already queued.
        deadline = first.enqueued + self.max_wait if others_busy else 0.0
        while size < self.max_batch:
            remaining = deadline - time.perf_counter()
            try:
                item = self._taken(self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait())
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            if size + len(item.queries) > self.max_batch:  # it goes first in the next batch, alone or with others
                self._put_back(item)
                break
            batch.append(item)
            size += len(item.queries)
        return batch, False

    def _put_back(self, request: Request) -> None:
        with self._lock:
            self._waiting += len(request.queries)
        self._queue.put_back(request)

    def _taken(self, item: object) -> object:
        if item is not _STOP:
            with self._lock:
                self._waiting -= len(item.queries)
        return item

    def _process(self, batch: list[Request]) -> None:
        live = [r for r in batch if r.future.set_running_or_notify_cancel() and not self._shed(r)]
        if live:
            self._resolve(live)

    def _shed(self, request: Request) -> bool:
        """Refuse ``request`` with a 503 to retry if it waited over ``max_queue_seconds`` for its batch: its client has
        likely given up (six POSTs of 256 long queries, abandoned after 0.3 s, held the next GET 150 s while the
        server encoded 1,537 queries for nobody), and one that has not learns to retry rather than wait on."""
        waited = time.perf_counter() - request.enqueued
        if request.warm_up or waited <= self.max_queue_seconds:
            return False
        request.future.set_exception(Overloaded(
            f"the request waited {waited:.1f} s for index {self.name!r}'s encoder, over the {self.max_queue_seconds:g}"
            " s a request may wait (--max-queue-seconds): the server has more work queued than it can do; retry shortly"))
        return True

    def _resolve(self, batch: list[Request]) -> None:
        try:
            results = self._search(batch)
        except Exception as error:  # noqa: BLE001 - handed to the requests that cause it, never lost
            if len(batch) == 1:
                self._fail(batch[0], error)
                return
            for request in batch:  # find the culprit: each request alone, so the others are served
                self._resolve([request])
            return
        for request, hits in zip(batch, results):
            if isinstance(hits, RetrieverError):  # refused alone (``_search``): its batch mates were searched
                request.future.set_exception(hits)
            else:
                request.future.set_result(hits)

    @staticmethod
    def _fail(request: Request, error: Exception) -> None:
        if isinstance(error, QueryRejected):  # the client's input: one line, no traceback
            log.warning("refused a query the encoder failed on: %s: %s", type(error.__cause__).__name__,
                        error.__cause__)
        request.future.set_exception(error)

    def _encode(self, texts: list[str], cut_at: list, unknown: list):
        try:
            # Passes of max_batch queries of any lengths, a request's own too (the encoder's bulk default, 16 on a CPU,
            # split a batch of 32 and let 16 through --max-batch 1); per call, so a library caller keeps the defaults.
            return self.searcher.encoder.encode_queries(texts, batch_size=self.max_batch, mix_lengths=True,
                                                        cut_at=cut_at, unknown=unknown)
        except Exception as error:  # noqa: BLE001 - bad input in one request, or a bug; _resolve sorts out which
            raise QueryRejected(f"the encoder failed on this query ({type(error).__name__}); "
                                "send a shorter or plainer text") from error

    def _search(self, batch: list[Request]) -> list:
        results = search_batch(self.searcher, batch, self._encode)
        self._count(batch, sum(len(request.queries) for request in batch))
        return results

    def _count(self, batch: list[Request], queries: int) -> None:
        with self._lock:
            self.stats.batches += 1
            self.stats.requests += len(batch)
            self.stats.queries += queries
            self.stats.largest_batch = max(self.stats.largest_batch, queries)
