"""Does `retriever` score SciFact like sentence-transformers + FAISS with the same model?

Both sides use all-MiniLM-L6-v2 (mean pooling, normalised), passages as "title text",
an exact inner-product FAISS index, and the same evaluator (which equals pytrec_eval).
Run: python benchmarks/scifact_parity.py [--dataset scifact]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from common import dataset_path, stamp
from retriever.corpus import BeirDataset, iter_documents
from retriever.encoder import Encoder, EncoderSettings
from retriever.evaluation import evaluate_index, judged_split
from retriever.indexing import IndexParams, encode_and_index
from retriever.metrics import evaluate_run
from retriever.model_names import resolve_model_path
from retriever.searching import Searcher
from retriever.texts import passage_text

METRICS = ("ndcg@10", "recall@100", "mrr@10", "recall@10")


def sentence_transformers_scores(dataset: BeirDataset, split: str) -> tuple[dict, float]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    documents = list(iter_documents(dataset.corpus_path))
    queries, qrels = judged_split(dataset, split)
    started = time.perf_counter()
    doc_vectors = model.encode([passage_text(d.title, d.text) for d in documents], normalize_embeddings=True)
    seconds = time.perf_counter() - started
    query_vectors = model.encode([q.text for q in queries], normalize_embeddings=True)
    index = faiss.IndexFlatIP(doc_vectors.shape[1])
    index.add(np.asarray(doc_vectors, dtype=np.float32))
    scores, labels = index.search(np.asarray(query_vectors, dtype=np.float32), 1000)
    run = {q.id: {documents[j].id: float(s) for s, j in zip(row_s, row_l)}
           for q, row_s, row_l in zip(queries, scores, labels)}
    return evaluate_run(run, qrels, METRICS).mean, seconds


def retriever_scores(dataset: BeirDataset, split: str) -> tuple[dict, float]:
    encoder = Encoder(EncoderSettings.for_model("minilm", pooling="mean", normalize=True))
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        encode_and_index(dataset.corpus_path, Path(work) / "index", encoder, IndexParams("flat"))
        seconds = time.perf_counter() - started
        report, _ = evaluate_index(Searcher(Path(work) / "index"), dataset, split, k=1000, metrics=METRICS)
    return report.evaluation.mean, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--split", default="test")
    args = parser.parse_args()
    dataset = BeirDataset.open(dataset_path(args.dataset))
    ours, our_seconds = retriever_scores(dataset, args.split)
    theirs, their_seconds = sentence_transformers_scores(dataset, args.split)
    print(stamp())
    print(f"\n{args.dataset} {args.split}, all-MiniLM-L6-v2, mean pooling, normalised, flat index\n")
    print("| metric | retriever | sentence-transformers + FAISS | difference |")
    print("|---|---|---|---|")
    for metric in METRICS:
        print(f"| {metric} | {ours[metric]:.4f} | {theirs[metric]:.4f} | {ours[metric] - theirs[metric]:+.4f} |")
    print(f"| corpus encode+index seconds | {our_seconds:.1f} | {their_seconds:.1f} (encode only) | |")
    worst = max(abs(ours[m] - theirs[m]) for m in ("ndcg@10", "recall@100"))
    print(f"\nlargest |difference| on nDCG@10 / Recall@100: {worst:.4f} "
          f"({'within' if worst <= 0.005 else 'OUTSIDE'} the ±0.005 acceptance bound)")


if __name__ == "__main__":
    main()
