"""Hard-negative mining: documents an existing index ranks high for a query but that are not judged relevant.

For each judged query of the split, the index's top ``depth`` documents are taken in rank order,
the first ``skip_top`` ranks are dropped (the very top of a strong retriever is rich in unjudged
positives), judged positives are dropped (those of another query of the same text too, as training counts them), and
so are passages whose title and text are a judged positive's (a copy ranks as high as the positive, and training
would push one text both up and down), and the first ``per_query`` that remain are written as
``{"query_id", "negatives": [doc ids]}`` lines, which `retriever train --negatives` reads.
"""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from retriever.corpus import BeirDataset, Query, check_output_outside_qrels
from retriever.errors import RetrieverError, check_kind, given_path
from retriever.evaluation import (check_collection, dataset_name, judged_split, search_batches, warn_of_left_out,
                                  warn_of_other_corpus)
from retriever.runs import Run, ranked_hits
from retriever.searching import Searcher
from retriever.training.copies import shared_judgments
from retriever.files import atomic_write_lines
from retriever.output_paths import check_output_apart
from retriever.texts import is_blank, whole_number
from retriever.wording import agree, counted


DEFAULT_PER_QUERY = 30  # negatives a query gets unless --per-query says; fewer if --depth leaves fewer


@dataclass
class MiningResult:
    output: Path
    queries: int
    negatives: int
    queries_without_negatives: int
    seconds: float
    queries_left_out: int = 0  # judged in the split but not in queries.jsonl, so not mined
    queries_without_positives: int = 0  # judged only non-relevant: no positive to train on, so not mined
    copies_of_positives: int = 0  # passages left out as negatives for holding a judged positive's title and text
    blank_queries: int = 0  # of empty text, so not mined: a search for nothing gives arbitrary passages or none
    queries_without_hits: int = 0  # searched, no hit at all (BM25: no term in the corpus; hybrid: no dense hit either)
    mode: str = "dense"

    def summary(self) -> str:
        """The CLI's closing line: what was written, and why a query got no negative or was not mined."""
        none = counted(self.queries_without_negatives, "query") + " got none" + self._why_none()
        left_out = [f"{counted(self.blank_queries, 'query')} of empty text skipped"] if self.blank_queries else []
        if self.queries_left_out:
            left_out.append(f"{counted(self.queries_left_out, 'judged query', 'judged queries')} left out, not in "
                            "queries.jsonl")
        if self.queries_without_positives:
            left_out.append(f"{counted(self.queries_without_positives, 'query')} judged only non-relevant left out, "
                            "with no positive to train on")
        return (f"wrote {counted(self.negatives, 'negative')} for {counted(self.queries, 'query')} to {self.output} "
                f"({'; '.join([none, *left_out])}), {self.seconds:.1f}s")

    def _why_none(self) -> str:
        """': REASON' of the queries that got no negative, each reason counted when there are two."""
        no_hit = {"bm25": "no term in the corpus", "hybrid": "no term in the corpus and no dense hit"}.get(self.mode,
                                                                                                    "no hit")
        reasons = [(self.queries_without_hits, no_hit),
                   (self.queries_without_negatives - self.queries_without_hits,
                    "every hit judged relevant, a copy of one, or within --skip-top")]
        reasons = [(count, why) for count, why in reasons if count]
        if len(reasons) == 1:
            return f": {reasons[0][1]}"
        return ": " + ", ".join(f"{count} with {why}" for count, why in reasons) if reasons else ""


def select_negatives(ranked_ids: list[str], positives: set[str], skip_top: int, per_query: int,
                     is_copy: Callable[[str], bool] | None = None) -> list[str]:
    """Drop the first skip_top ranks, then judged positives and the ids ``is_copy`` says hold a positive's text; keep
    the next per_query ids (``is_copy`` is asked only until they are found)."""
    kept: list[str] = []
    for doc_id in ranked_ids[skip_top:]:
        if len(kept) == per_query:
            break
        if doc_id not in positives and not (is_copy and is_copy(doc_id)):
            kept.append(doc_id)
    return kept


def _copy_finder(searcher: Searcher, positives: set[str]) -> tuple[Callable[[str], bool], list[str]]:
    """A test of whether a document's title and text are one of ``positives``', and the list of ids it found so."""
    def passage(doc_id: str) -> tuple[str, str] | None:
        record = searcher.documents.document(doc_id)
        return None if record is None else (record["title"] or "", record["text"] or "")

    texts, found = {passage(doc_id) for doc_id in positives} - {None}, []

    def is_copy(doc_id: str) -> bool:
        if texts and passage(doc_id) in texts:
            found.append(doc_id)
            return True
        return False
    return is_copy, found


