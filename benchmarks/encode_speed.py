"""Encoding speed: `retriever` (bf16 and fp32) against sentence-transformers' default `encode`.

Same model (all-MiniLM-L6-v2), same passages ("title text", 256-token limit), measured in
turn in one process. Reports docs/s, non-padding tokens/s, the speed ratio, bf16-vs-fp32
cosine agreement, nDCG@10 with each, and achieved GFLOPS against this machine's own measured
matmul peak.
Run: python benchmarks/encode_speed.py [--dataset scifact] [--limit N]
"""
from __future__ import annotations

import argparse
import time

import faiss
import numpy as np
import torch

from common import dataset_path, stamp
from retriever.corpus import BeirDataset, iter_documents, read_queries
from retriever.encoder import Encoder, EncoderSettings, passage_text
from retriever.evaluation import judged_queries
from retriever.metrics import evaluate_run
from retriever.models import resolve_model_path
from retriever.runs import read_qrels


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None, help="Encode only the first N documents (smoke runs).")
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer

    dataset = BeirDataset.open(dataset_path(args.dataset))
    documents = list(iter_documents(dataset.corpus_path))[:args.limit]
    texts = [passage_text(d) for d in documents]
    qrels = read_qrels(dataset.qrels_path(args.split))
    queries = judged_queries(read_queries(dataset.queries_path), qrels)
    doc_ids = [d.id for d in documents]

    ours_bf16 = Encoder(EncoderSettings.for_model("minilm"), device="cpu", dtype="bf16")
    ours_fp32 = Encoder(EncoderSettings.for_model("minilm"), device="cpu", dtype="fp32")
    st = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    max_length = ours_bf16.settings.passage_max_length
    assert st.max_seq_length == max_length, "compare at the same truncation"
    tokens = ours_bf16.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    lengths = [len(t) for t in tokens]
    real_tokens = sum(lengths)

    # warm-up, then measure each system in turn
    ours_bf16.encode_passages(documents[:64]); ours_fp32.encode_passages(documents[:64]); st.encode(texts[:64])
    st_vectors, st_seconds = timed(lambda: st.encode(texts, normalize_embeddings=True))
    bf16_vectors, bf16_seconds = timed(lambda: ours_bf16.encode_passages(documents))
    fp32_vectors, fp32_seconds = timed(lambda: ours_fp32.encode_passages(documents))

    cosine_bf16 = (bf16_vectors * fp32_vectors).sum(axis=1)
    cosine_st = (fp32_vectors * st_vectors).sum(axis=1)
    query_texts = [q.text for q in queries]
    query_ids = [q.id for q in queries]
    ndcg = {
        "retriever bf16": ndcg_at_10(doc_ids, bf16_vectors, ours_bf16.encode_queries(query_texts), query_ids, qrels),
        "retriever fp32": ndcg_at_10(doc_ids, fp32_vectors, ours_fp32.encode_queries(query_texts), query_ids, qrels),
        "sentence-transformers fp32": ndcg_at_10(doc_ids, np.asarray(st_vectors),
                                                 st.encode(query_texts, normalize_embeddings=True), query_ids, qrels),
    }
    config = ours_bf16.passage_model.config
    flops_ours = forward_flops(lengths, ours_bf16.batch_size, config)
    peak_bf16 = matmul_peak_gflops(torch.bfloat16)
    peak_fp32 = matmul_peak_gflops(torch.float32)

    print(stamp())
    print(f"\n{args.dataset}: {len(documents)} passages, {real_tokens} non-padding tokens "
          f"(max {max_length}), all-MiniLM-L6-v2\n")
    print("| system | seconds | docs/s | tokens/s | speed vs sentence-transformers | nDCG@10 |")
    print("|---|---|---|---|---|---|")
    rows = [("sentence-transformers encode (fp32, batch 32)", st_seconds, "sentence-transformers fp32"),
            (f"retriever bf16 (batch {ours_bf16.batch_size})", bf16_seconds, "retriever bf16"),
            (f"retriever fp32 (batch {ours_fp32.batch_size})", fp32_seconds, "retriever fp32")]
    for name, seconds, key in rows:
        print(f"| {name} | {seconds:.1f} | {len(documents) / seconds:.1f} | {real_tokens / seconds:,.0f} | "
              f"{st_seconds / seconds:.2f}x | {ndcg[key]:.4f} |")
    print(f"\nbf16 vs fp32 embeddings (retriever): cosine min {cosine_bf16.min():.5f}, mean {cosine_bf16.mean():.6f}; "
          f"nDCG@10 difference {ndcg['retriever bf16'] - ndcg['retriever fp32']:+.4f}")
    print(f"retriever fp32 vs sentence-transformers: cosine min {cosine_st.min():.5f}, mean {cosine_st.mean():.6f}")
    print(f"\nmeasured matmul peak (2048², all threads): bf16 {peak_bf16:.0f} GFLOPS, fp32 {peak_fp32:.0f} GFLOPS")
    print(f"achieved by retriever (encoder-layer matmuls over padded batches): "
          f"bf16 {flops_ours / bf16_seconds / 1e9:.0f} GFLOPS = {flops_ours / bf16_seconds / 1e9 / peak_bf16:.0%} "
          f"of bf16 peak; fp32 {flops_ours / fp32_seconds / 1e9:.0f} GFLOPS = "
          f"{flops_ours / fp32_seconds / 1e9 / peak_fp32:.0%} of fp32 peak")


if __name__ == "__main__":
    main()
