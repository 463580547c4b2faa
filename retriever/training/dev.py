"""Dev-split evaluation during training: exact search with the live weights, trec_eval-exact metrics.

Vectors come from the Encoder code of ``retriever encode`` (in-memory weights) and the search is
a flat index's, so a dev score equals what a flat index of the saved model gives on these documents.
"""
from __future__ import annotations

import heapq
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from retriever.corpus import BeirDataset, Document, iter_documents
from retriever.corpus_records import beir_keys
from retriever.errors import RetrieverError
from retriever.evaluation import dataset_name, judged_split, warn_of_left_out
from retriever.exact import exact_top_k
from retriever.metrics import evaluate_run
from retriever.qrels import relevant_documents
from retriever.runs import Qrels, Run
from retriever.training.processes import is_main_process
from retriever.wording import agree, counted, none_of

DEV_METRICS = ("ndcg@10", "recall@100")
SELECTION_METRIC = "ndcg@10"  # the dev metric that picks the weights kept
SEARCH_DEPTH = 100


@dataclass
class DevSet:
    name: str
    query_ids: list[str]
    query_texts: list[str]
    documents: list[Document]
    qrels: Qrels


def load_dev_set(dataset: str | Path, split: str, max_docs: int | None = None, seed: int = 0) -> DevSet:
    """Judged queries of a split and its corpus; with max_docs, every judged document plus a seeded sample of others.

    Subsampling makes each evaluation cheap; scores on a subsample are higher than on the full
    corpus but rank checkpoints the same way, which is all model selection needs.
    """
    beir = BeirDataset.open(dataset)
    queries, qrels = judged_split(beir, split)
    if is_main_process():  # every process of a launch reads the dev set: one warning, not one per process
        warn_of_left_out(beir, split, queries, qrels, "they are not searched, and score 0 in every dev evaluation")
    judged_docs = {doc_id for docs in qrels.values() for doc_id in docs}
    kept: list[Document] = []
    rng, drawn = random.Random(seed), []  # a heap of (-key, row, document): the max_docs lowest keys drawn so far
    with beir_keys():
        for row, document in enumerate(iter_documents(beir.corpus_path)):
            if max_docs is None or document.id in judged_docs:
                kept.append(document)
            elif len(drawn) < max_docs:
                heapq.heappush(drawn, (-rng.random(), row, document))
            else:
                heapq.heappushpop(drawn, (-rng.random(), row, document))
    documents = kept + _lowest_keys(drawn, 0 if max_docs is None else max_docs - len(kept))
    name = f"{dataset_name(beir)}/{split}"
    _say_judged_documents_missing(name, beir.corpus_path.name, qrels, {document.id for document in kept})
    return DevSet(name, [q.id for q in queries], [q.text for q in queries], documents, qrels)


def _lowest_keys(drawn: list[tuple[float, int, Document]], room: int) -> list[Document]:
    """The ``room`` documents of lowest key, in corpus order: a uniform sample of the others, its size known only once
    the corpus is read, so a judged document the corpus lacks takes no slot (the room was set from the judged ids
    before: --dev-max-docs 5 with 2 of 4 judged documents missing kept 3 documents)."""
    lowest = heapq.nlargest(max(room, 0), drawn)  # keys are negated
    return [document for _, _, document in sorted(lowest, key=lambda entry: entry[1])]


def _say_judged_documents_missing(name: str, corpus: str, qrels: Qrels, present: set[str]) -> None:
    """Refuse a dev split none of whose relevant documents its corpus holds, and name those missing when only some
    are: every dev score was 0 (or lower than it could be) without a word, and the weights kept were picked by a
    tie or by noise. Evaluation, tuning and mining say the same of an index that lacks them."""
    relevant = relevant_documents(qrels)
    missing = [doc for doc in relevant if doc not in present]
    if relevant and len(missing) == len(relevant):
        raise RetrieverError(f"dev set {name}: {none_of(len(relevant), 'document')} it judges relevant "
                             f"{agree(len(relevant), 'is not', 'is')} in its {corpus}, so every dev score would be 0 "
                             "and the weights kept picked by nothing; give the --dev-dataset whose corpus holds them")
    if missing and is_main_process():
        print(f"warning: dev set {name}: {len(missing)} of the {counted(len(relevant), 'document')} it judges relevant "
              f"{agree(len(missing), 'is', 'are')} not in its {corpus} (e.g. {', '.join(map(repr, missing[:3]))}): "
              f"{agree(len(missing), 'it counts', 'they count')} as a miss in every dev evaluation", file=sys.stderr)


def shared_queries_warning(dev: DevSet, training_queries: list[str]) -> str | None:
    """A warning naming the dev queries that are training queries too (same text): a dev split under another name
    than the training split's may still hold them, and scored on them the dev metric picks the weights that fit."""
    trained = {text.strip() for text in training_queries}
    shared = [query_id for query_id, text in zip(dev.query_ids, dev.query_texts) if text.strip() in trained]
    if not shared:
        return None
    it = agree(len(shared), "it", "them")
    return (f"warning: {len(shared)} of the {counted(len(dev.query_ids), 'dev query', 'dev queries')} (e.g. "
            f"{shared[0]!r}) {agree(len(shared), 'is a training query', 'are training queries')} too: on {it} dev "
            f"scores measure fit, not generalisation, and {agree(len(shared), 'it chooses', 'they choose')} the "
            f"weights kept; hold {it} out of the training data")


