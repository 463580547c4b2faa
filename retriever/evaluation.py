"""Evaluate an index on a BEIR split, or a run file against qrels."""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from retriever.blank_queries import blank_queries_warning
from retriever.corpus import BeirDataset, Query, read_queries
from retriever.corpus_records import beir_keys
from retriever.errors import RetrieverError, check_kind, given_path
from retriever.fusion import FusionParams, recorded_fusion
from retriever.integrity import remembered_sha256
from retriever.evaluation_report import EvaluationReport
from retriever.metric_names import DEFAULT_METRICS, checked_metric_names
from retriever.metrics import check_level_reached, check_relevance_level, evaluate_run, judged_query_ids
from retriever.qrels import relevant_documents
from retriever.runs import Qrels, Run, read_qrels, read_run
from retriever.split_scoring import SplitScoring, score_batches
from retriever.texts import is_blank
from retriever.wording import agree, counted, none_of

if TYPE_CHECKING:  # imported where an index is searched: scoring a run file needs no model, nor torch
    from retriever.searching import Searcher

def dataset_name(dataset: BeirDataset) -> str:
    """The name a fusion tuning records its dataset by, and evaluation compares: the folder's real name, since
    ``.`` (tuning from inside the dataset) has none and was recorded as ""."""
    return dataset.root.resolve().name


def judged_queries(queries: list[Query], qrels: Qrels) -> list[Query]:
    """Queries with at least one relevant judgment: the only ones worth searching."""
    judged = set(judged_query_ids(qrels))
    return [q for q in queries if q.id in judged]


def evaluate_run_file(run_path: str | Path, qrels_path: str | Path, metrics: tuple[str, ...] = DEFAULT_METRICS,
                      relevance_level: int = 1) -> EvaluationReport:
    """Score a run file against a qrels file (``relevance_level``: trec_eval's -l, as ``evaluate_run`` takes it),
    the settings checked before the files are read."""
    metrics = checked_metric_names(metrics)
    check_relevance_level(relevance_level)
    run = read_run(run_path)
    return EvaluationReport(evaluate_run(run, read_qrels(qrels_path), metrics, relevance_level),
                            run_depth=max((len(hits) for hits in run.values()), default=0),
                            deeper="a deeper run gives exact values, unless this one holds the whole collection")


def opened_dataset(dataset: BeirDataset | str | Path) -> BeirDataset:
    """A BEIR folder given by its path or as a BeirDataset, as the library's evaluation and split readers take it
    ("" is refused: it read the working folder)."""
    if isinstance(dataset, BeirDataset):
        return dataset
    return BeirDataset.open(given_path(dataset, "dataset", "a BEIR folder's path or a BeirDataset"))


def judged_split(dataset: BeirDataset | str | Path, split: str) -> tuple[list[Query], Qrels]:
    """A split's judged queries and its qrels; a split without one judged query is refused."""
    check_kind(split, str, "split", "a split's name such as 'test' (qrels/NAME.tsv)")
    dataset = opened_dataset(dataset)  # a path raised AttributeError ('str' object has no attribute 'qrels_path')
    qrels = read_qrels(dataset.qrels_path(split))
    with beir_keys():
        all_queries = read_queries(dataset.queries_path)
    queries = judged_queries(all_queries, qrels)
    if not queries:
        judged = judged_query_ids(qrels)
        if not judged:
            raise RetrieverError(f"{dataset.root}: no query of split {split!r} has a relevant judgment (a grade of 1 "
                                 "or more); check the qrels' grade column")
        shown = ", ".join(repr(q.id) for q in all_queries[:3]) or "none"
        raise RetrieverError(f"{dataset.root}: {none_of(len(judged), 'query')} split {split!r} judges (e.g. "
                             f"{', '.join(map(repr, judged[:3]))}) {agree(len(judged), 'is not', 'is')} in "
                             f"{dataset.queries_path.name} (ids e.g. "
                             f"{shown}); check that the queries and qrels use the same query ids")
    return queries, qrels


def left_out_queries(queries: list[Query], qrels: Qrels) -> list[str]:
    """Ids of the queries the qrels judge relevant that ``queries`` (a split's queries found in queries.jsonl)
    lack: they are never searched."""
    found = {q.id for q in queries}
    return [qid for qid in judged_query_ids(qrels) if qid not in found]


def warn_of_left_out(dataset: BeirDataset, split: str, queries: list[Query], qrels: Qrels,
                     consequence: str) -> list[str]:
    """``left_out_queries``, named on stderr with what becomes of them, so mining, tuning or a dev set never leaves
    them out without a word (evaluate counts them as missing from the run, which names no cause)."""
    left_out = left_out_queries(queries, qrels)
    if left_out:
        print(f"warning: {dataset.queries_path.name} lacks {len(left_out)} of the {len(left_out) + len(queries)} "
              f"queries split {split!r} judges (e.g. {', '.join(map(repr, left_out[:3]))}); {consequence}",
              file=sys.stderr)
    return left_out


