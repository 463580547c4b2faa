"""The warning for queries of empty text, searched all the same: how each search mode treats them, and how a run
file then counts them, said before the numbers they weigh on."""
from __future__ import annotations

from retriever.corpus import Query
from retriever.texts import is_blank
from retriever.wording import agree, counted


def blank_queries_warning(queries: list[Query], mode: str, run_format: str | None = None) -> str | None:
    """A warning for queries with empty text, searched all the same in ``mode``: dense gives them hits that match
    nothing in particular, BM25 none, and hybrid none either, as it drops the dense hits of a query holding no word
    (``Searcher.rank``); either would weigh on a mean silently. ``run_format``: the run file written, if any; a TREC
    run has no line for a query without hits, so `evaluate --run` counts them as missing (as ``evaluate_run`` counts
    any query without hits, so a JSONL run and `evaluate --index` print the same)."""
    blank = [q.id for q in queries if is_blank(q.text)]
    if not blank:
        return None
    fate = {"dense": "their hits match nothing in particular",
            "bm25": "they get no hits: BM25 finds no term in them"}.get(
        mode, "they get no hits: BM25 finds no term in them, and hybrid drops their dense hits as arbitrary")
    if mode != "dense" and run_format is not None:
        fate += ("; the run holds no line for them, so `evaluate --run` counts them as missing from it (scored 0)"
                 if run_format == "trec" else
                 "; `evaluate --run` counts them as missing from the run (scored 0), as any query without hits")
    return (f"warning: {len(blank)} of {counted(len(queries), 'query')} {agree(len(blank), 'has', 'have')} empty "
            "text (e.g. "
            f"{', '.join(map(repr, blank[:3]))}); {fate}")
