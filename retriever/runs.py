"""Run files and relevance judgments (qrels) on disk.

Runs are written in TREC format (what trec_eval, ir_measures and most papers expect) and can be
read back from TREC or JSON (``run_reading``).  Qrels are read by ``retriever.qrels`` (re-exported here).  Every
malformed line is reported as ``file:line: problem; what to do``.
"""
from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Union

import numpy as np

from retriever.errors import RetrieverError
from retriever.files import atomic_write_lines
from retriever.hits import Hit
from retriever.qrels import Qrels, by_query, file_path, read_qrels
from retriever.run_json import float_or_infinity
from retriever.run_reading import Run, read_run, read_trec_run
from retriever.texts import first_id_problem, id_problem, id_text
from retriever.wording import agree, none_of

__all__ = ["HitlessRun", "Qrels", "RankedLists", "Run", "RunLike", "check_some_hit", "check_tag", "hitless_run_error",
           "rank_order", "ranked_hits", "read_qrels", "read_run", "read_trec_run", "run_lines", "trec_lines",
           "jsonl_lines", "write_run", "write_trec_run"]

RankedLists = Mapping[str, Sequence[tuple[str, float]]]
"""qid -> [(docid, score), ...]; what a searcher returns."""

RunLike = Union[Mapping[str, Mapping[str, float]], RankedLists]
RUN_FORMATS = ("trec", "jsonl")  # what run_lines writes


# ---------------------------------------------------------------------------- ordering / writing


def rank_order(docids: Sequence[str], scores: Sequence[float]) -> list[int]:
    """Positions of the hits in trec_eval's ranking: score descending, compared as float32 (pytrec_eval keeps
    scores in a C float), ties by docid descending. The one order of hits: search results, run files and
    evaluation all use it, so tied documents rank alike everywhere."""
    with np.errstate(over="ignore"):  # beyond float32 range becomes +-inf, as in C
        as_f32 = np.asarray(scores, dtype=np.float64).astype(np.float32).tolist()
    return sorted(range(len(docids)), key=lambda i: (as_f32[i], docids[i]), reverse=True)


def ranked_hits(hits: Mapping[str, float] | Sequence[tuple[str, float]], qid: object = None) -> list[tuple[str, float]]:
    """(docid, score) pairs in ``rank_order``, ids as text and scores as floats, as a run file holds them; writing
    ranks in it keeps a run's rank column as evaluators read the file (trec_eval ignores that column and re-sorts).
    The writers and ``evaluate_run`` all take hits through this, so a run is refused alike by each of them when
    no run file could hold it: a score that is no number or NaN, a document given twice (``qid`` names it)."""
    pairs: list = []
    try:
        if isinstance(hits, (str, bytes)):  # "" was taken as no hits, "d1" as ids 'd' and '1'
            raise TypeError
        pairs = list(hits.items() if isinstance(hits, Mapping) else hits)  # a number: "'int' object is not iterable"
        if not isinstance(hits, Mapping) and any(isinstance(pair, (str, bytes)) for pair in pairs):
            raise TypeError  # ids alone: "d1" was unpacked as document 'd' with the score '1'
        ids = [d if type(d) is str else id_text(d, "document id", qid) for d, _ in pairs]
        raw = [s for _, s in pairs]
    except (TypeError, ValueError):
        alone = "ids alone" if pairs or (isinstance(hits, (str, bytes)) and hits) else f"{type(hits).__name__} {hits!r:.40}"
        given = f"must be a mapping of document id to score, or (id, score) pairs, not {alone}"
        if any(isinstance(pair, Hit) for pair in pairs):  # Searcher.search's results, handed on as they came
            given = ("are Hit objects (Searcher.search's); give {hit.id: hit.score for hit in hits}, or take the run "
                     "Searcher.run returns")
        raise RetrieverError(f"the hits of query {qid!r} {given}") from None
    scores = _scores(raw, ids, qid)
    if len(set(ids)) != len(ids):
        repeated = next(d for i, d in enumerate(ids) if d in ids[:i])
        raise RetrieverError(f"document {repeated!r} is given twice for query {qid!r} (as the same text); a run "
                             "holds one score per (query, document)")
    return [(ids[i], scores[i]) for i in rank_order(ids, scores)]


def _scores(raw: list[object], ids: list[str], qid: object) -> list[float]:
    """Scores as floats; text (``"0.5"``, which float() would take), a bool and NaN, which has no rank, are
    refused. Plain floats and ints, a search's scores, are taken at C speed."""
    for value, docid in zip(raw, ids) if set(map(type, raw)) - {float, int} else ():
        if isinstance(value, (str, bytes, bool)) or not hasattr(value, "__float__"):
            raise RetrieverError(f"the score of document {docid!r} for query {qid!r} is {value!r}, not a number")
    try:
        scores = list(map(float, raw))
    except OverflowError:  # an integer past float range (10**400), which the readers take as infinity
        scores = list(map(float_or_infinity, raw))
    if any(map(math.isnan, scores)):
        docid = ids[next(i for i, score in enumerate(scores) if math.isnan(score))]
        raise RetrieverError(f"the score of document {docid!r} for query {qid!r} is NaN, which has no rank; fix the "
                             "system that produced it")
    return scores


def _check_ids(ids: Sequence[str], what: str, qid: str) -> None:
    found = first_id_problem(ids)
    if found is not None:
        raise RetrieverError(f"cannot write run: bad {what} of query {qid!r}: {found[1]}; ids must be one token a "
                             "TREC file can hold")


