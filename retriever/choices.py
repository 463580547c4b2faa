"""The choices and bounds the command line offers (dtypes, index types, k, temperature floor...), declared here,
free of torch, transformers, FAISS and Ray, so `retriever --help` and a usage error answer without importing them;
the modules that act on each value import it from here."""
from __future__ import annotations

from typing import NamedTuple

from retriever.errors import RetrieverError
from retriever.texts import whole_number

DTYPES = ("auto", "fp32", "bf16", "fp16")  # compute precisions (retriever.device)
REPORT_TO = ("none", "tensorboard")  # where `train` and `pretrain` also log (retriever.training.callbacks)
DEFAULT_K = 10  # hits of a search that names no k (the CLI's one QUERY, a server request without k)
ONDISK_TYPE = "ivf-ondisk"  # an IVF index whose lists stay on disk (retriever.ondisk)
INDEX_TYPES = ("flat", "hnsw", "ivfpq", ONDISK_TYPE)  # besides any FAISS factory string (retriever.faiss_index)
REFINE_K_FACTOR_MAX = 1000  # the largest refine k_factor FAISS reads back from an index file (--refine-k-factor)
FACTORY_MAX = 200  # characters of --index-type: the longest useful is some 60, and FAISS's parser crashes on long ones
MAX_HEAD_LAYERS = 12  # a BERT-base's depth; the Condenser head is a few fresh layers (the paper's 2)
# Where Condenser starts (the paper's BERT-base, with the MLM head pre-training continues); not minilm, the
# default encoder, on which pre-training lowered fine-tuned quality (contrastive_start_warning).
DEFAULT_START = "bert-base-uncased"
MIN_TEMPERATURE = 1e-4  # the contrastive and span losses' floor on τ (why: retriever.training.loss)
# Seconds a collective of a torchrun launch waits for the other processes (a stopped one) before failing: the
# Trainer's own default (ddp_timeout), which it did not pass on for CPU training (retriever.training.processes).
DDP_TIMEOUT = 1800
MAX_DDP_TIMEOUT = 365 * 24 * 3600  # a year; gloo's timeout overflows from about 300 years


class CountBound(NamedTuple):
    least: int
    most: int | None = None
    why: str = ""  # what the bound means or guards, said with a refusal


# The whole-number settings of `train` and `pretrain` and their bounds: the CLI's ranges (shown in --help, a usage
# error beyond them) and the library's check (`retriever.training.run_guards`) both read them from here.
COUNT_BOUNDS = {
    "batch_size": CountBound(1), "epochs": CountBound(1), "max_steps": CountBound(1),
    "save_steps": CountBound(0, None, "0: checkpoints only at each epoch's end"),
    "seed": CountBound(0, 2**32 - 1, "the seeds numpy takes"),
    "ddp_timeout": CountBound(1, MAX_DDP_TIMEOUT, "a year, in seconds"),
    "train_group_size": CountBound(1), "grad_cache_chunk_size": CountBound(1), "dev_max_docs": CountBound(1),
    "n_head_layers": CountBound(1, MAX_HEAD_LAYERS, "the Condenser head is a few fresh layers; the paper used 2"),
    "skip_from": CountBound(0, None, "0: the embeddings"), "freeze_backbone_steps": CountBound(0),
    "max_length": CountBound(8), "keep_checkpoints": CountBound(1)}


def check_count(name: str, value: object) -> int:
    """``value`` of the setting ``name`` as an int within its `COUNT_BOUNDS`, else one line naming its flag, the bound
    and why (bounds checked in several places had drifted: the library's line for max_length='16' said at least 1)."""
    return whole_number(value, f"--{name.replace('_', '-')}", *COUNT_BOUNDS[name])
# `serve`: most queries (--max-waiting-queries) and requests waiting for the encoder per index; more get a 503 to
# retry (retriever.serving.batcher).
MAX_WAITING_QUERIES = 8192
MAX_WAITING_REQUESTS = 4096
# `serve --max-queue-seconds`: longest a request waits in its index's queue before its batch starts; one that waited
# longer gets a 503 to retry, unencoded (its client has likely gone). Far above the load test's p99 (under 0.25 s at
# 32 clients, benchmarks/README.md), so it trips only on a server with more work queued than it can do.
MAX_QUEUE_SECONDS = 30.0
# `serve`'s request limits by default (retriever.serving.inputs.Limits; the flags --max-queries, --max-query-chars,
# --max-body-bytes): a POST's most queries and longest query (a 400 past them), its largest body (a 413)
MAX_QUERIES = 256
MAX_QUERY_CHARS = 1000
MAX_BODY_BYTES = 256 * 1024


def check_temperature(temperature: float) -> None:
    """Refuse a τ under `MIN_TEMPERATURE`: 1e-45 was taken, then diverged with advice about the learning rate."""
    if not temperature >= MIN_TEMPERATURE:
        raise RetrieverError(f"--temperature {temperature:g} is below {MIN_TEMPERATURE:g}, under which the softmax "
                             f"of q·p/τ is a hard max in fp32 (and 1/τ overflows near 1e-38): give at least "
                             f"{MIN_TEMPERATURE:g} (0.01 to 0.05 with normalized embeddings, 1 without)")
