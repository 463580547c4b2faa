"""The micro-batcher: concurrent queries share a forward pass, each request gets its own rows."""
from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from retriever.errors import RetrieverError
from retriever.searching import Hit, Searcher
from retriever.serving.batch_errors import Closed, Overloaded, QueryRejected
from retriever.serving.batcher import MicroBatcher


CUT_AT = 5


class FakeEncoder:
    """Encodes a text as [len(text), 0]; can be held inside a pass to pile up requests."""

    def __init__(self) -> None:
        self.batch_size = 16
        self.batches: list[list[str]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.fail = False
        self.poison = "poison"  # a pass with a text containing this fails, as the tokenizer does on bad input
        self.hold_only: str | None = None  # when set, only a pass holding this text waits for ``hold``

    def encode_queries(self, texts, cut_at=None, unknown=None, **settings):
        self.entered.set()
        if self.hold_only is None or self.hold_only in texts:
            self.hold.wait(10)
        self.batches.append(list(texts))
        if self.fail or any(self.poison in t for t in texts):
            raise RuntimeError("encoder exploded")
        if cut_at is not None:  # texts over CUT_AT characters count as cut at CUT_AT tokens
            cut_at[:] = [CUT_AT if len(t) > CUT_AT else None for t in texts]
        if unknown is not None:  # texts the fake's vocabulary lacks: none
            unknown[:] = [False] * len(texts)
        return np.array([[len(t), 0.0] for t in texts], dtype=np.float32)


class FakeSearcher:
    """Hits are the query's own length repeated, so rows can be traced back to their query."""

    mode = "dense"
    lexical = lexical_problem = None
    index_dir = "fake-index"

    def __init__(self) -> None:
        self.encoder = FakeEncoder()

    def check_mode(self, mode):
        return Searcher.check_mode(self, mode)

    def rank(self, texts, k, mode, vectors, unknown=None, keep_unknown=False):
        return self.search_vectors(vectors, k)

    def refuse_unknown(self, unknown, texts, cut_at=None, listed=False):
        assert not unknown.any()

    def search_vectors(self, vectors, k):
        scores = np.repeat(vectors[:, :1], k, axis=1) - np.arange(k)
        return scores.astype(np.float32), np.tile(np.arange(k), (len(vectors), 1))

    def hits(self, scores, labels):
        return [Hit(rank=i + 1, id=str(int(l)), score=float(s), title="", text="")
                for i, (s, l) in enumerate(zip(scores, labels))]


@pytest.fixture()
def fake():
    return FakeSearcher()


def start_held_pass(batcher: MicroBatcher, fake: FakeSearcher):
    """Put one request into a pass that stays running until ``fake.encoder.hold`` is set, so the
    requests submitted next queue up deterministically behind it."""
    fake.encoder.hold.clear()
    future = batcher.submit(["held"], 1)
    assert fake.encoder.entered.wait(5)
    return future


def test_queries_submitted_together_share_one_pass(fake):
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=200)
    try:
        held = start_held_pass(batcher, fake)
        futures = [batcher.submit(["x" * n], k=2) for n in range(1, 11)]
        fake.encoder.hold.set()
        held.result(5)
        results = [f.result(5) for f in futures]
    finally:
        batcher.close()
    assert [len(b) for b in fake.encoder.batches] == [1, 10]
    assert [r[0][0].score for r in results] == [float(n) for n in range(1, 11)]
    assert batcher.stats.batches == 2 and batcher.stats.requests == 11 and batcher.stats.largest_batch == 10


def test_each_request_gets_its_own_k_and_rows(fake):
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=200)
    try:
        start_held_pass(batcher, fake)
        one = batcher.submit(["aa", "aaaa"], k=3)
        two = batcher.submit(["a"], k=1)
        fake.encoder.hold.set()
        assert [[h.score for h in hits] for hits in one.result(5)] == [[2, 1, 0], [4, 3, 2]]
        assert [[h.score for h in hits] for hits in two.result(5)] == [[1]]
    finally:
        batcher.close()
    assert [len(b) for b in fake.encoder.batches] == [1, 3]


