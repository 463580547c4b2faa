"""Encoding speed: `retriever encode`'s encoder against sentence-transformers' default `encode`.

Same model (all-MiniLM-L6-v2), same passages ("title text", 256-token limit), measured in
turn in one process. Reports docs/s, non-padding tokens/s, the speed ratio, the cosine of our
vectors to sentence-transformers' fp32 vectors (the fp32 reference), nDCG@10 with each, and
achieved GFLOPS against this machine's own measured matmul peak. retriever runs with its auto
dtype: bf16 where the CPU has native bf16, fp32 elsewhere.
Run: python benchmarks/encode_speed.py [--dataset scifact] [--limit N] [--also-fp32]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import faiss
import numpy as np
import torch

from common import dataset_path, stamp
from retriever.corpus import BeirDataset, iter_documents
from retriever.device import cpu_has_native_bf16, resolve_dtype
from retriever.encoder import Encoder, EncoderSettings
from retriever.evaluation import judged_split
from retriever.metrics import evaluate_run
from retriever.model_names import resolve_model_path
from retriever.texts import passage_text


def matmul_peak_gflops(dtype: torch.dtype, size: int = 2048, seconds: float = 3.0) -> float:
    """Best sustained GFLOPS of a square matmul on all threads: the ceiling for a BERT forward."""
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    for _ in range(3):
        a @ b
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        a @ b
        best = max(best, 2 * size ** 3 / (time.perf_counter() - start) / 1e9)
    return best


def forward_flops(token_lengths: list[int], batch_size: int, config) -> float:
    """Matmul FLOPs of encoder layers over the padded, length-sorted batches actually run."""
    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    lengths = sorted(token_lengths, reverse=True)
    total = 0.0
    for start in range(0, len(lengths), batch_size):
        batch = lengths[start:start + batch_size]
        padded = batch[0]
        tokens = padded * len(batch)
        per_token = 2 * (4 * hidden * hidden + 2 * hidden * inter) + 2 * 2 * padded * hidden
        total += layers * tokens * per_token
    return total


def ndcg_at_10(doc_ids: list[str], doc_vectors: np.ndarray, query_vectors: np.ndarray, query_ids: list[str],
               qrels) -> float:
    index = faiss.IndexFlatIP(doc_vectors.shape[1])
    index.add(np.ascontiguousarray(doc_vectors, dtype=np.float32))
    scores, labels = index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), 100)
    run = {qid: {doc_ids[j]: float(s) for s, j in zip(row_s, row_l)}
           for qid, row_s, row_l in zip(query_ids, scores, labels)}
    return evaluate_run(run, qrels, ("ndcg@10",)).mean["ndcg@10"]


def timed(function):
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


@dataclass
class Measured:
    """Everything one run measured, for the report."""
    documents: int
    real_tokens: int
    max_length: int
    dtype: str
    batch_sizes: dict[str, int]
    st_seconds: float
    seconds: dict[str, float]
    ndcg: dict[str, float]
    cosines: dict[str, np.ndarray]
    flops: float
    peaks: dict[str, float]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None, help="Encode only the first N documents (smoke runs).")
    parser.add_argument("--dtype", default="auto", choices=("auto", "bf16", "fp32"),
                        help="retriever's dtype: auto is bf16 on CPUs with native bf16 (AVX512-BF16/AMX), else fp32")
    parser.add_argument("--also-fp32", action="store_true",
                        help="also time retriever in fp32 (when --dtype resolves to bf16), to split the gain "
                             "into length-sorted batching and bf16")
    return parser.parse_args()


def measure(args: argparse.Namespace) -> Measured:
    """Each system in turn after a warm-up; sentence-transformers (fp32) gives the reference vectors."""
    from sentence_transformers import SentenceTransformer

    dataset = BeirDataset.open(dataset_path(args.dataset))
    documents = list(iter_documents(dataset.corpus_path))[:args.limit]
    texts = [passage_text(d.title, d.text) for d in documents]
    queries, qrels = judged_split(dataset, args.split)
    doc_ids, query_ids, query_texts = [d.id for d in documents], [q.id for q in queries], [q.text for q in queries]
    dtype = resolve_dtype(args.dtype, torch.device("cpu"))
    ours = {dtype: Encoder(EncoderSettings.for_model("minilm"), device="cpu", dtype=dtype)}
    if args.also_fp32 and dtype != "fp32":
        ours["fp32"] = Encoder(EncoderSettings.for_model("minilm"), device="cpu", dtype="fp32")
    st = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    max_length = ours[dtype].settings.passage_max_length
    assert st.max_seq_length == max_length, "compare at the same truncation"
    lengths = [len(t) for t in ours[dtype].tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]

    st.encode(texts[:64])
    for encoder in ours.values():
        encoder.encode_passages(documents[:64])
    st_vectors, st_seconds = timed(lambda: np.asarray(st.encode(texts, normalize_embeddings=True)))
    vectors, seconds = {}, {}
    for name, encoder in ours.items():
        vectors[name], seconds[name] = timed(lambda: encoder.encode_passages(documents))
    ndcg = {"sentence-transformers fp32": ndcg_at_10(
        doc_ids, st_vectors, st.encode(query_texts, normalize_embeddings=True), query_ids, qrels)}
    for name, encoder in ours.items():
        ndcg[f"retriever {name}"] = ndcg_at_10(doc_ids, vectors[name], encoder.encode_queries(query_texts),
                                               query_ids, qrels)
    return Measured(
        documents=len(documents), real_tokens=sum(lengths), max_length=max_length, dtype=dtype,
        batch_sizes={name: encoder.batch_size for name, encoder in ours.items()}, st_seconds=st_seconds,
        seconds=seconds, ndcg=ndcg, cosines={name: (vectors[name] * st_vectors).sum(axis=1) for name in ours},
        flops=forward_flops(lengths, ours[dtype].batch_size, ours[dtype].passage_model.config),
        peaks={name: matmul_peak_gflops(torch.bfloat16 if name == "bf16" else torch.float32)
               for name in dict.fromkeys(["fp32", *ours])})


def report(args: argparse.Namespace, m: Measured) -> None:
    print(stamp())
    native = "native bf16 (AVX512-BF16/AMX)" if cpu_has_native_bf16() else "no native bf16 (bf16 would be emulated)"
    print(f"CPU: {native}; retriever --dtype {args.dtype} resolves to {m.dtype}")
    print(f"\n{args.dataset}: {m.documents} passages, {m.real_tokens} non-padding tokens "
          f"(max {m.max_length}), all-MiniLM-L6-v2\n")
    print("| system | seconds | docs/s | tokens/s | speed vs sentence-transformers | nDCG@10 |")
    print("|---|---|---|---|---|---|")
    rows = [("sentence-transformers encode (fp32, batch 32)", m.st_seconds, "sentence-transformers fp32")]
    rows += [(f"retriever {name} (batch {batch}, length-sorted)", m.seconds[name], f"retriever {name}")
             for name, batch in m.batch_sizes.items()]
    for name, took, key in rows:
        print(f"| {name} | {took:.1f} | {m.documents / took:.1f} | {m.real_tokens / took:,.0f} | "
              f"{m.st_seconds / took:.2f}x | {m.ndcg[key]:.4f} |")
    for name, cosine in m.cosines.items():
        print(f"\nretriever {name} vs sentence-transformers fp32 embeddings: cosine min {cosine.min():.5f}, "
              f"mean {cosine.mean():.6f}; nDCG@10 difference "
              f"{m.ndcg[f'retriever {name}'] - m.ndcg['sentence-transformers fp32']:+.4f}")
    print("\nmeasured matmul peak (2048², all threads): " +
          ", ".join(f"{name} {peak:.0f} GFLOPS" for name, peak in m.peaks.items()))
    for name, took in m.seconds.items():
        achieved = m.flops / took / 1e9
        print(f"achieved by retriever {name} (encoder-layer matmuls over padded batches): {achieved:.0f} GFLOPS "
              f"= {achieved / m.peaks[name]:.0%} of the {name} peak")


def main() -> None:
    args = parse_args()
    report(args, measure(args))


if __name__ == "__main__":
    main()