def _check_fusion_mode(fusion_overrides: object, mode: str) -> None:
    """Refuse a fusion setting when the mode fuses nothing, as the CLI refuses --alpha with --mode dense: the library
    mined without it, silently. Unset settings (None, as the CLI passes them) stand."""
    settings = fusion_overrides if isinstance(fusion_overrides, Mapping) else {}  # Searcher names another kind
    given = [name for name, value in settings.items() if value is not None]
    if given and mode != "hybrid":
        raise RetrieverError(f"fusion setting {given[0]!r} applies only to mode 'hybrid', not {mode!r}: drop it or "
                             "mine with mode='hybrid'")


def _output_path(output: object) -> Path:
    """The negatives file's path, checked before the search: an int failed in pathlib naming no argument, and an
    empty path (the current folder) or a folder only once every query had been searched."""
    output = given_path(output, "output", "the path of the negatives file to write (str or Path)")
    if output.is_dir():
        raise RetrieverError(f"cannot write {output}: it is a folder; give the path of the negatives file to write")
    return output


def _negative_lines(searcher: Searcher, batches: Iterator[Run], judged: Mapping[str, set[str]], skip_top: int,
                    per_query: int, tally: MiningResult, refuse: Callable[[int], None]) -> Iterator[str]:
    """Each searched query's negatives line, one batch of hits at a time, none of them ``judged`` relevant to it (query
    id -> ids), counted in ``tally``; ``refuse`` is called once every query is done if none got a negative, so the
    file being written is dropped, with the most hits a query got (what the search reached, for its advice)."""
    most_hits = 0
    for part in batches:
        for query_id, hits in part.items():
            positives = judged[query_id]
            is_copy, copies = _copy_finder(searcher, positives)
            ranked = [doc_id for doc_id, _ in ranked_hits(hits)]
            most_hits = max(most_hits, len(ranked))
            negatives = select_negatives(ranked, positives, skip_top, per_query, is_copy)
            tally.copies_of_positives += len(copies)
            tally.negatives += len(negatives)
            tally.queries_without_negatives += not negatives
            tally.queries_without_hits += not ranked
            yield json.dumps({"query_id": query_id, "negatives": negatives}, ensure_ascii=False) + "\n"
    if not tally.negatives:
        refuse(most_hits)


def _without_blank(queries: list[Query], split: str) -> tuple[list[Query], int]:
    """The split's queries less those of empty text (``is_blank``), and how many those were, said on stderr: dense
    search gave them negatives that match nothing in particular (BM25 and hybrid none), which `train` then left out
    with the query; a split of nothing else is refused."""
    blank = [query.id for query in queries if is_blank(query.text)]
    if not blank:
        return queries, 0
    if len(blank) == len(queries):
        raise RetrieverError(f"every query split {split!r} judges has empty text ({counted(len(blank), 'query')}, e.g. "
                             f"{', '.join(map(repr, blank[:3]))}), so there is nothing to mine negatives for; check "
                             "the queries file's text field")
    print(f"warning: {len(blank)} of the {counted(len(queries), 'query')} split {split!r} judges "
          f"{agree(len(blank), 'has', 'have')} empty text (e.g. {', '.join(map(repr, blank[:3]))}); "
          f"{agree(len(blank), 'it is', 'they are')} skipped: with nothing to search for, no passage is a hard "
          f"negative of {agree(len(blank), 'it', 'them')}", file=sys.stderr)
    return [query for query in queries if not is_blank(query.text)], len(blank)


def _refuse_no_negative(queries: int, beir: BeirDataset, split: str, depth: int, skip_top: int, mode: str,
                        documents: int, most_hits: int) -> None:
    """Refuse to write a file of empty lists: `train --negatives` read it and trained on in-batch negatives alone.
    The advice fits what the search returned (``most_hits``, the most any query got), not what --depth asked: when
    it returned every passage none is left to mine; when no query got --depth hits, BM25 (passages sharing a word)
    or an approximate index (IVF, HNSW) stopped short, and a deeper --depth cannot help."""
    why = " (BM25 returns only passages sharing a word with the query)" if mode == "bm25" else ""
    whole, short = most_hits >= documents, most_hits < depth
    wider = ("mine with --mode dense or hybrid" if mode == "bm25" else
             f"the index's approximate search returned at most {most_hits} of its {documents} passages: mine from a "
             "flat index, or one whose search defaults (nprobe, ef_search) reach further")
    remedies = ([] if whole or short else ["raise --depth"]) + (["lower --skip-top"] if skip_top else []) + (
        [wider] if short and not whole else [])
    advice = (" or ".join(remedies) if remedies else
              f"--depth {depth} reached all {documents} passages of the index, so none is left to mine: mine a split "
              "whose queries leave passages unjudged")
    raise RetrieverError(f"no negative for any of the {counted(queries, 'query')} of {dataset_name(beir)} split {split}: "
                         f"every hit within --depth {depth}{why}, after --skip-top {skip_top}, is judged relevant or "
                         f"a copy of a passage judged so; {advice}; nothing written")


