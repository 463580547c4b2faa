"""IR metrics that reproduce trec_eval (as wrapped by pytrec_eval) without depending on it.

Numbers reported by this engine must be comparable with papers, so every metric follows
trec_eval's conventions exactly, including its less obvious ones:

* Ranking ignores the run's rank column: documents are sorted by score descending, ties broken
  by docid in *descending* string order (``strcmp(b, a)`` in trec_eval's ``comp_sim_docno``).
* Scores are compared after rounding to float32: pytrec_eval stores each score in a C
  ``float``, so scores that differ only beyond float32 precision are ties.
* A document is relevant when its grade is >= 1 (or >= the relevance level, trec_eval's -l, for recall, MRR and
  MAP); grade 0 is judged non-relevant; negative grades and unjudged documents count as non-relevant and contribute
  no gain.
* nDCG gain is the raw grade, discount ``log2(rank + 1)``, and the ideal ranking is built from
  all positive grades in the qrels (not only the retrieved ones).
* AP at a cutoff is divided by the total number of relevant documents, retrieved or not.
"""
from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from retriever.errors import RetrieverError
from retriever.metric_names import DEFAULT_METRICS, check_metrics, metric_name
from retriever.qrels import int_grades
from retriever.runs import Qrels, Run, by_query, ranked_hits
from retriever.wording import agree, counted, none_of


def trec_order(scores: Mapping[str, float], qid: object = None) -> list[str]:
    """Docids, as text, in trec_eval's order (``runs.ranked_hits``); a NaN score has no rank."""
    return [docid for docid, _ in ranked_hits(scores, qid)]


def _query_metrics(ranked_grades: list[int], judged: Mapping[str, int], parsed: list[tuple[str, int]],
                   level: int = 1) -> list[float]:
    """Metric values for one query, given the grades of its ranked documents (0 if unjudged). Binary measures count
    a grade of ``level`` or more as relevant (trec_eval's -l); nDCG takes every positive grade as gain. A query with
    no document at the level scores 0 on them, as in trec_eval."""
    num_rel = sum(1 for g in judged.values() if g >= level)
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)
    values = []
    for family, k in parsed:
        top = ranked_grades[:k]
        if family == "ndcg":
            dcg = sum(g / math.log2(i + 2) for i, g in enumerate(top) if g > 0)
            idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal[:k]))
            values.append(dcg / idcg)
        elif not num_rel:
            values.append(0.0)
        elif family == "recall":
            values.append(sum(1 for g in top if g >= level) / num_rel)
        elif family == "mrr":
            values.append(next((1.0 / (i + 1) for i, g in enumerate(top) if g >= level), 0.0))
        else:  # map
            hits, precision_sum = 0, 0.0
            for i, g in enumerate(top):
                if g >= level:
                    hits += 1
                    precision_sum += hits / (i + 1)
            values.append(precision_sum / num_rel)
    return values


def check_relevance_level(level: object) -> int:
    """trec_eval's -l: the lowest grade binary measures count as relevant, a positive integer."""
    if isinstance(level, bool) or not isinstance(level, numbers.Integral) or level < 1:
        raise RetrieverError(f"the relevance level is {level!r}; it must be an integer of 1 or more (the lowest grade "
                             "recall, MRR and MAP count as relevant, trec_eval's -l; TREC DL uses 2)")
    return int(level)


def judged_query_ids(qrels: Qrels) -> list[str]:
    """Ids of the queries with at least one relevant judgment (a grade of 1 or more), in qrels order: the queries
    trec_eval's mean is over, and the only ones worth searching."""
    return [qid for qid, docs in qrels.items() if any(grade >= 1 for grade in docs.values())]


def _nothing_judged(run: Run, qrels: Qrels) -> RetrieverError:
    """Why no run query can be scored: its ids are not the qrels' judged ones, or the qrels judge nothing relevant
    (grades below 1 only: then saying to check the ids would send the user the wrong way)."""
    judgments = sum(map(len, qrels.values()))
    if not judgments:  # the grade list below would be empty: "their 0 judgments have grades , and ..."
        held = f"{counted(len(qrels), 'query')} and no judgment" if qrels else "no query"
        return RetrieverError(f"the qrels are empty (they hold {held}); pass the qrels that judge the run's queries")
    if not judged_query_ids(qrels):
        grades = sorted({g for docs in qrels.values() for g in docs.values()})
        return RetrieverError(
            f"the qrels judge no document relevant: their {counted(judgments, 'judgment')} "
            f"{agree(judgments, 'has', 'have')} grades "
            f"{', '.join(map(str, grades[:5]))}{', ...' if len(grades) > 5 else ''}, and only 1 or more is relevant "
            "(as in trec_eval); check the qrels' grade column")
    sample = ", ".join(repr(q) for q in list(run)[:3]) or "none"
    qsample = ", ".join(repr(q) for q in list(qrels)[:3]) or "none"
    queries = none_of(len(run), "query", the="the run's")
    return RetrieverError(
        f"{queries} {agree(len(run), 'has no', 'has')} relevance judgments (run ids e.g. {sample}; "
        f"qrels ids e.g. {qsample}); check that the run and qrels use the same query ids")


def _ids_as_text(run: Run, qrels: Qrels) -> tuple[Run, Qrels]:
    """Query and document ids as the text a run or qrels file holds, as the run writers write them: a run of
    integer ids (or numpy ones) scored against qrels read from a file matched nothing and scored 0, silently."""
    if all(type(qid) is str for qid in itertools.chain(run, qrels)) and all(
            type(doc) is str for docs in qrels.values() for doc in docs):
        return run, qrels  # document ids of the run are made text as each query is ranked
    return (_as_text(run, "query {} is given twice in the run"),
            {qid: _as_text(docs, f"document {{}} of query {qid!r} is given twice in the qrels")
             for qid, docs in _as_text(qrels, "query {} is given twice in the qrels").items()})


