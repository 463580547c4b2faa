"""Dev-split evaluation during training: exact search with the live weights, trec_eval-exact metrics.

Vectors come from the Encoder code of ``retriever encode`` (in-memory weights) and the search is
a flat index's, so a dev score equals what a flat index of the saved model gives on these documents.
"""
from __future__ import annotations

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
from retriever.evaluation import judged_split, warn_of_left_out
from retriever.exact import exact_top_k
from retriever.metrics import evaluate_run
from retriever.runs import Qrels, Run
from retriever.wording import agree, counted

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
    warn_of_left_out(beir, split, queries, qrels, "they are not searched, and score 0 in every dev evaluation")
    judged_docs = {doc_id for docs in qrels.values() for doc_id in docs}
    kept: list[Document] = []
    sample: list[Document] = []
    rng = random.Random(seed)
    others_seen = 0
    room = None if max_docs is None else max(max_docs - len(judged_docs), 0)
    with beir_keys():
        for document in iter_documents(beir.corpus_path):
            if room is None or document.id in judged_docs:
                kept.append(document)
                continue
            others_seen += 1  # reservoir sampling keeps a uniform sample without holding the corpus
            if len(sample) < room:
                sample.append(document)
            else:
                slot = rng.randrange(others_seen)
                if slot < room:
                    sample[slot] = document
    documents = kept + sample
    name = f"{beir.root.name}/{split}"
    return DevSet(name, [q.id for q in queries], [q.text for q in queries], documents, qrels)


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
    Every process of a launch must call it: each encodes its share of the documents. The first one encoded them all
    while the others waited at the next collective, and an evaluation longer than --ddp-timeout failed the run as if a
    process had hung."""
    was_training = model.training
    model.eval()
    rank, processes = _process()
    share = process_share(len(dev.documents), rank, processes)
    try:
        encoder = model.as_encoder(device, dtype, batch_size)
        texts = len(dev.documents[share]) + (len(dev.query_texts) if rank == 0 else 0)
        with tqdm(total=texts, desc="dev encode", unit="text", file=sys.stderr, leave=False,
                  disable=not progress or rank != 0) as bar:
            document_vectors = _gathered(encoder.encode_passages(dev.documents[share], progress=bar.update), processes)
            query_vectors = encoder.encode_queries(dev.query_texts, progress=bar.update) if rank == 0 else None
    finally:
        model.train(was_training)
    if rank != 0:
        return None
    run = exact_search(dev.query_ids, query_vectors, document_vectors, [d.id for d in dev.documents])
    return dict(evaluate_run(run, dev.qrels, DEV_METRICS).mean)


def process_share(count: int, rank: int, processes: int) -> slice:
    """The documents process ``rank`` of ``processes`` encodes: contiguous, so the first process joins them in order."""
    return slice(count * rank // processes, count * (rank + 1) // processes)


def _process() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _gathered(vectors: np.ndarray, processes: int) -> np.ndarray | None:
    """Every process's vectors, in rank order, on the first process (None elsewhere)."""
    if processes == 1:
        return vectors
    parts: list[np.ndarray] | None = [None] * processes if dist.get_rank() == 0 else None
    dist.gather_object(vectors, parts, dst=0)
    return np.concatenate(parts) if parts is not None else None


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
