"""An evaluation's result as the CLI prints it: the metrics table (or JSON), the metrics whose cutoff lies past the
run's depth, and answer recall."""
from __future__ import annotations

from dataclasses import dataclass, field

from retriever.metric_names import metric_cutoff
from retriever.metrics import Evaluation, format_table
from retriever.wording import counted


@dataclass
class EvaluationReport:
    evaluation: Evaluation
    answer_recall: dict[str, float] = field(default_factory=dict)
    queries_with_answers: int = 0
    run_depth: int | None = None  # hits per query when the run stops short of the collection, else None
    # what gives exact values past the depth: a run file's collection size is unknown, so it may be whole already
    deeper: str = "search deeper (-k) for exact values"

    def deeper_than_run(self) -> list[str]:
        """Metrics whose cutoff lies past the run's depth: they only count the hits the run has. None of a run without
        a hit (``hitless``), whose scores are 0 for another reason than its depth."""
        if self.run_depth is None or self.hitless():
            return []
        return [name for name in self.evaluation.mean if metric_cutoff(name) > self.run_depth]

    def hitless(self) -> bool:
        """Whether no query of the run has a hit (a JSON run of empty hit lists; search refuses to write such a TREC
        run, and reads none): it was told to "reach past the run's depth (0 hits per query)", as if it were short."""
        return self.run_depth == 0

    def to_json(self) -> dict:
        data = self.evaluation.to_json()
        if self.hitless():
            data["run_depth"] = 0
        if self.deeper_than_run():
            data["run_depth"] = self.run_depth
            data["metrics_deeper_than_run"] = self.deeper_than_run()
        if self.answer_recall:
            data["answer_recall"] = self.answer_recall
            data["queries_with_answers"] = self.queries_with_answers
        return data

    def table(self) -> str:
        lines = [format_table(self.evaluation)]
        deeper = self.deeper_than_run()
        if self.hitless():
            lines.append("note: no query of the run has a hit (each one's hit list is empty), so every metric is 0; "
                         "check that retrieval produced output")
        if deeper:
            lines.append(f"note: {', '.join(deeper)} {'reach' if len(deeper) > 1 else 'reaches'} past the run's depth "
                         f"({counted(self.run_depth, 'hit')} per query) and count{'' if len(deeper) > 1 else 's'} "
                         f"only those hits; {self.deeper}")
        if self.answer_recall:
            lines.append(f"answer recall ({counted(self.queries_with_answers, 'query')} with answer strings):")
            lines.extend(f"  {name:<20} {value:.4f}" for name, value in self.answer_recall.items())
        return "\n".join(lines)