def test_batches_stop_at_max_batch(fake):
    batcher = MicroBatcher(fake, max_batch=4, max_wait_ms=100)
    try:
        start_held_pass(batcher, fake)
        futures = [batcher.submit(["q"], 1) for _ in range(10)]
        fake.encoder.hold.set()
        for future in futures:
            future.result(5)
    finally:
        batcher.close()
    assert [len(b) for b in fake.encoder.batches] == [1, 4, 4, 2]


def test_a_request_that_would_take_a_batch_past_max_batch_waits_first_in_line_for_the_next(fake):
    """A POST of many queries queued behind one-query requests was taken into their batch (261 queries at
    --max-batch 32), so they waited out its many passes: 20 s where their own took 0.1 s."""
    batcher = MicroBatcher(fake, max_batch=4, max_wait_ms=100)
    try:
        start_held_pass(batcher, fake)
        futures = [batcher.submit(["a"], 1), batcher.submit(["b"] * 10, 1), batcher.submit(["c"], 1)]
        fake.encoder.hold.set()
        for future in futures:
            future.result(5)
    finally:
        batcher.close()
    assert fake.encoder.batches == [["held"], ["a"], ["b"] * 10, ["c"]]
    assert batcher._waiting == 0


def test_requests_queued_during_a_pass_go_out_together_without_waiting(fake):
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=300)
    try:
        fake.encoder.hold.clear()
        first = batcher.submit(["first"], 1)
        assert fake.encoder.entered.wait(5)
        waiting = [batcher.submit([f"q{i}"], 1) for i in range(5)]
        time.sleep(0.35)  # they have now waited longer than max_wait_ms
        released = time.perf_counter()
        fake.encoder.hold.set()
        first.result(5)
        for future in waiting:
            future.result(5)
        assert time.perf_counter() - released < 0.25, "queued requests should not wait a second window"
    finally:
        batcher.close()
    assert [len(b) for b in fake.encoder.batches] == [1, 5]


def test_two_workers_encode_two_batches_side_by_side(fake):
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=0, workers=2)
    try:
        fake.encoder.hold.clear()
        first = batcher.submit(["first"], 1)
        assert fake.encoder.entered.wait(5)
        fake.encoder.entered.clear()
        second = batcher.submit(["second"], 1)
        assert fake.encoder.entered.wait(5), "the second worker should start while the first pass is held"
        fake.encoder.hold.set()
        assert first.result(5)[0][0].score == 5 and second.result(5)[0][0].score == 6
    finally:
        fake.encoder.hold.set()
        batcher.close()
    assert batcher.stats.batches == 2 and not any(t.is_alive() for t in batcher._threads)


def test_a_query_that_finds_every_worker_idle_does_not_wait(fake):
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=2000)
    try:
        started = time.perf_counter()
        batcher.submit(["alone"], 1).result(5)
        assert time.perf_counter() - started < 1.0, "an idle server should not hold a lone query for max_wait"
    finally:
        batcher.close()


def test_while_a_pass_runs_a_free_worker_waits_for_company_at_most_max_wait(fake):
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=300, workers=2)
    try:
        fake.encoder.hold_only = "held"
        held = start_held_pass(batcher, fake)
        started = time.perf_counter()
        first = batcher.submit(["a"], 1)
        time.sleep(0.05)
        second = batcher.submit(["bb"], 1)  # within the window: joins the first
        assert first.result(5)[0][0].score == 1 and second.result(5)[0][0].score == 2
        assert 0.25 < time.perf_counter() - started < 2.0, "the free worker should wait out max_wait"
        assert not held.done(), "the first worker's pass is still running"
    finally:
        fake.encoder.hold.set()
        batcher.close()
    assert fake.encoder.batches == [["a", "bb"], ["held"]]