def check_tag(tag: str) -> str:
    """A run tag, the last column of a TREC run line: one non-empty token. Commands check it when they start, so a
    bad tag costs no search (a run for standard output was searched whole before its first line refused it)."""
    if not isinstance(tag, str) or id_problem(tag) is not None:
        raise RetrieverError(f"tag {tag!r} must be one non-empty token without whitespace (the last column of a "
                             "TREC run line)")
    return tag


def trec_lines(run_or_ranked: RunLike, tag: str = "retriever", whole: bool = False) -> Iterator[str]:
    """``qid Q0 docid rank score tag`` lines, ranks from 1, queries in the input order; scores are written with
    ``repr`` so reading the file back gives bit-identical floats (and hence the same trec_eval tie-breaking).
    ``whole``: the lines are a whole run file's, so a run without one hit is refused (``hitless_run_error``) once its
    last query is ranked; a batch of a longer run may have none."""
    check_tag(tag)
    queries = lines = 0
    for qid, ranked in _checked_queries(run_or_ranked):
        queries, lines = queries + 1, lines + len(ranked)
        for rank, (docid, score) in enumerate(ranked, start=1):
            yield f"{qid} Q0 {docid} {rank} {score!r} {tag}\n"
    if whole:
        check_some_hit("trec", lines, queries)


class HitlessRun(RetrieverError):
    """A whole TREC run without a hit, refused (``hitless_run_error``); ``queries`` is kept so that the writer of a
    named file can say which file is not written."""

    def __init__(self, message: str, queries: int) -> None:
        super().__init__(message)
        self.queries = queries


def hitless_run_error(queries: int, path: str | Path | None = None) -> HitlessRun:
    """Why a TREC run in which no query got a hit is not written: the file would be empty, and an empty run file
    is refused by ``read_run`` as by trec_eval ("Cannot read results file"), so the tool wrote what it then refused.
    A JSONL run holds a line per query, hits or not, so it is written. ``path``: the file not written, None for
    standard output."""
    held = (f"{none_of(queries, 'query', 'its')} {agree(queries, 'got no hit', 'got a hit')}" if queries else
            "it holds no query")
    run, unwritten = (f"run {path}", f"{path} is not written") if path is not None else ("run", "nothing written")
    return HitlessRun(f"cannot write {run}: {held}, so a TREC run file would hold no line, and an empty run file is "
                      f"refused (by evaluate --run, as by trec_eval); {unwritten}; a JSONL run (search "
                      "--run-format jsonl) keeps queries without hits", queries)


def check_some_hit(fmt: str, hits: int, queries: int, path: str | Path | None = None) -> None:
    """Refuse a whole run in ``fmt`` of ``queries`` that holds no hit (``hitless_run_error``), naming ``path`` when
    it has one: each writer (a run's lines, a resumable search's file, a search printed batch by batch) tested it
    itself, and only some named the file."""
    if fmt == "trec" and not hits:
        raise hitless_run_error(queries, path)


def _checked_queries(run_or_ranked: RunLike) -> Iterator[tuple[str, list[tuple[str, float]]]]:
    """Each query id as text with its hits ranked, the ids checked as one token a run file can hold."""
    for qid, hits in by_query(run_or_ranked, "a run").items():
        qid = id_text(qid, "query id")
        _check_ids([qid], "query id", qid)
        ranked = ranked_hits(hits, qid)
        _check_ids([docid for docid, _ in ranked], "document id", qid)
        yield qid, ranked


def run_lines(run_or_ranked: RunLike, fmt: str = "trec", tag: str = "retriever", whole: bool = False) -> Iterator[str]:
    """The lines of a run in ``fmt`` (trec or jsonl), for every writer of run files (``whole``: as ``trec_lines``)."""
    if fmt not in RUN_FORMATS:
        raise RetrieverError(f"unknown run format {fmt!r}; choose one of {', '.join(RUN_FORMATS)}")
    return trec_lines(run_or_ranked, tag, whole) if fmt == "trec" else jsonl_lines(run_or_ranked)


def jsonl_lines(run_or_ranked: RunLike) -> Iterator[str]:
    """One ``{"qid", "hits": [{"id", "score"}]}`` line per query, hits ranked."""
    for qid, ranked in _checked_queries(run_or_ranked):
        for docid, score in ranked:
            if math.isinf(score):
                raise RetrieverError(f"cannot write run: the score of document {docid!r} for query {qid!r} is "
                                     f"{score}, which JSON cannot hold; write the run in TREC format")
        record = {"qid": qid, "hits": [{"id": d, "score": s} for d, s in ranked]}
        yield json.dumps(record, ensure_ascii=False) + "\n"


def write_trec_run(run_or_ranked: RunLike, path: str | Path, tag: str = "retriever") -> None:
    """``trec_lines`` into ``path``, atomically; a run without a hit is refused naming ``path``, nothing written."""
    write_run(run_or_ranked, file_path(path), "trec", tag)


def write_run(run_or_ranked: RunLike, path: str | Path | None, fmt: str = "trec", tag: str = "retriever",
              whole: bool = True) -> None:
    """A run in ``fmt`` (trec or jsonl) into ``path`` atomically, or to standard output when ``path`` is None
    (every line checked before the first is printed). ``whole=False``: one batch of a run printed batch by batch,
    which may hold no hit; a whole one without a hit is refused naming ``path`` (``check_some_hit``)."""
    lines = run_lines(run_or_ranked, fmt, tag, whole)
    if path is None:
        sys.stdout.writelines(list(lines))
        sys.stdout.flush()
        return
    try:
        atomic_write_lines(file_path(path), lines)
    except HitlessRun as refused:  # the lines know no path
        raise hitless_run_error(refused.queries, path) from None
