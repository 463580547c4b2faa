"""DPR's answer recall (top-k accuracy): whether a query's top passages hold one of its answer strings.

Open-domain QA sets (Natural Questions, TriviaQA) judge by answer strings rather than qrels, so this is scored
beside the trec_eval metrics of ``metrics.py``, not as one of them.
"""
from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache

from retriever.errors import RetrieverError


@lru_cache(maxsize=1)
def _token_re() -> re.Pattern[str]:
    """Tokens are runs of letters, digits and combining marks, like DPR's ALPHA_NUM class.

    The stdlib ``re`` has no ``\\p{M}``, so the mark ranges are collected once from unicodedata;
    only planes 0, 1 and 14 hold combining marks, so the scan covers about 135k of the 1.1M code points.
    """
    ranges: list[tuple[int, int]] = []
    for cp in itertools.chain(range(0x20000), range(0xE0000, 0xE1000)):
        if unicodedata.category(chr(cp)).startswith("M"):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    marks = "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in ranges)
    return re.compile(rf"(?:[^\W_]|[{marks}])+")


def answer_tokens(text: str) -> list[str]:
    """DPR-style normalisation: NFD, lowercase, word tokens; punctuation is dropped.

    Unlike DPR's SimpleTokenizer, punctuation does not become tokens, so "U.S." matches "u s".
    """
    return _token_re().findall(unicodedata.normalize("NFD", text).lower())


def _joined(tokens: Iterable[str]) -> str:
    # Tokens never contain spaces, so " a b " in " x a b y " is exactly a contiguous token match.
    return " " + " ".join(tokens) + " "


def answer_recall(
    ranked_doc_ids: Mapping[str, Sequence[str]],
    answers: Mapping[str, Sequence[str]],
    doc_text: Callable[[str], str] | Mapping[str, str],
    ks: Sequence[int] = (1, 5, 20, 100),
) -> dict[str, float]:
    """DPR top-k accuracy: share of queries whose top-k passages contain an answer string.

    ``ranked_doc_ids`` lists are taken as already ranked.  Only queries with at least one
    answer that has tokens are counted; such queries missing from ``ranked_doc_ids`` count as
    misses.  An answer matches when its tokens occur contiguously in a passage's tokens.
    """
    check_cutoffs(ks)
    return recall_at(list(first_answer_ranks(ranked_doc_ids, answers, doc_text, max(ks)).values()), ks)


def check_cutoffs(ks: Sequence[int]) -> None:
    """Refuse a cutoff below 1, which no ranking reaches."""
    if not ks or any(k < 1 for k in ks):
        raise RetrieverError(f"answer recall cutoffs must be positive, got {list(ks)}")


def first_answer_ranks(ranked_doc_ids: Mapping[str, Sequence[str]], answers: Mapping[str, Sequence[str]],
                       doc_text: Callable[[str], str] | Mapping[str, str], depth: int,
                       doc_cache: dict[str, str] | None = None) -> dict[str, int | None]:
    """The 0-based rank of each query's first passage holding an answer within its top ``depth`` (None: none), for
    the queries with an answer that has tokens: ``answer_recall``'s part per query, which an evaluation scoring one
    batch of queries at a time keeps instead of every query's ranking. ``doc_cache``: passages' tokens, kept from one
    batch to the next so a passage is read and tokenized once."""
    get_text = doc_text.__getitem__ if isinstance(doc_text, Mapping) else doc_text
    doc_cache = {} if doc_cache is None else doc_cache
    first_hit: dict[str, int | None] = {}  # 0-based rank of first answer-bearing passage per query
    for qid, query_answers in answers.items():
        for what, given, items, one in (("answers", query_answers, "strings", "answer"),
                                        ("ranking", ranked_doc_ids.get(qid, ()), "document ids", "id")):
            if isinstance(given, str):  # read letter by letter: "a cat" matched any passage holding the word "a"
                raise RetrieverError(f"the {what} of query {qid!r} must be a list of {items}, not the string "
                                     f"{given!r}; wrap one {one} as [{given!r}]")
        needles = [_joined(t) for t in map(answer_tokens, query_answers) if t]
        if not needles:
            continue
        hit_rank = None
        for rank, docid in enumerate(list(ranked_doc_ids.get(qid, ()))[:depth]):
            if docid not in doc_cache:
                try:
                    doc_cache[docid] = _joined(answer_tokens(get_text(docid)))
                except KeyError:
                    raise RetrieverError(
                        f"no text for document {docid!r} ranked for query {qid!r}; "
                        "pass the corpus the run was produced from"
                    ) from None
            haystack = doc_cache[docid]
            if any(needle in haystack for needle in needles):
                hit_rank = rank
                break
        first_hit[qid] = hit_rank
    return first_hit


def recall_at(first_hit: Sequence[int | None], ks: Sequence[int]) -> dict[str, float]:
    """Answer recall at each cutoff from the queries' ``first_answer_ranks``."""
    if not first_hit:
        raise RetrieverError("no query has a non-empty answer; check the answers file")
    n = len(first_hit)
    return {f"answer_recall@{k}": sum(1 for r in first_hit if r is not None and r < k) / n for k in ks}