def test_a_poisoned_request_fails_alone_and_its_batch_mates_are_served(fake, caplog):
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=100)
    try:
        start_held_pass(batcher, fake)
        good = [batcher.submit(["a" * n], 1) for n in (1, 2)]
        bad = batcher.submit(["poison"], 1)
        more = batcher.submit(["aaa", "aaaa"], 1)
        fake.encoder.hold.set()
        assert [f.result(5)[0][0].score for f in good] == [1, 2]
        assert [hits[0].score for hits in more.result(5)] == [3, 4]
        with pytest.raises(QueryRejected, match=r"encoder failed on this query \(RuntimeError\)"):
            bad.result(5)
    finally:
        batcher.close()
    assert fake.encoder.batches[1:] == [["a", "aa", "poison", "aaa", "aaaa"], ["a"], ["aa"], ["poison"],
                                        ["aaa", "aaaa"]]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "encoder exploded" in warnings[0].getMessage() and not warnings[0].exc_info


def test_an_encoder_failure_reaches_every_request_and_the_batcher_keeps_working(fake):
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=100)
    try:
        fake.encoder.fail = True
        failed = [batcher.submit(["q"], 1) for _ in range(3)]
        for future in failed:
            with pytest.raises(QueryRejected) as raised:
                future.result(5)
            assert "exploded" in str(raised.value.__cause__)
        fake.encoder.fail = False
        assert batcher.submit(["again"], 1).result(5)[0][0].score == 5
    finally:
        batcher.close()


def test_a_search_failure_is_not_blamed_on_the_query(fake, monkeypatch):
    def explode(vectors, k):
        raise RuntimeError("index exploded")

    monkeypatch.setattr(fake, "search_vectors", explode)
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=100)
    try:
        with pytest.raises(RuntimeError, match="index exploded"):
            batcher.submit(["q"], 1).result(5)
    finally:
        batcher.close()


def test_max_batch_queries_go_through_one_forward_pass(tiny_index):
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    passes = []
    searcher.encoder.query_model.register_forward_pre_hook(lambda module, args: passes.append(1))
    batcher = MicroBatcher(searcher, max_batch=32, max_wait_ms=0)
    try:
        hits = batcher.submit([f"query number {i}" for i in range(32)], 1).result(30)
    finally:
        batcher.close()
    assert len(hits) == 32 and len(passes) == 1, f"32 queries took {len(passes)} forward passes"


def test_no_forward_pass_holds_more_queries_than_max_batch(tiny_index):
    """A request's own queries count too: --max-batch 1 encoded a 20-query POST in passes of 16 (the encoder's
    default batch), so 'the most queries in one forward pass' held only for batches of several requests."""
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    sizes = []
    searcher.encoder.query_model.register_forward_pre_hook(lambda module, args, kwargs: sizes.append(
        len(kwargs["input_ids"])), with_kwargs=True)
    batcher = MicroBatcher(searcher, max_batch=2, max_wait_ms=0)
    try:
        hits = batcher.submit([f"query {'word ' * i}" for i in range(5)], 1).result(30)
    finally:
        batcher.close()
    assert len(hits) == 5 and sizes == [2, 2, 1]


def test_a_batcher_leaves_the_searchers_own_searches_as_they_were(tiny_index):
    """The batcher mixes query lengths (and widens the batch) in its own calls only: set on the shared encoder, a
    caller's Searcher.search after building one mixed lengths too, and got other bf16 scores than before."""
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    passes = []
    searcher.encoder.query_model.register_forward_pre_hook(lambda module, args: passes.append(1))
    queries, batch_size = ["cat", "a much longer query about dogs and cats"], searcher.encoder.batch_size
    batcher = MicroBatcher(searcher, max_batch=64, max_wait_ms=0)
    try:
        assert len(batcher.submit(queries, 1).result(30)) == 2 and len(passes) == 1
        passes.clear()
        searcher.search(queries, k=1)
    finally:
        batcher.close()
    assert len(passes) == 2, "the library's search mixed query lengths in one pass once a batcher was built"
    assert searcher.encoder.batch_size == batch_size


