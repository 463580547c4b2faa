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

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from retriever.errors import RetrieverError
from retriever.metric_names import DEFAULT_METRICS, check_metrics, metric_name
from retriever.qrels import int_grades
from retriever.runs import Qrels, Run, by_query, ranked_hits
from retriever.texts import id_text
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


def _nothing_judged(run_queries: int, first_ids: list[str], qrels: Qrels) -> RetrieverError:
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
    sample = ", ".join(repr(q) for q in first_ids[:3]) or "none"
    qsample = ", ".join(repr(q) for q in list(qrels)[:3]) or "none"
    queries = none_of(run_queries, "query", the="the run's")
    return RetrieverError(
        f"{queries} {agree(run_queries, 'has no', 'has')} relevance judgments (run ids e.g. {sample}; "
        f"qrels ids e.g. {qsample}); check that the run and qrels use the same query ids")


def _ids_as_text(run_or_qrels: Mapping, what: str) -> dict:
    """Query (and, in qrels, document) ids as the text a run or qrels file holds, as the run writers write them: a
    run of integer ids (or numpy ones) scored against qrels read from a file matched nothing and scored 0, silently.
    ``what``: "run" or "qrels"; a run's document ids are made text as each query is ranked."""
    if all(type(qid) is str for qid in run_or_qrels) and (what == "run" or all(
            type(doc) is str for docs in run_or_qrels.values() for doc in docs)):
        return run_or_qrels
    keyed = _as_text(run_or_qrels, f"query {{}} is given twice in the {what}", "query id")
    if what == "run":
        return keyed
    return {qid: _as_text(docs, f"document {{}} of query {qid!r} is given twice in the qrels", "document id", qid)
            for qid, docs in keyed.items()}


def _as_text(mapping: Mapping, given_twice: str, what: str, qid: object = None) -> dict:
    """``mapping`` keyed by its keys as the run writers write them (``texts.id_text``: a float or None is refused, not
    made '3.0' or 'None'), refusing two keys of one text (``7`` and ``"7"``): one was dropped."""
    texts = [id_text(key, what, qid) for key in mapping]
    keyed = dict(zip(texts, mapping.values()))
    if len(keyed) < len(mapping):
        seen: dict[str, object] = {}
        for text, key in zip(texts, mapping):
            if seen.setdefault(text, key) is not key:
                raise RetrieverError(f"{given_twice.format(repr(text))} (as {seen[text]!r} and {key!r}), "
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
    relevance_level: int = 1  # trec_eval's -l the binary measures were scored at: metrics files at two levels differ

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
    by_query(run, "a run")  # a run of the wrong kind is named before the settings and qrels are read
    scoring = RunScoring(qrels, metrics, relevance_level)
    scoring.add(run)
    return scoring.evaluation()


class RunScoring:
    """``evaluate_run`` fed one batch of a run at a time, so a search is scored as it goes and its hits are never all
    held (queries x depth). Per-query values are independent, and the mean is ``math.fsum``'s exactly rounded sum in
    qrels order, so the numbers are those of the whole run scored at once, to the last digit."""

    def __init__(self, qrels: Qrels, metrics: Iterable[str] = DEFAULT_METRICS, relevance_level: int = 1) -> None:
        self.level = check_relevance_level(relevance_level)
        self.parsed = check_metrics(metrics)
        self.names = [metric_name(family, k) for family, k in self.parsed]
        self.qrels = _ids_as_text(int_grades(by_query(qrels, "qrels")), "qrels")
        self.judged_qids = judged_query_ids(self.qrels)
        self.judged_set = set(self.judged_qids)
        self.per_query: dict[str, dict[str, float]] = {}  # judged queries with hits
        self.run_ids: set[str] = set()  # every query added: one given in two batches is refused, not counted twice
        self.excluded = 0
        self.first_ids: list[str] = []  # for the refusal of a run none of whose queries is judged

    def add(self, part: Run) -> dict[str, list[str]]:
        """Score one batch of the run; a query given in an earlier batch is refused before any of this one counts.
        Gives back the document ids of each query it ranked (judged, with hits) in trec_eval's order, so a caller
        scoring the batch otherwise too (answer recall) does not sort them again."""
        part, ranked = _ids_as_text(by_query(part, "a run"), "run"), {}
        again = next((qid for qid in part if qid in self.run_ids), None)
        if again is not None:
            raise RetrieverError(f"query {again!r} is given twice in the run; give each once")
        self.run_ids.update(part)
        for qid, hits in part.items():
            if len(self.first_ids) < 3:
                self.first_ids.append(qid)
            if qid in self.judged_set:
                if hits:
                    judged = self.qrels[qid]
                    ranked[qid] = trec_order(hits, qid)
                    grades = [judged.get(d, 0) for d in ranked[qid]]
                    self.per_query[qid] = dict(zip(self.names, _query_metrics(grades, judged, self.parsed,
                                                                              self.level)))
            elif hits:
                self.excluded += 1
            if not hits:  # None or 0 was scored as a query without hits: refused as the writers refuse it
                ranked_hits(hits, qid)
        return ranked

    def evaluation(self) -> Evaluation:
        """The run's evaluation once every batch is added; a judged query never added (or without hits) scores 0."""
        if self.judged_set.isdisjoint(self.run_ids):  # also true when nothing is judged
            raise _nothing_judged(len(self.run_ids), self.first_ids, self.qrels)
        check_level_reached(self.qrels, self.names, self.level)
        per_query = {qid: self.per_query[qid] if qid in self.per_query else dict.fromkeys(self.names, 0.0)
                     for qid in self.judged_qids}
        n = len(per_query)
        mean = {name: math.fsum(v[name] for v in per_query.values()) / n for name in self.names}
        return Evaluation(per_query=per_query, mean=mean, num_queries=n, num_unjudged_excluded=self.excluded,
                          num_missing_from_run=n - len(self.per_query), relevance_level=self.level)


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
    if evaluation.relevance_level != 1:
        lines.append(f"relevance level {evaluation.relevance_level}: recall, MRR and MAP count a grade of "
                     f"{evaluation.relevance_level} or more as relevant; nDCG keeps every grade")
    return "\n".join(lines)