def _as_text(mapping: Mapping, given_twice: str) -> dict:
    """``mapping`` keyed by its keys as text, refusing two keys of one text (``7`` and ``"7"``): one was dropped."""
    keyed = {str(key): value for key, value in mapping.items()}
    if len(keyed) < len(mapping):
        seen: dict[str, object] = {}
        for key in mapping:
            if seen.setdefault(str(key), key) is not key:
                raise RetrieverError(f"{given_twice.format(repr(str(key)))} (as {seen[str(key)]!r} and {key!r}), "
                                     "and ids are scored as the text a run file holds; give each once")
    return keyed


def check_level_reached(qrels: Qrels, names: list[str], level: int) -> None:
    """Refuse a relevance level no grade reaches while recall, MRR or MAP is asked: each would be 0 for every query
    (TREC DL's -l 2 on binary qrels), with no word why. Evaluating an index checks it before its search."""
    binary = [name for name in names if not name.startswith("ndcg@")]
    top = max((grade for docs in qrels.values() for grade in docs.values()), default=0)
    if binary and top < level:
        listed = " and ".join([", ".join(binary[:-1]), binary[-1]] if len(binary) > 1 else binary)
        raise RetrieverError(f"no judgment reaches relevance level {level}: the judged queries' grades go up to {top}, "
                             f"so {listed} would be 0 for every query; lower the relevance level (TREC DL's 2 is for "
                             "its grades 0 to 3), or ask for nDCG alone, which keeps every grade")


@dataclass
class Evaluation:
    """Per-query and mean metric values plus how many queries were left out and why."""

    per_query: dict[str, dict[str, float]]
    mean: dict[str, float]
    num_queries: int
    num_unjudged_excluded: int
    num_missing_from_run: int

    def to_json(self) -> dict:
        """Plain dict for ``json.dump``; key order is stable for diffable reports."""
        return asdict(self)


def evaluate_run(run: Run, qrels: Qrels, metrics: Iterable[str] = DEFAULT_METRICS,
                 relevance_level: int = 1) -> Evaluation:
    """Score a run against qrels with trec_eval semantics (see module docstring).

    Which queries count:

    * judged queries (at least one grade >= 1 in the qrels) are evaluated;
    * run queries that are absent from the qrels, or whose judgments are all <= 0, are left out
      and counted in ``num_unjudged_excluded`` (trec_eval would score the latter as 0);
    * judged queries absent from the run score 0 on every metric and are included in the mean,
      counted in ``num_missing_from_run``.  pytrec_eval only reports queries present in the run,
      so its mean differs when queries are missing; ours cannot be inflated by dropping hard
      queries;
    * a query without hits counts as absent from the run, as a TREC run file holds no line for it: a search's
      run (``evaluate --index``, a JSONL run) and the TREC file written from it print the same counts.

    ``relevance_level`` is trec_eval's -l: recall, MRR and MAP count a grade of it or more as relevant (TREC DL
    uses 2); nDCG keeps every grade, and which queries count does not change (a judged query with no document at
    the level scores 0 on the binary measures, as in trec_eval).

    Raises RetrieverError when no run query is judged, which almost always means the query
    ids of the run and the qrels do not match.
    """
    level = check_relevance_level(relevance_level)
    parsed = check_metrics(metrics)
    names = [metric_name(family, k) for family, k in parsed]
    run, qrels = _ids_as_text(by_query(run, "a run"), int_grades(by_query(qrels, "qrels")))
    judged_qids = judged_query_ids(qrels)
    judged_set = set(judged_qids)
    excluded = sum(1 for q, hits in run.items() if hits and q not in judged_set)
    missing = sum(1 for q in judged_qids if not run.get(q))
    if not any(q in run for q in judged_qids):  # also true when nothing is judged
        raise _nothing_judged(run, qrels)
    check_level_reached(qrels, names, level)

    per_query: dict[str, dict[str, float]] = {}
    for qid in judged_qids:
        judged = qrels[qid]
        if run.get(qid):
            grades = [judged.get(d, 0) for d in trec_order(run[qid], qid)]
            per_query[qid] = dict(zip(names, _query_metrics(grades, judged, parsed, level)))
        else:
            per_query[qid] = {name: 0.0 for name in names}
    n = len(per_query)
    mean = {name: math.fsum(v[name] for v in per_query.values()) / n for name in names}
    return Evaluation(per_query=per_query, mean=mean, num_queries=n,
                      num_unjudged_excluded=excluded, num_missing_from_run=missing)


def format_table(evaluation: Evaluation) -> str:
    """Plain-text table of mean metrics, for terminals and logs."""
    width = max([len("metric")] + [len(name) for name in evaluation.mean])
    lines = [f"{'metric':<{width}}  {'mean':>8}", f"{'-' * width}  {'-' * 8}"]
    lines += [f"{name:<{width}}  {value:>8.4f}" for name, value in evaluation.mean.items()]
    lines.append(
        f"queries: {evaluation.num_queries} evaluated "
        f"({evaluation.num_missing_from_run} missing from run, scored 0); "
        f"{counted(evaluation.num_unjudged_excluded, 'run query', 'run queries')} without relevant judgments excluded"
    )
    return "\n".join(lines)
