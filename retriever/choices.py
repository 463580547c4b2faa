"""The choices and bounds the command line offers (dtypes, index types, k, temperature floor...), declared here,
free of torch, transformers, FAISS and Ray, so `retriever --help` and a usage error answer without importing them;
the modules that act on each value import it from here."""
from __future__ import annotations

from retriever.errors import RetrieverError

DTYPES = ("auto", "fp32", "bf16", "fp16")  # compute precisions (retriever.device)
DEFAULT_K = 10  # hits of a search that names no k (the CLI's one QUERY, a server request without k)
ONDISK_TYPE = "ivf-ondisk"  # an IVF index whose lists stay on disk (retriever.ondisk)
INDEX_TYPES = ("flat", "hnsw", "ivfpq", ONDISK_TYPE)  # besides any FAISS factory string (retriever.faiss_index)
MAX_HEAD_LAYERS = 12  # a BERT-base's depth; the Condenser head is a few fresh layers (the paper's 2)
# Where Condenser starts (the paper's BERT-base, with the MLM head pre-training continues); not minilm, the
# default encoder, on which pre-training lowered fine-tuned quality (contrastive_start_warning).
DEFAULT_START = "bert-base-uncased"
MIN_TEMPERATURE = 1e-4  # the contrastive and span losses' floor on τ (why: retriever.training.loss)
# Seconds a collective of a torchrun launch waits for the other processes (a stopped one) before failing: the
# Trainer's own default (ddp_timeout), which it did not pass on for CPU training (retriever.training.processes).
DDP_TIMEOUT = 1800
# `serve`: most queries (--max-waiting-queries) and requests waiting for the encoder per index; more get a 503 to
# retry (retriever.serving.batcher).
MAX_WAITING_QUERIES = 8192
MAX_WAITING_REQUESTS = 4096


def check_temperature(temperature: float) -> None:
    """Refuse a τ under `MIN_TEMPERATURE`: 1e-45 was taken, then diverged with advice about the learning rate."""
    if not temperature >= MIN_TEMPERATURE:
        raise RetrieverError(f"--temperature {temperature:g} is below {MIN_TEMPERATURE:g}, under which the softmax "
                             f"of q·p/τ is a hard max in fp32 (and 1/τ overflows near 1e-38): give at least "
                             f"{MIN_TEMPERATURE:g} (0.01 to 0.05 with normalized embeddings, 1 without)")