def test_too_many_pending_requests_are_refused(fake):
    batcher = MicroBatcher(fake, max_batch=1, max_wait_ms=0, max_pending=2)
    try:
        fake.encoder.hold.clear()
        batcher.submit(["running"], 1)
        assert fake.encoder.entered.wait(5)
        batcher.submit(["a"], 1)
        batcher.submit(["b"], 1)
        with pytest.raises(Overloaded):
            batcher.submit(["c"], 1)
    finally:
        fake.encoder.hold.set()
        batcher.close()


def test_each_request_learns_which_of_its_own_queries_were_cut(fake):
    """Requests encoded in one pass get the encoder's cut notes of their own queries, in order."""
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=200)
    first, second = [], ["stale"]
    try:
        held = start_held_pass(batcher, fake)
        futures = [batcher.submit(["a", "long query"], 1, cut_at=first),
                   batcher.submit(["longer query", "b", "c"], 1, cut_at=second), batcher.submit(["x" * 9], 1)]
        fake.encoder.hold.set()
        for future in [held, *futures]:
            future.result(5)
    finally:
        batcher.close()
    assert fake.encoder.batches[1] == ["a", "long query", "longer query", "b", "c", "x" * 9]
    assert first == [None, CUT_AT] and second == [CUT_AT, None, None]


def test_indexes_sharing_an_encoder_are_batched_apart_and_do_not_wait_on_each_other(fake):
    """Two batchers (two indexes) over one encoder: a pass of one held inside the encoder does not hold the other's,
    and no pass mixes their queries."""
    other = FakeSearcher()
    other.encoder = fake.encoder
    first, second = MicroBatcher(fake, max_wait_ms=0, name="a"), MicroBatcher(other, max_wait_ms=0, name="b")
    try:
        fake.encoder.hold.clear()
        fake.encoder.hold_only = "a-held"
        held = first.submit(["a-held"], 1)
        assert fake.encoder.entered.wait(5)
        assert second.submit(["b-one", "b-two"], 1).result(5)[0][0].score == len("b-one")
        assert not held.done()
        fake.encoder.hold.set()
        assert held.result(5)[0][0].score == len("a-held")
    finally:
        fake.encoder.hold.set()
        first.close()
        second.close()
    assert sorted(fake.encoder.batches) == [["a-held"], ["b-one", "b-two"]]


def test_a_dense_query_of_unknown_words_fails_only_its_own_request_and_nothing_is_encoded_twice(tiny_index):
    """Told by the tokenization of the batch's one pass (no second tokenization); its batch mates, a hybrid request
    of the same query among them, are searched in that pass too, not again one by one."""
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    encode, passes, hold = searcher.encoder.encode_queries, [], threading.Event()

    def held(texts, *args, **kwargs):
        passes.append(list(texts))
        if texts == ["held"]:
            hold.wait(10)
        return encode(texts, *args, **kwargs)

    searcher.encoder.encode_queries = held
    batcher = MicroBatcher(searcher, max_batch=64, max_wait_ms=200)
    try:
        first = batcher.submit(["held"], 2)
        while not passes:
            time.sleep(0.01)
        futures = [batcher.submit(["honey bee"], 2), batcher.submit(["lava", "🐝"], 2),
                   batcher.submit(["🐝"], 2, "hybrid"), batcher.submit(["🐝"], 2, "bm25"), batcher.submit(["ice"], 2)]
        hold.set()
        first.result(10)
        alone = searcher.search(["honey bee"], 2)
        assert futures[0].result(10) == alone and len(futures[4].result(10)[0]) == 2
        with pytest.raises(RetrieverError, match=r"^query 2 of 2 holds no word the model knows"):
            futures[1].result(10)
        assert futures[2].result(10) == futures[3].result(10)  # hybrid: BM25's ranking alone
    finally:
        batcher.close()
    assert passes == [["held"], ["honey bee", "lava", "🐝", "🐝", "ice"], ["honey bee"]]  # the last: ``alone``


