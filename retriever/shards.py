"""Embedding shards: Parquet files of ``{id: string, embedding: fixed_size_list<float32>[dim]}``.

Each shard carries the encoder record in its schema metadata, so any shard tells how it was made, and is written
under a temporary name then renamed, so a file with a final name is always complete: that is what makes encoding
resumable. ``shard_origin`` proves that they were made from a corpus, read as they were."""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from retriever.encoder_settings import VECTOR_FIELDS
from retriever.errors import RetrieverError, error_line, is_out_of_memory, out_of_memory
from retriever.files import atomic_write
from retriever.wording import counted

METADATA_KEY = b"retriever"
_SHARD_PATTERN = re.compile(r"^embeddings-w(\d+)of(\d+)-(\d{5,})\.parquet$")  # part 100000 has six digits


def shard_name(worker: int, num_workers: int, part: int) -> str:
    return f"embeddings-w{worker:03d}of{num_workers:03d}-{part:05d}.parquet"


def parse_shard_name(name: str) -> tuple[int, int, int]:
    """(worker, num_workers, part) of a shard file name."""
    match = _SHARD_PATTERN.match(name)
    if match is None:
        raise ValueError(f"not a shard name: {name}")
    return tuple(int(g) for g in match.groups())


def done_marker(folder: Path, worker: int, num_workers: int) -> Path:
    """Named with a leading '_', which Parquet readers skip, so the folder reads as one dataset (``pd.read_parquet``
    failed on it); the name without it while an older run's marker is there."""
    name = f"done-w{worker:03d}of{num_workers:03d}.json"
    return folder / name if (folder / name).is_file() else folder / f"_{name}"


# The tokenizer shapes the vectors as much as the weights do: shards made with another vocabulary or normalisation
# (e.g. lowercasing) cannot be mixed. Records older than a fingerprint lack it, and are compared without it.
TOKENIZER_FIELDS = ("tokenizer_sha256", "tokenizer_behaviour_sha256")


def differing_fields(expected: dict, found: dict, fields: tuple[str, ...] = VECTOR_FIELDS) -> list[str]:
    """What differs between two encoder records in ``fields``, plus the tokenizer's fingerprints both hold."""
    names = (*fields, *(name for name in TOKENIZER_FIELDS if name in expected and name in found and name not in fields))
    return [f"{name}: {found.get(name)!r} vs {expected.get(name)!r}" for name in names
            if found.get(name) != expected.get(name)]


def write_shard(path: Path, ids: list[str], embeddings: np.ndarray, metadata: dict) -> None:
    """Write one shard atomically; its part record (``metadata["shard"]``) gets the vectors' ``vectors_sha256``."""
    dim = int(embeddings.shape[1])
    if isinstance(metadata.get("shard"), dict):
        metadata = {**metadata, "shard": {**metadata["shard"], "vectors_sha256": vectors_sha256(embeddings)}}
    flat = pa.array(np.ascontiguousarray(embeddings, dtype=np.float32).reshape(-1))
    table = pa.table({"id": pa.array(ids, pa.string()), "embedding": pa.FixedSizeListArray.from_arrays(flat, dim)})
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, sort_keys=True).encode()})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


SHARD_KEYS = ("worker", "num_workers", "part", "rows", "shard_size")


def invalid_shard(path: Path, problem: str, error: Exception | None = None) -> RetrieverError:
    if error is not None and is_out_of_memory(error):  # the shard is fine: it was to be re-encoded or deleted
        return out_of_memory(f"reading {path} ({error_line(error)}; the file is not damaged)")
    return RetrieverError(f"{path}: not a valid shard ({problem}); rerun `retriever encode` (or `build`) on its "
                          "corpus, which re-encodes it, or delete it and rerun")


def read_shard_metadata(path: Path) -> dict:
    """The encoder and part record a shard carries, refused in one line when the file cannot be read, the
    record is broken or the file holds another number of rows than it records (truncated or rewritten)."""
    try:
        footer = pq.read_metadata(path)
    except Exception as error:
        raise invalid_shard(path, f"not a readable Parquet file: {error_line(error)}", error) from None
    raw = footer.metadata or {}
    if METADATA_KEY not in raw:
        raise invalid_shard(path, "the Parquet file has no retriever metadata; `retriever encode` did not write it")
    try:
        metadata = json.loads(raw[METADATA_KEY])
    except ValueError:
        raise invalid_shard(path, "its retriever metadata is not valid JSON") from None
    shard = metadata.get("shard") if isinstance(metadata, dict) else None
    if not isinstance(shard, dict):
        raise invalid_shard(path, "its retriever metadata has no shard record")
    for key in SHARD_KEYS:
        if not isinstance(shard.get(key), int) or isinstance(shard.get(key), bool):
            raise invalid_shard(path, f"its shard record lacks a whole number {key}")
    if footer.num_rows != shard["rows"]:
        raise invalid_shard(path, f"holds {counted(footer.num_rows, 'row')} where its metadata records {shard['rows']}")
    _check_columns(path, footer.schema.to_arrow_schema(), metadata.get("dim"))
    return metadata