def check_counts(depth: object, skip_top: object, per_query: object) -> tuple[int, int, int]:
    """--depth, --skip-top and --per-query as whole numbers that fit together (the CLI's usage check too): a
    ``per_query`` above what ``depth`` leaves after ``skip_top`` quietly gave fewer negatives than asked. None is the
    default, ``DEFAULT_PER_QUERY`` or all that is left if fewer."""
    depth, skip_top = whole_number(depth, "--depth", 1), whole_number(skip_top, "--skip-top", 0)
    if skip_top >= depth:
        raise RetrieverError(f"--skip-top {skip_top} drops all {depth} retrieved documents; raise --depth")
    left = depth - skip_top
    if per_query is None:
        return depth, skip_top, min(DEFAULT_PER_QUERY, left)
    per_query = whole_number(per_query, "--per-query", 1)
    if per_query > left:
        raise RetrieverError(f"--per-query {per_query} is more than the {left} ranks --depth {depth} leaves after "
                             f"--skip-top {skip_top}, so no query could get {per_query} negatives; lower --per-query "
                             f"to {left} or raise --depth")
    return depth, skip_top, per_query


def mine_negatives(index: str | Path, dataset: str | Path, output: str | Path, split: str = "train",
                   depth: int = 100, skip_top: int = 0, per_query: int | None = None, device: str = "auto",
                   dtype: str = "auto", batch_size: int | None = None, progress: bool = True, mode: str = "dense",
                   fusion_overrides: dict | None = None, model: str | None = None) -> MiningResult:
    """Search every judged query of a BEIR split in INDEX (in ``mode``, see ``Searcher``) and write its hard
    negatives as JSONL, atomically (``per_query`` None: ``DEFAULT_PER_QUERY``, or all ``depth`` leaves if fewer)."""
    depth, skip_top, per_query = check_counts(depth, skip_top, per_query)
    check_kind(progress, bool, "progress", "True or False")  # "no" was true: bars drawn
    output = _output_path(output)
    _check_fusion_mode(fusion_overrides, mode)
    index, dataset = (given_path(folder, name, "a folder's path (str or Path)")  # "" is the working folder
                      for name, folder in (("index", index), ("dataset", dataset)))
    check_output_outside_qrels(output, "the negatives file")
    check_output_apart(output, "the negatives file", {"index": index, "dataset": dataset})  # the CLI's check
    started = time.time()
    beir = BeirDataset.open(dataset)
    found, judged = judged_split(beir, split)  # refused before the index and its model are loaded
    left_out = warn_of_left_out(beir, split, found, judged, "they get no negatives")
    found, blank = _without_blank(found, split)
    searcher = Searcher(index, device=device, dtype=dtype, batch_size=batch_size, mode=mode,
                        fusion_overrides=fusion_overrides, model=model)
    warn_of_other_corpus(searcher, beir, progress, "negatives are mined with")
    # another collection's index: every hit would be written as a negative that is no passage of the dataset (found
    # only when `train` dropped them all); a positive the index lacks costs mining nothing, so it goes unsaid
    check_collection(searcher, beir, split, judged, "its hits are another collection's passages", None,
                     "; mine from an index built from the dataset's corpus", index)
    if skip_top >= searcher.index.ntotal:  # under --depth, yet every hit is dropped: an empty file, exit 0
        raise RetrieverError(f"--skip-top {skip_top} drops all {searcher.index.ntotal} documents of the index; "
                             "lower --skip-top")
    no_positive = sum(not any(grade > 0 for grade in grades.values()) for grades in judged.values())
    tally = MiningResult(output, len(found), 0, 0, 0.0, len(left_out), no_positive, blank_queries=blank, mode=mode)
    batches = search_batches(searcher, found, split, k=depth, progress=progress, desc="mine")
    refuse = lambda most_hits: _refuse_no_negative(len(found), beir, split, depth, skip_top, mode,  # noqa: E731
                                                   searcher.index.ntotal, most_hits)
    relevant = shared_judgments({query.id: query.text for query in found}, {  # a twin's positive is no negative
        query.id: [doc_id for doc_id, grade in judged[query.id].items() if grade > 0] for query in found},
        str(beir.queries_path))
    atomic_write_lines(output, _negative_lines(searcher, batches, relevant, skip_top, per_query, tally, refuse))
    tally.seconds = time.time() - started
    if tally.copies_of_positives:
        print(f"note: {counted(tally.copies_of_positives, 'passage')} left out of the negatives: a copy of a passage "
              "judged relevant to the query (the same title and text)", file=sys.stderr)
    return tally