def exact_search(query_ids: list[str], query_vectors: np.ndarray, document_vectors: np.ndarray,
                 document_ids: list[str], k: int = SEARCH_DEPTH) -> Run:
    """Top-k by inner product: the search a flat index of these vectors does."""
    scores, rows = exact_top_k(query_vectors, [document_vectors], min(k, len(document_ids)))
    return {query_id: {document_ids[row]: float(score) for row, score in zip(ranked, values)}
            for query_id, ranked, values in zip(query_ids, rows.tolist(), scores.tolist())}


def evaluate_dev(model, dev: DevSet, device: torch.device, dtype: str, batch_size: int | None = None,
                 progress: bool = True) -> dict[str, float] | None:
    """nDCG@10 and Recall@100 of the model's current weights on the dev set, on the first process (None on the others).
    Every process of a launch must call it: each encodes its share of the documents and of the queries and searches
    every query in its documents; the first merges the top hits and scores them. The first process once encoded every
    query and searched them all while the others waited, so more processes made the evaluation no faster."""
    was_training = model.training
    model.eval()
    rank, processes = _process()
    documents = dev.documents[process_share(len(dev.documents), rank, processes)]
    queries = dev.query_texts[process_share(len(dev.query_texts), rank, processes)]
    try:
        encoder = model.as_encoder(device, dtype, batch_size)
        with tqdm(total=len(documents) + len(queries), desc="dev encode", unit="text", file=sys.stderr, leave=False,
                  disable=not progress or rank != 0) as bar:
            document_vectors = encoder.encode_passages(documents, progress=bar.update)
            query_vectors = encoder.encode_queries(queries, progress=bar.update)
    finally:
        model.train(was_training)
    query_vectors = np.concatenate(_everyones(query_vectors, processes, every_process=True))
    depth = min(SEARCH_DEPTH, len(dev.documents))
    hits = share_top_k(query_vectors, document_vectors, depth, len(dev.documents) * rank // processes)
    shares = _everyones(hits, processes, every_process=False)
    if shares is None:
        return None
    scores, rows = merged_top_k(shares, depth)
    ids = [d.id for d in dev.documents]
    run = {query_id: {ids[row]: float(score) for row, score in zip(ranked, values) if row >= 0}
           for query_id, ranked, values in zip(dev.query_ids, rows.tolist(), scores.tolist())}
    return dict(evaluate_run(run, dev.qrels, DEV_METRICS).mean)


def process_share(count: int, rank: int, processes: int) -> slice:
    """The documents (or queries) process ``rank`` of ``processes`` encodes: contiguous, so they join in order."""
    return slice(count * rank // processes, count * (rank + 1) // processes)


def _process() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _everyones(value, processes: int, every_process: bool) -> list | None:
    """Every process's ``value`` in rank order: in every process, or on the first only (None elsewhere)."""
    if processes == 1:
        return [value]
    if every_process:
        values: list = [None] * processes
        dist.all_gather_object(values, value)
        return values
    values = [None] * processes if dist.get_rank() == 0 else None
    dist.gather_object(value, values, dst=0)
    return values


def share_top_k(queries: np.ndarray, documents: np.ndarray, k: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's top ``k`` among this process's documents, rows numbered in the whole dev corpus (-1: none)."""
    if not len(documents) or not len(queries):
        return np.zeros((len(queries), 0), dtype=np.float32), np.zeros((len(queries), 0), dtype=np.int64)
    scores, rows = exact_top_k(queries, [documents], min(k, len(documents)))
    return scores, np.where(rows >= 0, rows + offset, -1)


def merged_top_k(shares: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` of each query over every share's top hits, best first; among equal scores the lower row, so
    which of the documents tied at the cut come in does not depend on how the corpus was split over processes."""
    scores = np.concatenate([share[0] for share in shares], axis=1)
    rows = np.concatenate([share[1] for share in shares], axis=1)
    scores = np.where(rows >= 0, scores, -np.inf)
    order = np.lexsort((rows, -scores), axis=-1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)


def dev_history(log_history: list[dict]) -> list[dict]:
    """Each dev evaluation with the step, epoch and the training loss logged just before it."""
    history, last_loss = [], None
    for entry in log_history:
        last_loss = entry.get("loss", last_loss)
        if f"eval_{SELECTION_METRIC}" in entry:
            scores = {key[len("eval_"):]: value for key, value in entry.items() if key.startswith("eval_")}
            loss = {"train_loss": round(last_loss, 5)} if entry["step"] > 0 and last_loss is not None else {}
            history.append({"step": entry["step"], "epoch": round(entry.get("epoch") or 0, 3), **scores, **loss})
    return history


def start_model_note(start_model: str, dev: DevSet, history: list[dict], best: dict | None) -> str | None:
    """The warning for a run none of whose trained steps beat the start model on dev. The best trained step is kept
    all the same: the start model is already on disk under --model, and an output holding its weights would be
    recorded (steps, epochs, negatives) as training it never had."""
    start = next((h for h in history if h["step"] == 0), None)
    if start is None or best is None or start[SELECTION_METRIC] <= best[SELECTION_METRIC]:
        return None
    return (f"warning: no trained step beat the start model on dev {dev.name} ({SELECTION_METRIC} "
            f"{start[SELECTION_METRIC]:.4f} before training, {best[SELECTION_METRIC]:.4f} at step {best['step']}, the "
            f"weights kept); the start model {start_model} is better there: use it, or retrain with a lower "
            "--learning-rate")
