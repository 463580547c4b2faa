"""Pick the fusion (RRF k, or convex weight alpha) that ranks best on judged queries, and record it.

Dense and BM25 lists are retrieved once at the fusion depth; every setting of the grid only re-fuses
them. Tuning on the split you report would overstate the result, so the ``test`` split, or one judging any of
its queries, is refused.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from retriever.blank_queries import blank_queries_warning
from retriever.corpus import BeirDataset, Query
from retriever.errors import RetrieverError, check_kind
from retriever.evaluation import (check_collection, dataset_name, judged_split, unknown_words_warning, warn,
                                  warn_of_left_out, warn_of_other_corpus)
from retriever.fusion import FusionParams, fuse
from retriever.index_folder import read_manifest, replace_manifest
from retriever.lexical_part import check_writable, index_lock
from retriever.metrics import evaluate_run, judged_query_ids
from retriever.qrels import REPORTED_SPLIT, is_reported_split
from retriever.runs import Qrels, Run, read_qrels
from retriever.searching import Searcher
from retriever.texts import is_blank
from retriever.unknown_words import without_unknown
from retriever.wording import agree, counted

RRF_KS = (60.0, 10.0, 20.0, 40.0, 100.0)
ALPHAS = tuple(round(a, 2) for a in np.arange(0.0, 1.0001, 0.05))
METRIC = "ndcg@10"
# How deep each fused list is: nDCG@10 reads its top 10, and a block of passages tied at the 10th place is kept whole
# (cut at 10, the block's rows would be chosen by their row order, not by doc id as evaluation orders ties)
FUSED_DEPTH = 100


def fusion_grid(depth: int) -> list[FusionParams]:
    """Untuned RRF first, so a tie keeps the default."""
    return ([FusionParams("rrf", rrf_k=k, depth=depth) for k in RRF_KS]
            + [FusionParams("convex", alpha=a, depth=depth) for a in ALPHAS])


class TuningOnReportedSplit(RetrieverError):
    """--split names the split you report: a bad flag alone, which the command line reports as a usage error (a split
    missing from the folder, or sharing test's queries, is the folder's)."""


def refuse_reported_split(qrels: Path, split: str) -> None:
    """Refuse ``test``, or another name of its qrels file (``qrels`` is the split's, as ``qrels_path`` found it)."""
    if is_reported_split(qrels, split):
        raise TuningOnReportedSplit(f"--split {split}: tuning the fusion on the split you report overstates its quality; "
                             "tune on train or a dev split (split one off train if the collection has none)")


def check_tuning_split(dataset: str | Path, split: str) -> tuple[BeirDataset, list[Query], Qrels]:
    """The split's judged queries and qrels, refused (before any encoding) when they are, or include, the
    test split's: tuning on the queries you report overstates the fusion's quality."""
    beir = BeirDataset.open(dataset)
    refuse_reported_split(beir.qrels_path(split), split)
    test = beir.root / "qrels" / f"{REPORTED_SPLIT}.tsv"
    queries, qrels = judged_split(beir, split)
    if all(is_blank(q.text) for q in queries):  # every setting would score their arbitrary hits alike
        raise RetrieverError(f"{dataset_name(beir)}: {agree(len(queries), 'the', 'all')} "
                             f"{counted(len(queries), 'query')} split {split!r} judges "
                             f"{agree(len(queries), 'has', 'have')} empty text in queries.jsonl, so there is nothing "
                             "to tune the fusion on; give them their text or tune on another split")
    if test.is_file():
        reported = set(judged_query_ids(read_qrels(test)))
        overlap = len(reported.intersection(q.id for q in queries))
        if overlap:
            raise RetrieverError(f"--split {split}: {overlap} of the tuning split's queries "
                                 f"{agree(overlap, 'is', 'are')} judged in qrels/{REPORTED_SPLIT}.tsv: tuning on them "
                                 "would overstate test results; use a split without them")
    return beir, queries, qrels


def check_tunable(index_dir: str | Path, dataset: str | Path, split: str,
                  checked: tuple[BeirDataset, list[Query], Qrels] | None = None) -> None:
    """Refuse, before `bm25 --tune-fusion-on` builds the BM25 part, what the tuning would refuse once it was built:
    an index whose model is gone from where it was recorded, or a split none of whose judged documents the index
    holds (``evaluation.check_collection``). A rebuild dropped a tuned fusion, saying it was tuned anew, and then
    the tuning refused. Only the manifest and the doc store's ids are read, no model or FAISS index (``checked``:
    what ``check_tuning_split`` returned, so the split is not read again)."""
    from retriever.docstore import open_mapped
    from retriever.index_opening import docstore_file, read_parquet
    from retriever.integrity import reading
    from retriever.recorded_paths import recorded_model

    beir, _, qrels = checked or check_tuning_split(dataset, split)
    manifest = read_manifest(index_dir)
    if isinstance(manifest["encoder"].get("model"), str):  # a record without it is the Searcher's to name
        recorded_model(manifest["encoder"], index_dir, "move the model back to where the index recorded it (bm25 "
                       "takes no --model), or rebuild the index with `retriever build`")
    docstore = docstore_file(Path(index_dir), manifest)
    with reading(docstore):
        ids = (open_mapped(docstore).read_all() if docstore.suffix == ".arrow" else
               read_parquet(docstore, columns=["id"], memory_map=True)).column("id")
    check_collection(_DocstoreIds(ids), beir, split, qrels, "every setting scores 0", "a miss in every setting")


class _DocstoreIds:
    """What ``evaluation.check_collection`` reads of a Searcher (``documents.lacking``), from a doc store's ids. It
    names the judged documents lacking only when it holds none of them: a split missing some is left to the tuning's
    own check, so its warning is said once."""

    def __init__(self, ids) -> None:
        self.documents, self._ids = self, ids

    def lacking(self, doc_ids: list[str]) -> list[str]:
        import pyarrow as pa
        import pyarrow.compute as pc

        held = pc.any(pc.is_in(pa.array(doc_ids, pa.string()), value_set=self._ids)).as_py()
        return [] if held else list(doc_ids)


def warn_of_training_split(searcher: Searcher, beir: BeirDataset, split: str) -> None:
    """A fine-tuned encoder ranks its own training queries better than unseen ones, so a fusion tuned on them leans
    to dense more than held-out queries bear out: said, not refused (there may be no other split). Only a local
    model folder's retriever.json is read, as `retriever train` writes it; its dataset is recorded by folder name."""
    from retriever.model_loading import RETRIEVER_CONFIG, json_value

    folder = Path(searcher.encoder.settings.model)
    training = json_value(folder / RETRIEVER_CONFIG, "training") if folder.is_dir() else None
    if isinstance(training, dict) and (training.get("dataset"), training.get("split", "train")) == (
            dataset_name(beir), split):
        warn(f"warning: the index's encoder was trained on {dataset_name(beir)} split {split}, the split tuned on "
             "here; it ranks its training queries better than unseen ones, so the tuned fusion leans to dense more "
             "than it should: tune on a split held out of its training (e.g. a dev split)")


def _per_query(run: Run, qrels: Qrels) -> dict[str, float]:
    return {qid: values[METRIC] for qid, values in evaluate_run(run, qrels, (METRIC,)).per_query.items()}


def _scores_by_query(searcher: Searcher, queries: list[Query], qrels: Qrels, grid: list[FusionParams], bar: tqdm,
                     unknown_found: list) -> list[dict[str, float]]:
    """Each query's nDCG@10 under every setting of ``grid``, then dense and BM25 alone. Searched a batch of queries at
    a time (``Searcher.queries_per_batch``), as evaluation does: every query's two lists at the fusion depth were held
    at once, and a split of thousands of queries ran for minutes without a word. ``unknown_found`` gets each query's
    no-known-word flag from the tokenization that made its vector (``unknown_words_warning``)."""
    depth, scores = searcher.fusion.depth, [{} for _ in range(len(grid) + 2)]
    step = searcher.queries_per_batch(depth)
    for start in range(0, len(queries), step):
        batch = queries[start:start + step]
        ids, texts = [q.id for q in batch], [q.text for q in batch]
        unknown: list = []  # as hybrid search does (Searcher.rank), a query of no known word is fused from BM25's alone
        dense = searcher.rank(texts, depth, "dense", keep_unknown=True, unknown_found=unknown)
        unknown_found.extend(unknown)
        lexical = searcher.rank(texts, depth, "bm25")
        fusable = without_unknown(dense, unknown)
        judged = {qid: qrels[qid] for qid in ids}
        for into, ranked in zip(scores, [fuse(fusable, lexical, params, FUSED_DEPTH) for params in grid] + [dense, lexical]):
            into.update(_per_query(searcher.as_run(ids, *ranked), judged))
        bar.update(len(batch))
    return scores


def tune_fusion(searcher: Searcher, dataset: str | Path, split: str, progress: bool = True,
                checked: tuple[BeirDataset, list[Query], Qrels] | None = None) -> dict:
    """The best fusion on ``split``'s judged queries by nDCG@10, with every measured setting
    (``checked``: what ``check_tuning_split`` returned, so it is not read twice). Each fused list is cut at
    ``FUSED_DEPTH``: a ``k`` it took could only lower the scores (at 0 it recorded a fusion scored 0.0)."""
    check_kind(searcher, Searcher, "searcher", "a Searcher, e.g. Searcher('indexes/NAME', mode='hybrid') "
               "(tune_and_record takes the index's path and records the fusion in it)")
    beir, queries, qrels = checked or check_tuning_split(dataset, split)
    warn_of_other_corpus(searcher, beir, progress, "the fusion is tuned on")
    check_collection(searcher, beir, split, qrels, "every setting scores 0", "a miss in every setting")
    warn_of_training_split(searcher, beir, split)
    warn_of_left_out(beir, split, queries, qrels, "they are not searched and score 0 in every setting (as evaluate "
                     "scores them)")
    warn(blank_queries_warning(queries, "hybrid"))  # what the fused settings do
    grid, unknown = fusion_grid(searcher.fusion.depth), []
    with tqdm(total=len(queries), desc=f"tune fusion on {split}", unit="q", file=sys.stderr,
              disable=not progress) as bar:
        by_query = _scores_by_query(searcher, queries, qrels, grid, bar, unknown)
    warn(unknown_words_warning(queries, unknown, "hybrid"))
    judged = judged_query_ids(qrels)  # the mean is over all of them, as evaluate_run's: left-out queries score 0
    means = [math.fsum(scores.get(qid, 0.0) for qid in judged) / len(judged) for scores in by_query]
    measured = list(zip(means, grid))
    best_score, best = max(measured, key=lambda item: item[0])
    on = counted(len(queries), f"{split} query", f"{split} queries")
    record = {**best.record(), "tuned": {
        "dataset": dataset_name(beir), "split": split, "queries": len(queries), "metric": METRIC,
        "score": _rounded(best_score), "untuned_rrf": _rounded(measured[0][0]),
        "dense": _rounded(means[-2]), "bm25": _rounded(means[-1]),
        "grid": [{**p.record(), METRIC: _rounded(s)} for s, p in measured]}}
    if measured_nothing(record):
        kept = "the fusion recorded before" if searcher.manifest.get("fusion") is not None else "RRF k=60, untuned"
        warn(f"warning: fusion tuning measured nothing: every setting scored {METRIC} 0.0 on the {on} (no judged "
             f"document reached a top 10), so no tuned fusion is recorded and hybrid keeps {kept}")
    elif progress:
        print(f"fusion tuned on {on}: {best.setting()} {METRIC} {_shown(best_score)} (untuned RRF "
              f"{_shown(measured[0][0])})", file=sys.stderr)
    return record


def measured_nothing(record: dict) -> bool:
    """Every setting at 0.0: the grid's first, RRF k=60, wins the tie, and recording it as tuned would claim a
    measurement that found nothing to tell the settings apart. The record's scores are ``_rounded``, so only a score
    of exactly 0 reads as 0.0 (one of 3e-5, rounded to 4 places, was called nothing and not recorded)."""
    return record["tuned"]["score"] == 0.0


def _shown(score: float) -> str:
    """A score to 4 places, or, below what 4 places show, to 2 significant digits: never 0.0000 for a score above 0."""
    return f"{score:.4f}" if score == 0 or abs(score) >= 5e-5 else f"{score:.2g}"


def _rounded(score: float) -> float:
    """A score as recorded: as ``_shown``."""
    return float(_shown(score))


def check_recordable(index_dir: str | Path) -> None:
    """Refuse a folder the tuned fusion cannot be written into, before any query is searched (and before `bm25`
    says it keeps the folder's BM25 part to tune it)."""
    check_writable(Path(index_dir), "the tuned fusion cannot be recorded in its manifest")


def tune_and_record(index_dir: str | Path, dataset: str | Path, split: str, device: str = "auto",
                    dtype: str = "auto", progress: bool = True,
                    checked: tuple[BeirDataset, list[Query], Qrels] | None = None) -> dict | None:
    """Tune the fusion of a built index (which needs its BM25 part) and store it as the manifest's ``fusion``; None,
    recording nothing, where every setting scored 0.0 (``measured_nothing``). Under
    the folder's build lock throughout, as `bm25` and `--drop-fusion` rewrite the manifest too: a rebuild of the BM25
    part mid-tuning would leave a record tuned on the old part, and overlapping manifest writes would lose one.
    ``checked``: what ``check_tuning_split`` returned, so the split is not read again."""
    checked = checked or check_tuning_split(dataset, split)
    with index_lock(Path(index_dir), "build or tuning"):
        check_recordable(index_dir)
        # bm25, not hybrid: the two lists are ranked apart, and a damaged record (which refuses hybrid) is retuned
        searcher = Searcher(index_dir, device=device, dtype=dtype, mode="bm25")
        record = tune_fusion(searcher, dataset, split, progress=progress, checked=checked)
        if measured_nothing(record):  # said by tune_fusion; the manifest stays as it was
            return None
        replace_manifest(index_dir, {**read_manifest(index_dir), "fusion": record})
    return record


def drop_fusion(index_dir: str | Path) -> bool:
    """Remove the manifest's ``fusion`` record, a damaged one too (hybrid then uses RRF k=60), leaving the BM25 part
    and every other entry as they are; False when there was none. The repair a damaged record names, without the
    BM25 rebuild of `bm25 --overwrite`. Under the folder's build lock, as `bm25` rewrites the manifest too."""
    index_dir = Path(index_dir)
    with index_lock(index_dir):
        manifest = read_manifest(index_dir)
        if "fusion" in manifest:  # the record's integrity entries are the files', which stay as they are
            check_writable(index_dir, "its fusion record cannot be dropped from its manifest")
            replace_manifest(index_dir, {key: value for key, value in manifest.items() if key != "fusion"})
        return manifest.get("fusion") is not None
