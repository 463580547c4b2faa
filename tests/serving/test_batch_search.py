"""One micro-batch searched (``retriever.serving.batch_search``): each request its own k, rows and refusal."""
from concurrent.futures import Future

from fixtures_corpora import TINY_DOCS
from retriever.searching import Searcher
from retriever.serving.batch_search import Request, search_batch


def test_a_hybrid_query_gets_the_same_hits_whatever_k_its_batch_mates_ask_for(tiny_index):
    """Hybrid fuses each engine's top max(k, --fusion-depth); batched with a k over the depth, a small-k query
    was fused from the deeper lists and got other hits than alone (18 of 25 concurrent k=5 requests under
    `serve --fusion-depth 10` next to k=200 ones)."""
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32", fusion_overrides={"depth": 2})
    queries = [text for _, _, text in TINY_DOCS] + ["hot", "river of ice", "the"]
    batch = [Request([q], 3, Future(), "hybrid") for q in queries] + [Request(["deep"], 12, Future(), "hybrid"),
                                                                      Request(["dense"], 12, Future(), "dense")]
    together = search_batch(searcher, batch, lambda texts, cut_at, unknown: searcher.encoder.encode_queries(
        texts, cut_at=cut_at, unknown=unknown))
    alone = searcher.search(queries, k=3, mode="hybrid")
    assert [[(h.id, h.score) for h in hits] for [hits] in together[:len(queries)]] == \
        [[(h.id, h.score) for h in hits] for hits in alone]
    assert together[-2] == searcher.search(["deep"], k=12, mode="hybrid")
