"""The scale benchmark's collection: hard synthetic vectors as embedding shards, plus a small-text corpus.

Both are written chunk by chunk (never the whole collection in memory) and each file under a
temporary name then renamed, so a rerun skips what is already complete.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from retriever.corpus import Document
from retriever.corpus_encoding import part_metadata
from retriever.files import atomic_write_bytes
from retriever.shards import done_marker, read_shard, read_shard_metadata, shard_name, write_shard
from synthetic import CHUNK, SyntheticCollection, SyntheticSpec


def passage_id(row: int) -> str:
    return f"s{row:09d}"


def passage_text(row: int) -> str:
    return f"synthetic passage number {row}"


def documents(start: int, stop: int) -> list[Document]:
    return [Document(id=passage_id(row), text=passage_text(row), title="") for row in range(start, stop)]


def encoder_record(spec: SyntheticSpec) -> dict:
    """What a shard records about its encoder; here the generator stands in for the model."""
    return {"model": f"synthetic-hard-seed{spec.seed}", "model_path": None, "pooling": "mean", "normalize": True,
            "query_max_length": 64, "passage_max_length": 256, "query_prefix": "", "passage_prefix": "",
            "towers": "shared", "weights_sha256": f"synthetic:{json.dumps(spec.__dict__, sort_keys=True)}",
            "dim": spec.dim, "dtype": "fp32"}


def write_corpus(path: Path, count: int) -> None:
    """A JSONL corpus of short texts whose ids match the shards' rows."""
    if path.exists():
        return
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as handle:
        for start in tqdm(range(0, count, 100_000), desc="corpus", unit="100k docs", file=sys.stderr):
            handle.write("".join(json.dumps({"_id": doc.id, "title": doc.title, "text": doc.text}) + "\n"
                                 for doc in documents(start, min(start + 100_000, count))))
    os.replace(tmp, path)


def write_shards(folder: Path, corpus: Path, count: int, shard_size: int, spec: SyntheticSpec) -> None:
    """Shards of ``shard_size`` rows, as one `retriever encode` worker would write them."""
    if shard_size % CHUNK:
        raise SystemExit(f"--shard-size must be a multiple of the generator's chunk ({CHUNK})")
    folder.mkdir(parents=True, exist_ok=True)
    collection = SyntheticCollection(spec)
    record = {**encoder_record(spec), "corpus": str(corpus.resolve())}
    parts = range(0, count, shard_size)
    for part, start in enumerate(tqdm(parts, desc="shards", unit="shard", file=sys.stderr)):
        path = folder / shard_name(0, 1, part)
        stop = min(start + shard_size, count)
        metadata = part_metadata(record, documents(start, stop), 0, 1, part, shard_size)
        if path.exists():
            if read_shard_metadata(path) != metadata:  # written by an earlier version of this script
                write_shard(path, *read_shard(path), metadata)
            continue
        chunks = [collection.chunk(number) for number in range(start // CHUNK, (stop - 1) // CHUNK + 1)]
        vectors = np.concatenate(chunks)[:stop - start]
        write_shard(path, [passage_id(row) for row in range(start, stop)], vectors, metadata)
    summary = {"worker": 0, "num_workers": 1, "shards": len(parts), "rows": count, "corpus_documents": count,
               "empty_texts": 0, "encoder": record}
    atomic_write_bytes(done_marker(folder, 0, 1), json.dumps(summary, indent=2, sort_keys=True).encode())


def write_collection(work: Path, count: int, shard_size: int, spec: SyntheticSpec) -> tuple[Path, Path]:
    """(shards folder, corpus file) for ``count`` vectors under ``work``, reusing complete files."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus-{count}.jsonl"
    shards = work / f"shards-{count}"
    write_corpus(corpus, count)
    write_shards(shards, corpus, count, shard_size, spec)
    return shards, corpus