def test_close_finishes_queued_work_then_refuses(fake):
    batcher = MicroBatcher(fake, max_batch=64, max_wait_ms=50)
    queued = [batcher.submit(["q"], 1) for _ in range(3)]
    batcher.close()
    assert all(f.done() and f.result()[0][0].score == 1 for f in queued)
    with pytest.raises(Closed):
        batcher.submit(["late"], 1)


def test_async_search_and_warm_up_with_a_real_index(tiny_index):
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    batcher = MicroBatcher(searcher, max_batch=8, max_wait_ms=50)
    try:
        batcher.warm_up()
        assert batcher.stats.batches == 0, "warm-up passes are not counted"
        queries = ["where does honey come from", "hot lava rock", "ice and snow"]

        async def ask_all():
            return await asyncio.gather(*(batcher.search([q], k) for q, k in zip(queries, (1, 5, 12))))

        results = asyncio.run(ask_all())
    finally:
        batcher.close()
    assert batcher.stats.queries == 3
    for query, k, [hits] in zip(queries, (1, 5, 12), results):
        [expected] = searcher.search([query], k=k)
        assert [h.id for h in hits] == [h.id for h in expected]
        assert np.allclose([h.score for h in hits], [h.score for h in expected], atol=1e-5)
        assert hits[0].title and hits[0].text


def test_a_mode_the_index_cannot_do_is_refused_at_submit(fake):
    batcher = MicroBatcher(fake, max_wait_ms=0)
    try:
        with pytest.raises(RetrieverError, match="retriever bm25 fake-index"):
            batcher.submit(["bee"], 1, "hybrid")
        assert batcher.submit(["bee"], 1, "dense").result(5)[0][0].id == "0"
    finally:
        batcher.close()


def test_closing_waits_for_the_batch_being_searched_however_long(tiny_index):
    """A forced stop (a second Ctrl-C) while a long batch was encoded ended `retriever serve` with "terminate called
    without an active exception" and exit code 134 (SIGABRT): close() gave each worker 5 s, then the interpreter exited
    with a worker still inside torch. The batch here takes a little over those 5 s."""
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    gate = threading.Event()
    encode = searcher.encoder.encode_queries
    searcher.encoder.encode_queries = lambda *args, **kwargs: gate.wait(30) and encode(*args, **kwargs)
    batcher = MicroBatcher(searcher, workers=1)
    answered = batcher.submit(["cat"], 1)
    deadline = time.monotonic() + 10
    while not batcher._busy and time.monotonic() < deadline:
        time.sleep(0.01)
    threading.Timer(5.3, gate.set).start()
    batcher.close()
    assert not any(thread.is_alive() for thread in batcher._threads)
    assert len(answered.result(0)[0]) == 1


def test_waiting_queries_are_bounded_by_count_not_only_their_requests(fake):
    """400 waiting POSTs of 256 long queries each grew a server by 440 MB: the 4,096 waiting requests bounded requests,
    not their queries. Waiting queries have their own bound; a request larger than it alone still waits."""
    batcher = MicroBatcher(fake, max_batch=1, max_wait_ms=0, max_pending=100, max_pending_queries=5)
    try:
        start_held_pass(batcher, fake)
        batcher.submit(["a"] * 3, 1)
        with pytest.raises(Overloaded, match="too many queries are waiting.*at most 5 per index"):
            batcher.submit(["b"] * 3, 1)
        waiting = batcher.submit(["c"] * 2, 1)  # fits: 5 in all
        with pytest.raises(Overloaded):
            batcher.submit(["d"], 1)
        fake.encoder.hold.set()
        assert len(waiting.result(5)) == 2
        assert len(batcher.submit(["e"] * 9, 1).result(5)) == 9  # nothing waits: a larger request alone goes in
    finally:
        fake.encoder.hold.set()
        batcher.close()


