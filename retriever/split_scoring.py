"""Scoring an index's search of a split as it goes: each batch of queries is scored (trec_eval metrics through
``metrics.RunScoring``, answer recall through ``answer_recall.first_answer_ranks``), then written to the run file or
dropped, so an evaluation holds one batch of hits rather than every query's (queries x depth: gigabytes at the
default depth of 1000 for a split of a few hundred thousand queries)."""
from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from retriever.answer_recall import answer_tokens, first_answer_ranks, recall_at
from retriever.corpus import Query
from retriever.evaluation_report import EvaluationReport
from retriever.metrics import RunScoring, trec_order
from retriever.partial_runs import StreamedRun
from retriever.qrels import Qrels
from retriever.runs import Run, write_trec_run
from retriever.wording import counted

ANSWER_KS = (1, 5, 20, 100)


def scorable_answers(queries: list[Query]) -> dict[str, list[str]]:
    """Answer strings of the queries with at least one that holds a word: only those can match a passage, and a
    collection whose answers hold none (e.g. "—") lost its whole evaluation, after the search, to that; such
    answers are named on stderr."""
    answers = {q.id: list(q.answers) for q in queries if any(map(answer_tokens, q.answers))}
    wordless = [q for q in queries if q.answers and q.id not in answers]
    if wordless:
        print(f"warning: the answers of {counted(len(wordless), 'query')} hold no word (e.g. {wordless[0].id!r}: "
              f"{list(wordless[0].answers)[:3]}), so no passage can contain them; those queries are left out of "
              "answer recall", file=sys.stderr)
    return answers


class SplitScoring:
    """The metrics and answer recall of a split's search, scored one batch of hits at a time (``scored``)."""

    def __init__(self, qrels: Qrels, metrics: Iterable[str], relevance_level: int, queries: list[Query],
                 document_text: Callable[[str], str], k: int) -> None:
        self.metrics = RunScoring(qrels, metrics, relevance_level)
        self.answers = scorable_answers(queries)
        self.ks = tuple(cutoff for cutoff in ANSWER_KS if cutoff <= k)
        self.document_text = document_text
        self.first_answers: dict[str, int | None] = {}
        self.passages: dict[str, str] = {}  # tokens of the passages searched, as answer recall scored them whole

    def scored(self, batches: Iterable[Run]) -> Iterator[Run]:
        """``batches``, each scored as it passes."""
        for part in batches:
            ranked = self.metrics.add(part)  # the judged queries' hits in trec order, sorted once for both
            if self.answers:
                ranked = {qid: ranked[qid] if qid in ranked else trec_order(hits)
                          for qid, hits in part.items() if qid in self.answers}
                self.first_answers.update(first_answer_ranks(ranked, {qid: self.answers[qid] for qid in ranked},
                                                             self.document_text, max(self.ks), self.passages))
            yield part

    def report(self, run_depth: int | None) -> EvaluationReport:
        """The evaluation once every batch has passed; a query with answers never searched counts as a miss."""
        report = EvaluationReport(self.metrics.evaluation(), run_depth=run_depth)
        if self.answers:
            report.answer_recall = recall_at([self.first_answers.get(qid) for qid in self.answers], self.ks)
            report.queries_with_answers = len(self.answers)
        return report


def score_batches(scoring: SplitScoring, batches: Iterator[Run], save_run: str | Path | None = None,
                  keep_run: bool = False, scored: Callable[[], None] | None = None) -> Run | None:
    """Score every batch, writing each to the TREC run file ``save_run`` (renamed into place once all are written) as
    it is searched; the whole run is held and returned only with ``keep_run``. ``scored`` is called once every batch
    is scored, before the run file is renamed into place: evaluate prints its table there, so a run file in place
    means the table was printed (a Ctrl-C between them left the run, and exit 0 saying the work was done, with no
    table)."""
    kept: Run | None = {} if keep_run else None
    parts = scoring.scored(batches)
    if kept is not None:
        parts = (kept.update(part) or part for part in parts)
    if save_run is None:
        deque(parts, maxlen=0)
        if scored is not None:
            scored()
    else:
        write_trec_run(StreamedRun(_then(parts, scored)), save_run)
    return kept


def _then(parts: Iterator[Run], scored: Callable[[], None] | None) -> Iterator[Run]:
    """``parts``, then ``scored()`` once the last has been taken: inside the writer, before its rename."""
    yield from parts
    if scored is not None:
        scored()
