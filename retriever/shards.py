"""Embedding shards: Parquet files of ``{id: string, embedding: fixed_size_list<float32>[dim]}``.

Each shard carries the encoder record in its schema metadata, so any shard tells how it was
made, and is written under a temporary name then renamed, so a file with a final name is
always complete: that is what makes encoding resumable.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from retriever.encoder_settings import VECTOR_FIELDS
from retriever.errors import RetrieverError
from retriever.files import atomic_write

METADATA_KEY = b"retriever"
_SHARD_PATTERN = re.compile(r"^embeddings-w(\d+)of(\d+)-(\d{5})\.parquet$")


def shard_name(worker: int, num_workers: int, part: int) -> str:
    return f"embeddings-w{worker:03d}of{num_workers:03d}-{part:05d}.parquet"


def parse_shard_name(name: str) -> tuple[int, int, int]:
    """(worker, num_workers, part) of a shard file name."""
    match = _SHARD_PATTERN.match(name)
    if match is None:
        raise ValueError(f"not a shard name: {name}")
    return tuple(int(g) for g in match.groups())


def done_marker(folder: Path, worker: int, num_workers: int) -> Path:
    return folder / f"done-w{worker:03d}of{num_workers:03d}.json"


def differing_fields(expected: dict, found: dict, fields: tuple[str, ...] = VECTOR_FIELDS) -> list[str]:
    return [f"{name}: {found.get(name)!r} vs {expected.get(name)!r}" for name in fields
            if found.get(name) != expected.get(name)]


def write_shard(path: Path, ids: list[str], embeddings: np.ndarray, metadata: dict) -> None:
    """Write one shard atomically."""
    dim = int(embeddings.shape[1])
    flat = pa.array(np.ascontiguousarray(embeddings, dtype=np.float32).reshape(-1))
    table = pa.table({"id": pa.array(ids, pa.string()),
                      "embedding": pa.FixedSizeListArray.from_arrays(flat, dim)})
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, sort_keys=True).encode()})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def read_shard_metadata(path: Path) -> dict:
    try:
        raw = pq.read_schema(path).metadata or {}
    except Exception as error:
        raise RetrieverError(f"{path}: not a readable Parquet shard ({error})") from None
    if METADATA_KEY not in raw:
        raise RetrieverError(f"{path}: Parquet file has no retriever metadata; it was not written by `retriever encode`")
    return json.loads(raw[METADATA_KEY])


def read_shard(path: Path) -> tuple[list[str], np.ndarray]:
    """Ids and vectors of one shard, decoded a few thousand rows at a time into one array:
    reading the whole table at once peaks at several times the vectors' size."""
    shard = pq.ParquetFile(path, buffer_size=1 << 22, pre_buffer=False)
    dim = shard.schema_arrow.field("embedding").type.list_size
    vectors = np.empty((shard.metadata.num_rows, dim), dtype=np.float32)
    ids: list[str] = []
    for batch in shard.iter_batches(batch_size=8192, columns=["id", "embedding"]):
        vectors[len(ids):len(ids) + batch.num_rows] = batch.column(1).values.to_numpy(
            zero_copy_only=False).reshape(-1, dim)
        ids.extend(batch.column(0).to_pylist())
    return ids, vectors


def list_shards(folder: Path) -> list[Path]:
    """Complete shards in a folder, in worker then part order."""
    if not folder.is_dir():
        raise RetrieverError(f"{folder}: no such shard folder; run `retriever encode` first")
    shards = [p for p in folder.iterdir() if _SHARD_PATTERN.match(p.name)]
    return sorted(shards, key=lambda p: parse_shard_name(p.name))


def check_complete(folder: Path) -> tuple[list[Path], dict]:
    """All shards of a finished encoding, made by one encoder; refuse anything partial or mixed."""
    shards = list_shards(folder)
    if not shards:
        raise RetrieverError(f"{folder}: holds no embedding shards; run `retriever encode` first")
    first = read_shard_metadata(shards[0])
    num_workers = first["shard"]["num_workers"]
    for worker in range(num_workers):
        if not done_marker(folder, worker, num_workers).is_file():
            raise RetrieverError(f"{folder}: worker {worker} of {num_workers} has not finished encoding; "
                                 f"rerun `retriever encode --worker-index {worker} --num-workers {num_workers}`")
    for shard in shards[1:]:
        meta = read_shard_metadata(shard)
        diffs = differing_fields(first, meta)
        if diffs or meta["shard"]["num_workers"] != num_workers:
            raise RetrieverError(f"{shard}: made by a different encoder or split than {shards[0].name} "
                                 f"({'; '.join(diffs) or 'num_workers differs'}); re-encode into an empty folder")
    return shards, first


def iter_shard_batches(shards: list[Path]) -> Iterator[tuple[list[str], np.ndarray]]:
    for shard in shards:
        yield read_shard(shard)


def sample_rows(total: int, size: int, seed: int) -> np.ndarray:
    """Sorted row numbers of a uniform sample without replacement."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(total, size=min(size, total), replace=False))


def read_rows(shards: list[Path], rows: np.ndarray) -> np.ndarray:
    """The vectors at sorted global row numbers, read shard by shard."""
    parts, offset = [], 0
    for _, vectors in iter_shard_batches(shards):
        local = rows[(rows >= offset) & (rows < offset + len(vectors))] - offset
        parts.append(vectors[local])
        offset += len(vectors)
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def sample_vectors(shards: list[Path], total: int, size: int, seed: int) -> np.ndarray:
    """A uniform sample of the vectors, read shard by shard."""
    return read_rows(shards, sample_rows(total, size, seed))
