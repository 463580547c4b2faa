"""Batches of one token count: what they cost and what they change (encoder.length_batches).

A text's vector moves in its low bits with the padded length of its batch (bf16 most). Queries are encoded in
batches of one token count, so a query's vector does not depend on what else is encoded with it; passages and
the server's concurrent queries mix lengths. For each collection this measures, in one process, modes
alternating: the time to encode the test queries and (a sample of) the passages either way, whether each
query's vector equals its vector encoded alone, and the dense nDCG@10 with the query vectors of each way.
Run: python benchmarks/query_batches.py --dataset medline --dataset cranfield [--rounds 3] [--passages 500]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from common import dataset_path, stamp
from retriever.corpus import BeirDataset, iter_documents
from retriever.encoder import Encoder, EncoderSettings
from retriever.evaluation import judged_split
from retriever.metrics import evaluate_run
from retriever.texts import passage_text


def timed_encode(encode, texts, rounds: int) -> tuple[float, np.ndarray]:
    """Median seconds over ``rounds`` and the vectors (the same every round)."""
    seconds, vectors = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        vectors = encode(texts)
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds)), vectors


def ndcg_at_10(query_vectors, query_ids, doc_vectors, doc_ids, qrels) -> float:
    scores = query_vectors @ doc_vectors.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    run = {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(query_ids)}
    return evaluate_run(run, qrels, ("ndcg@10",)).mean["ndcg@10"]


def measure(name: str, rounds: int, passage_sample: int) -> str:
    dataset = BeirDataset.open(dataset_path(name))
    queries, qrels = judged_split(dataset, "test")
    query_ids, texts = [q.id for q in queries], [q.text for q in queries]
    documents = list(iter_documents(dataset.corpus_path))
    encoder = Encoder(EncoderSettings.for_model("minilm"))
    doc_vectors, doc_ids = encoder.encode_passages(documents), [d.id for d in documents]
    sample = [passage_text(d.title, d.text) for d in documents[:passage_sample]]
    max_length = encoder.settings.passage_max_length
    rows, vectors = [], {}
    for mix in (True, False) * 2:  # alternating, so both ways share the machine's load
        query_seconds, vectors[mix] = timed_encode(lambda batch: encoder.encode_queries(batch, mix_lengths=mix),
                                                   texts, rounds)
        passage_seconds, _ = timed_encode(lambda batch: encoder._encode(  # noqa: SLF001 - passages always mix
            batch, encoder.passage_model, max_length, None, "passages", (encoder.batch_size, mix)), sample, 1)
        rows.append((mix, query_seconds, passage_seconds))
    alone = {}
    for mix in (True, False):
        alone[mix] = np.stack([encoder.encode_queries([text], mix_lengths=mix)[0] for text in texts])
    lines = [f"### {name}: {len(texts)} test queries, {len(documents)} passages ({encoder.dtype})", "",
             "| batches | queries s | first passages s | queries equal to alone | max abs diff to alone | nDCG@10 |",
             "|---|---:|---:|---:|---:|---:|"]
    for mix, query_seconds, passage_seconds in rows:
        same = int(np.all(vectors[mix] == alone[mix], axis=1).sum())
        lines.append(f"| {'mixed lengths' if mix else 'one length'} | {query_seconds:.2f} | {passage_seconds:.1f} | "
                     f"{same} of {len(texts)} | {np.abs(vectors[mix] - alone[mix]).max():.2e} | "
                     f"{ndcg_at_10(vectors[mix], query_ids, doc_vectors, doc_ids, qrels):.4f} |")
    return "\n".join(lines + [f"(first passages: the first {min(passage_sample, len(documents))} of the corpus)"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", default=[], help="Collection(s) with a test split.")
    parser.add_argument("--rounds", type=int, default=3, help="Query-encoding rounds per measurement (median).")
    parser.add_argument("--passages", type=int, default=500, help="Passages timed each way.")
    args = parser.parse_args()
    print("```\n" + stamp() + "\n```\n")
    for name in args.dataset or ["medline"]:
        print(measure(name, args.rounds, args.passages), "\n", flush=True)


if __name__ == "__main__":
    main()