def test_a_request_that_waited_over_max_queue_seconds_is_refused_unencoded_and_those_behind_it_go_on(fake):
    """Six POSTs of 256 long queries, abandoned by their clients after 0.3 s, held the GET that came next 150 s while
    1,537 queries were encoded for nobody: a request that waited longer than the limit for its batch is refused (a
    503 to retry) and never encoded; the requests behind it that have not waited so long are searched."""
    with pytest.raises(RetrieverError, match="max_queue_seconds must be a positive number"):
        MicroBatcher(fake, max_queue_seconds=0)
    batcher = MicroBatcher(fake, max_batch=1, max_wait_ms=0, max_queue_seconds=0.2)
    try:
        held = start_held_pass(batcher, fake)  # the slow first batch
        abandoned = batcher.submit(["abandoned"] * 3, 1)
        time.sleep(0.3)
        fresh = batcher.submit(["fresh"], 1)
        fake.encoder.hold.set()
        with pytest.raises(Overloaded, match=r"waited 0\.\d s for index 'default'.* over the 0\.2 s a request may "
                                             r"wait \(--max-queue-seconds\).*retry shortly"):
            abandoned.result(5)
        assert len(fresh.result(5)) == 1 and len(held.result(5)) == 1
        assert "abandoned" not in sum(fake.encoder.batches, [])
    finally:
        fake.encoder.hold.set()
        batcher.close()


def test_the_warm_up_runs_on_a_model_whose_vocabulary_lacks_its_words(tiny_index):
    """A model of another script reads "warm up query" as [UNK] alone: the warm-up's dense search was refused as a
    client's would be, and serve would not start ("index 'zh' failed its warm-up search: the query holds no word the
    model knows … rephrase it"). Clients' queries of no known word are still refused."""
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    encode = searcher.encoder.encode_queries

    def knowing_no_latin_word(texts, *args, unknown=None, **kwargs):
        vectors = encode(texts, *args, unknown=unknown, **kwargs)
        if unknown is not None:
            unknown[:] = [True] * len(texts)
        return vectors

    searcher.encoder.encode_queries = knowing_no_latin_word
    batcher = MicroBatcher(searcher, max_batch=4, max_wait_ms=0)
    try:
        batcher.warm_up()
        with pytest.raises(RetrieverError, match="holds no word the model knows"):
            batcher.submit(["honey bee"], 2).result(10)
    finally:
        batcher.close()


def test_a_thread_limit_reached_while_starting_the_workers_is_one_line_naming_the_flag(fake, monkeypatch):
    """`serve --workers 2000` under a low thread limit (ulimit -u, a container's pids.max) ended in a 40-line
    traceback, "RuntimeError: can't start new thread", with the workers started so far left running."""
    start, started = threading.Thread.start, []

    def limited(thread):
        if thread.name.startswith("batcher-") and len(started) == 2:
            raise RuntimeError("can't start new thread")
        start(thread)
        started.append(thread)

    monkeypatch.setattr(threading.Thread, "start", limited)
    with pytest.raises(RetrieverError, match=r"^index 'idx' could not start batcher worker 3 of 5 \(can't start new "
                                             r"thread\): .*give fewer --workers"):
        MicroBatcher(fake, name="idx", workers=5)
    for thread in started:
        thread.join(5)
        assert not thread.is_alive()


def test_the_warm_up_leaves_out_hybrid_where_the_fusion_record_is_damaged(tiny_index):
    """`serve` of such an index warned that hybrid requests get a 500 and dense and bm25 are served, then its hybrid
    warm-up search failed and it exited 1 ("index 'x' failed its warm-up search: … fusion … damaged")."""
    from retriever.fusion import recorded_fusion

    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    searcher.fusion_problem = recorded_fusion(searcher.index_dir, {"fusion": {"alpha": 2.0}}, None)[1]
    batcher = MicroBatcher(searcher, max_batch=4, max_wait_ms=0)
    try:
        batcher.warm_up()
        assert batcher.submit(["honey bee"], 2, "bm25").result(10)[0][0].id == "d6"
    finally:
        batcher.close()