def judged_not_in_index(searcher: Searcher, qrels: Qrels) -> tuple[list[str], int]:
    """(ids, judged): the documents the qrels judge relevant that the index lacks, in qrels order, and how many are
    judged. Only the index's ids are looked up: no text, and not the corpus."""
    judged = relevant_documents(qrels)
    return searcher.documents.lacking(judged), len(judged)


def corpus_difference(recorded: object, corpus: Path, progress: bool = False) -> str | None:
    """How ``corpus`` differs from the file an index manifest's corpus record names (``"N bytes, the index's M"``
    or ``"the same size, other content"``), or None: the same file, or nothing to compare (no record or SHA-256 in
    it, an unreadable corpus). Sizes are compared first, so a corpus of another size is told without hashing; a
    record without ``bytes`` (manifests from before it was recorded) is compared by its SHA-256 alone."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), str):
        return None  # an older or damaged record: nothing to compare with
    size = recorded.get("bytes") if isinstance(recorded.get("bytes"), int) else None
    try:
        if size is not None and corpus.stat().st_size != size:
            return f"{corpus.stat().st_size} bytes, the index's {size}"
        if remembered_sha256(corpus, "hash corpus" if progress else None) != recorded["sha256"]:
            return "the same size, other content" if size is not None else "other content"
    except OSError:
        return None  # evaluation and tuning read only its queries and qrels
    return None


def warn_of_other_corpus(searcher: Searcher, dataset: BeirDataset, progress: bool = True,
                         use: str = "the metrics compare the index against") -> None:
    """Warn when the dataset's corpus.jsonl is not the file the index was built from (``corpus_difference``):
    judged ids the index happens to hold (numeric ones, say) were scored against another collection without a word,
    only wholly disjoint ids being refused. A warning, not a refusal: a converted copy of the index's corpus differs
    in bytes. Evaluation, fusion tuning and mining call it (``use``: what then meets the other collection's
    judgments)."""
    recorded = searcher.manifest.get("corpus")
    differs = corpus_difference(recorded, dataset.corpus_path, progress)
    if differs is not None:
        warn(f"warning: the index was built from {recorded.get('name', 'another corpus')}, not from "
             f"{dataset.corpus_path} ({differs}): {use} another collection's judgments, unless it is a converted or "
             "edited copy of the index's corpus")


def unknown_words_warning(queries: list[Query], unknown: Sequence[bool], mode: str) -> str | None:
    """A batch run's note on the queries a dense search refuses as holding no word the model knows
    (``Searcher.rank``; blank ones have ``blank_queries_warning``): searched all the same, so a run keeps every
    query id, as blank ones are, with hits that match nothing in particular; hybrid ranks them by BM25 alone.
    ``unknown``: a flag per query, from the tokenization that made its vector (``Searcher.run(unknown_found=)``), so
    no query is tokenized twice; hence the note comes after the run. ``mode``: the run's."""
    if mode == "bm25":
        return None
    named = [q.id for q, flag in zip(queries, unknown) if flag and not is_blank(q.text)]
    if not named:
        return None
    fate = "hybrid ranks them by BM25 alone" if mode == "hybrid" else "their hits match nothing in particular"
    return (f"warning: {len(named)} of {counted(len(queries), 'query')} {agree(len(named), 'holds', 'hold')} no "
            "word the model knows (e.g. "
            f"{', '.join(map(repr, named[:3]))}: it reads them as unknown tokens or punctuation only); {fate}")


def search_batches(searcher: Searcher, queries: list[Query], split: str, k: int = 1000, nprobe: int | None = None,
                   ef_search: int | None = None, progress: bool = True, desc: str = "search") -> Iterator[Run]:
    """The run of a split's judged ``queries``, one batch at a time (``Searcher.run_batches``), its blank and
    unknown-word queries warned of: evaluation scores, and mining writes, each batch as it comes, holding one batch's
    hits rather than queries x depth."""
    warn(blank_queries_warning(queries, searcher.mode))
    unknown: list = []
    with tqdm(total=len(queries), desc=f"{desc} {split}", unit="q", file=sys.stderr, disable=not progress) as bar:
        yield from searcher.run_batches([q.id for q in queries], [q.text for q in queries], k=k, nprobe=nprobe,
                                        ef_search=ef_search, progress=bar.update, unknown_found=unknown)
    warn(unknown_words_warning(queries, unknown, searcher.mode))


def warn(warning: str | None) -> None:
    """A batch run's warning (if any) on stderr."""
    if warning:
        print(warning, file=sys.stderr)