def existing_metadata(path: Path) -> dict | None:
    """The metadata of the shard already at ``path``: None when there is none, and ``{}`` (re-encode it) when
    it is damaged, truncated or holds other rows than it records: a rerun repairs what a crash or an edit broke."""
    if not path.exists():
        return None
    try:
        return read_shard_metadata(path)
    except RetrieverError:
        return {}


def _check_columns(path: Path, schema: pa.Schema, dim: object) -> None:
    """That the columns are the ones ``write_shard`` makes, vectors of the dimension the record names: a shard of
    another width would pass every record check and stop FAISS with an assertion, or be reused on resume."""
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise invalid_shard(path, "its encoder record lacks a whole-number dim")
    kinds = {field.name: field.type for field in schema}
    vectors = kinds.get("embedding")
    if (list(kinds) != ["id", "embedding"] or kinds["id"] != pa.string()
            or not pa.types.is_fixed_size_list(vectors) or vectors.value_type != pa.float32()
            or vectors.list_size != dim):
        shown = ", ".join(f"{name}: {kind}" for name, kind in kinds.items())
        raise invalid_shard(path, f"its columns are {shown}, not id: string, embedding: {dim} float32 values")


def read_shard(path: Path) -> tuple[list[str], np.ndarray]:
    """Ids and vectors of one shard, decoded a few thousand rows at a time into one array:
    reading the whole table at once peaks at several times the vectors' size."""
    try:
        shard = pq.ParquetFile(path, buffer_size=1 << 22, pre_buffer=False)
        dim = shard.schema_arrow.field("embedding").type.list_size
        vectors = np.empty((shard.metadata.num_rows, dim), dtype=np.float32)
        ids: list[str] = []
        for batch in shard.iter_batches(batch_size=8192, columns=["id", "embedding"]):
            vectors[len(ids):len(ids) + batch.num_rows] = batch.column(1).values.to_numpy(
                zero_copy_only=False).reshape(-1, dim)
            ids.extend(batch.column(0).to_pylist())
    except Exception as error:
        raise invalid_shard(path, f"cannot be read: {error_line(error)}", error) from None
    if not np.isfinite(vectors).all():  # the encoder refuses to write these, so the file was changed since
        raise RetrieverError(f"{path}: holds NaN or infinite vectors, which no encoder run writes; delete it and "
                             "rerun `retriever encode` (or `build`) on its corpus")
    if _recorded_vectors_sha256(shard) not in (None, vectors_sha256(vectors)):
        raise RetrieverError(f"{path}: its vectors differ from the SHA-256 recorded when it was written (damaged on "
                             "disk or in a copy); delete it and rerun `retriever encode` (or `build`) on its corpus")
    return ids, vectors


def vectors_sha256(vectors: np.ndarray) -> str:
    """SHA-256 of a shard's vectors as float32 rows: recorded when written and checked when read, since same-size
    damage inside the vector data passes every other check (ids, rows, columns, content) and indexes other vectors."""
    return hashlib.sha256(np.ascontiguousarray(vectors, dtype=np.float32).tobytes()).hexdigest()


def _recorded_vectors_sha256(shard: pq.ParquetFile) -> str | None:
    """The hash a shard's record gives its vectors; None for shards written before it was recorded."""
    try:
        return json.loads((shard.schema_arrow.metadata or {})[METADATA_KEY])["shard"].get("vectors_sha256")
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def id_lines(ids: Iterable[str]) -> bytes:
    """Ids as their hash reads them, one place for the shard's id column and the corpus's: each followed by a
    newline, in UTF-8 that keeps lone surrogates."""
    return "".join(f"{i}\n" for i in ids).encode("utf-8", "surrogatepass")


