"""Queries that hold no word the model knows (``texts.only_unknown_tokens``): what dense search tells their
sender, and how hybrid search drops their dense half. One place, so search, the server and fusion tuning agree."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from retriever.wording import agree

NO_WORD = "holds no word the model knows"


def refusal(unknown: np.ndarray, cut: bool, unk_token: str | None, max_length: int, bm25_works: bool,
            listed: bool = False) -> str | None:
    """The one-line refusal of a dense search whose queries ``unknown`` flags (None if it flags none), naming the
    first: ``cut`` says whether that query was cut at ``max_length`` tokens, so its words may lie past the cut;
    hybrid and bm25 mode are suggested only where the index's BM25 part opened (``bm25_works``). ``listed`` queries
    (a POST body's) are named by their place in the list, ``queries.1: the query ...``, 0-based, as pydantic's
    errors and the server's other refusals name them; others as "query 2 of 2", or "the query" if alone."""
    if not unknown.any():
        return None
    number, total = int(np.flatnonzero(unknown)[0]), len(unknown)
    who = (f"queries.{number}: the query" if listed else "the query" if total == 1
           else f"query {number + 1} of {total}")
    bm25 = ", or search it in hybrid or bm25 mode (BM25 may match its text)" if bm25_works else ""
    if cut:
        return (f"{who} {NO_WORD} in its first {max_length} tokens, and the rest of it was cut (the index's query "
                f"max length, --query-max-length), so its dense hits would be arbitrary; put its words first{bm25}")
    return (f"{who} {NO_WORD} (it reads as {unk_token or 'unknown tokens'} or punctuation only), so its dense hits "
            f"would be arbitrary; rephrase it{bm25}")


def without_unknown(top: tuple[np.ndarray, np.ndarray], unknown: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """A dense ranking (scores, labels) with the rows of ``unknown`` queries emptied (labels -1), for fusion: the
    dense half has nothing to go on there, so hybrid ranks such a query by BM25 alone."""
    return top[0], np.where(np.asarray(unknown, dtype=bool)[:, None], -1, top[1])


def no_hits_reason(searcher, queries: Sequence[str], mode: str) -> list[str | None]:
    """Why each of ``queries`` searched in ``mode`` may find no hits, for a search that found none, so the CLI and the
    server say the same: BM25 finds only passages sharing a term, and hybrid finds none only when it weighs BM25 alone
    (a convex fusion's alpha 0) or drops its dense half (a query of no word the model knows; at alpha 1 that half is
    all it weighs). None where neither applies."""
    fusion = searcher.fusion if mode == "hybrid" else None
    alpha = fusion.alpha if fusion is not None and fusion.method == "convex" else None
    unknown = searcher.unknown_words(list(queries)) if mode == "hybrid" and queries else [False] * len(queries)
    if alpha == 1.0:
        return [f"no hits: the query {NO_WORD}, so hybrid drops its dense half, the only one its fusion weighs (alpha "
                "1); rephrase it, or search it in bm25 mode" if dropped else None for dropped in map(bool, unknown)]
    hybrid = f"the query {NO_WORD}, so hybrid ranks it by BM25 alone, and "
    alone = "hybrid weighs BM25 alone (its fusion's alpha is 0), and "
    method = (getattr(searcher.lexical, "record", None) or {}).get("method") if searcher.lexical else None
    zero = f"; with this index's BM25 method {method}, {_WEIGH_ZERO[method]} weighs 0" if method in _WEIGH_ZERO else ""
    return [f"no hits: {alone if alpha == 0.0 else hybrid if dropped else ''}BM25 returns only passages that share a "
            f"term with the query ({_not_terms(searcher.lexical, query)}{zero})"
            if mode == "bm25" or dropped or alpha == 0.0 else None for query, dropped in zip(queries, map(bool, unknown))]


def _not_terms(lexical, query: str) -> str:
    """What of a query is no term: stopwords, short words, and the words of it its stemmer leaves nothing of."""
    said = "stopwords and words under two characters are not terms"
    emptied = list(dict.fromkeys(lexical.tokenize.stemmed_to_nothing(query)))
    if not emptied:
        return said
    return (f"{said}, nor {agree(len(emptied), 'is', 'are')} {', '.join(map(repr, emptied))}, which the "
            f"{lexical.record.get('stemmer')} stemmer leaves nothing of")


# The methods whose IDF is 0 for common terms (bm25s clamps robertson's negative IDF to 0): a passage sharing only
# such terms with the query is not returned, though it holds them (on one passage, robertson finds nothing).
_WEIGH_ZERO = {"robertson": "a term found in half the passages or more", "atire": "a term found in every passage"}