def check_collection(searcher: Searcher, dataset: BeirDataset, split: str, qrels: Qrels,
                     all_missed: str = "every metric is 0", one_missed: str | None = "not retrieved, so the metrics "
                     "are lower than on an index of the whole corpus", then: str = ": is this the index's collection?",
                     index: str | Path | None = None) -> None:
    """Refuse a split none of whose relevant documents the index holds: it indexes another collection, and every
    metric was printed as 0 with exit 0 (and a fusion 'tuned' on it was noise, negatives mined from it another
    collection's passages). When only some are missing (an index of part of the corpus), say so on stderr: they count
    as not retrieved, and recall fell without a word. Evaluation, fusion tuning and mining ask it alike;
    ``all_missed`` says what the results would be and ``then`` what to do, ``one_missed`` what a missing document
    counts as (None: nothing to say), ``index`` names the index folder in the refusal."""
    missing, judged = judged_not_in_index(searcher, qrels)
    if judged and len(missing) == judged:
        raise RetrieverError(f"{'' if index is None else f'{index}: '}{none_of(judged, 'document')} "
                             f"{dataset_name(dataset)} split {split} judges relevant {agree(judged, 'is not', 'is')} "
                             f"in the index, so {all_missed}{then}")
    if missing and one_missed is not None:
        print(f"warning: {len(missing)} of the {counted(judged, 'document')} {dataset_name(dataset)} split {split} "
              f"judges relevant {agree(len(missing), 'is', 'are')} not in the index (e.g. "
              f"{', '.join(map(repr, missing[:3]))}): {agree(len(missing), 'it counts', 'they count')} as "
              f"{one_missed}", file=sys.stderr)


def evaluate_index(searcher: Searcher, dataset: BeirDataset | str | Path, split: str, k: int = 1000,
                   nprobe: int | None = None, ef_search: int | None = None,
                   metrics: Iterable[str] = DEFAULT_METRICS, progress: bool = True,
                   built_from_corpus: bool = False, relevance_level: int = 1, save_run: str | Path | None = None,
                   keep_run: bool = False,
                   on_report: Callable[[EvaluationReport], None] | None = None) -> tuple[EvaluationReport, Run | None]:
    """Search every judged query of a split and score the run; add answer recall when queries carry answers.
    Each batch of queries is scored as it is searched (``split_scoring``), and written to the TREC run file
    ``save_run`` when given (in place once complete); the run is held whole and returned only with ``keep_run``
    (else None), as it takes queries x ``k`` hits. ``on_report`` gets the report before ``save_run`` is put in place
    (the CLI prints its table there, so the run never lands without it).
    ``relevance_level``: trec_eval's -l, as ``evaluate_run`` takes it (checked before the search).
    ``built_from_corpus``: the caller has just built the index from this dataset's corpus (the demo), so it is not
    hashed again to compare it with the manifest's record."""
    from retriever.searching import Searcher

    check_kind(searcher, Searcher, "searcher", "a Searcher, e.g. Searcher('indexes/NAME')")
    check_relevance_level(relevance_level)
    metrics = checked_metric_names(metrics)
    dataset = opened_dataset(dataset)
    warn_of_tuned_split(searcher, dataset, split)
    if not built_from_corpus:
        warn_of_other_corpus(searcher, dataset, progress)
    queries, qrels = judged_split(dataset, split)
    check_level_reached(qrels, metrics, relevance_level)  # before the search, as the refusals below
    check_collection(searcher, dataset, split, qrels)  # before the search: another collection's split is refused
    scoring = SplitScoring(qrels, metrics, relevance_level, queries, searcher.document_text, k)
    reports: list[EvaluationReport] = []

    def report() -> None:
        warn_of_left_out(dataset, split, queries, qrels, "they are counted as missing from the run and score 0, as "
                         "trec_eval -c scores them")
        reports.append(scoring.report(run_depth=k if k < searcher.index.ntotal else None))
        if on_report is not None:
            on_report(reports[0])

    run = score_batches(scoring, search_batches(searcher, queries, split, k, nprobe, ef_search, progress), save_run,
                        keep_run, report)
    return reports[0], run


def warn_of_tuned_split(searcher: Searcher, dataset: BeirDataset, split: str) -> None:
    """Warn when a hybrid index's fusion, as it ranks here, was tuned on the split evaluated: the results overstate
    it. A damaged fusion record (flags standing in for it: ``recorded_fusion``) says nothing of where it was tuned;
    a --fusion-depth of its own still ranks by the tuned method and weight, so only the setting is compared."""
    fusion = searcher.manifest.get("fusion") or {}
    sound = searcher.mode == "hybrid" and recorded_fusion(searcher.index_dir, searcher.manifest, None)[1] is None
    tuned = (fusion.get("tuned") or {}) if sound else {}
    if (sound and searcher.fusion.setting() == FusionParams.from_record(fusion).setting()
            and (tuned.get("dataset"), tuned.get("split")) == (dataset_name(dataset), split)):
        print(f"warning: the index's fusion was tuned on {dataset_name(dataset)} split {split}, the split evaluated "
              "here; these hybrid results overstate it (evaluate another split)", file=sys.stderr)