def shard_ids_sha256(path: Path) -> str:
    """SHA-256 of a shard's ``id_lines``: compared with the corpus's ids of the part."""
    digest = hashlib.sha256()
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536, columns=["id"]):
            digest.update(id_lines(batch.column(0).to_pylist()))
    except Exception as error:
        raise invalid_shard(path, f"its id column cannot be read: {error_line(error)}", error) from None
    return digest.hexdigest()


def list_shards(folder: Path, worker: tuple[int, int] | None = None) -> list[Path]:
    """Complete shards in a folder, in worker then part order; only one worker's with ``worker`` (index, count)."""
    if not folder.is_dir():
        raise RetrieverError(f"{folder}: no such shard folder; run `retriever encode` first")
    shards = [p for p in folder.iterdir()
              if _SHARD_PATTERN.match(p.name) and worker in (None, parse_shard_name(p.name)[:2])]
    return sorted(shards, key=lambda p: parse_shard_name(p.name))


def warn_resized(folder: Path, worker: int, num_workers: int, shard_size: int) -> int | None:
    """The other --shard-size this worker's shards were cut at, said on stderr before any encoding: parts cut
    otherwise are all encoded again, and a resume with another size lost every finished shard without a word."""
    records = _shard_records(folder, worker, num_workers)
    earlier = {record["shard_size"] for record in records} - {shard_size}
    if not earlier or (len(records) == 1 and records[0]["rows"] <= shard_size):  # one short part: the same part
        return None
    print(f"warning: {folder}: its shards were cut at --shard-size {min(earlier)}, this run cuts at {shard_size}, "
          f"so every part is encoded again; stop it and pass --shard-size {min(earlier)} to reuse them",
          file=sys.stderr)
    return min(earlier)


def note_batch_size(folder: Path, worker: int, num_workers: int, batch_size: int | None) -> None:
    """Say on stderr, before any encoding, that this worker's shards were encoded in batches of another size. A resume
    goes on, as a user who changed --batch-size (or whose default differs on this device) expects, but the passages
    it encodes round otherwise in their last bits than an uninterrupted run's, which it did without a word. Shards
    that predate the record say nothing, and so does a run whose batch size is not known (None)."""
    if batch_size is None:
        return
    earlier = {record["batch_size"] for record in _shard_records(folder, worker, num_workers)
               if "batch_size" in record} - {batch_size}
    if earlier:
        print(f"note: {folder}: its shards were encoded in batches of {min(earlier)} and this run encodes in batches "
              f"of {batch_size}: it goes on, reusing them, but the vectors it makes round otherwise in their last "
              f"bits, so they will not all be an uninterrupted run's; resume with --batch-size {min(earlier)} to "
              "continue it as it was", file=sys.stderr)


def _shard_records(folder: Path, worker: int, num_workers: int) -> list[dict]:
    """The part records of this worker's shards in ``folder``, damaged ones left out (they are encoded again)."""
    records = []
    for path in list_shards(folder, (worker, num_workers)):
        with contextlib.suppress(RetrieverError):
            records.append(read_shard_metadata(path)["shard"])
    return records


def iter_shard_batches(shards: list[Path], progress: str | None = None) -> Iterator[tuple[list[str], np.ndarray]]:
    """Each shard's ids and vectors in turn; ``progress`` names a bar over the shards, for passes that read them all
    only to keep a little (a sample, exact neighbours), which otherwise say nothing for minutes."""
    for shard in tqdm(shards, desc=progress, unit="shard", file=sys.stderr, disable=progress is None):
        yield read_shard(shard)


def sample_rows(total: int, size: int, seed: int) -> np.ndarray:
    """Sorted row numbers of a uniform sample without replacement."""
    return np.sort(np.random.default_rng(seed).choice(total, size=min(size, total), replace=False))


def read_rows(shards: list[Path], rows: np.ndarray, progress: str | None = None) -> np.ndarray:
    """The vectors at sorted global row numbers, read shard by shard (``iter_shard_batches``' ``progress``)."""
    parts, offset = [], 0
    for _, vectors in iter_shard_batches(shards, progress):
        local = rows[(rows >= offset) & (rows < offset + len(vectors))] - offset
        parts.append(vectors[local])
        offset += len(vectors)
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def sample_vectors(shards: list[Path], total: int, size: int, seed: int, progress: str | None = None) -> np.ndarray:
    """A uniform sample of the vectors, read shard by shard (``iter_shard_batches``' ``progress``)."""
    return read_rows(shards, sample_rows(total, size, seed), progress)
