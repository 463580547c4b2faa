"""Embedding shards + corpus → an index folder: FAISS index, id map, doc store and manifest.

The folder is assembled under a hidden temporary name and renamed into place at the end, so
an interrupted build leaves nothing that looks like an index.
"""
from __future__ import annotations

import hashlib
import math
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from retriever.corpus import Fields, ReadStats, iter_documents, resolve_corpus_path
from retriever.encoder import Encoder
from retriever.encoding import PartRunner, ShardContentCheck, clear_other_encoder, describe, encode_corpus
from retriever.errors import RetrieverError
from retriever.files import read_json_object, write_json
from retriever.folders import clean_stale, replace_folder, temporary_folder
from retriever.integrity import REBUILD, file_records, file_sha256
from retriever.ondisk import CODES, ONDISK_TYPE, PartPlan
from retriever.recorded_paths import rebase_model_record, relative_path
from retriever.lexical import LEXICAL_DIR, LexicalParams, build_lexical
from retriever.shards import check_complete, iter_shard_batches, read_shard_metadata, sample_vectors
from retriever.tuning import downcast_hnsw, held_out_rows, ivf_part, tune

INDEX_FILE = "index.faiss"
IDS_FILE = "ids.parquet"
DOCSTORE_FILE = "docstore.parquet"
MANIFEST_FILE = "manifest.json"
INDEX_TYPES = ("flat", "hnsw", "ivfpq", ONDISK_TYPE)
FORMAT_VERSION = 1


@dataclass
class IndexParams:
    """How to build the FAISS index; ``index_type`` may also be any FAISS factory string."""

    index_type: str = "flat"
    hnsw_m: int = 32
    ef_construction: int = 200
    nlist: int | None = None
    pq_m: int | None = None
    refine_k_factor: int = 50
    train_size: int = 100_000
    seed: int = 0
    target_recall: float | None = None
    tuning_queries: int = 1000
    tuning_k: int = 10
    search_defaults: dict = field(default_factory=dict)
    ondisk_codes: str = "sq8"
    part_size: int = 500_000
    parallel_parts: int | None = None


def default_nlist(count: int) -> int:
    """About 4·√N lists, but at least 39 training points per list as FAISS wants."""
    return max(1, min(int(4 * math.sqrt(count)), count // 39 or 1))


def default_pq_m(dim: int) -> int:
    """Largest divisor of dim that gives sub-vectors of at least 8 dimensions."""
    return max(m for m in range(1, dim // 8 + 1) if dim % m == 0) if dim >= 8 else 1


def factory_string(params: IndexParams, dim: int, count: int) -> str:
    if params.index_type == "flat":
        return "Flat"
    if params.index_type == "hnsw":
        return f"HNSW{params.hnsw_m},Flat"
    if params.index_type == ONDISK_TYPE:
        if params.ondisk_codes not in CODES:
            raise RetrieverError(f"--ondisk-codes must be one of {', '.join(CODES)}")
        return f"IVF{params.nlist or default_nlist(count)},{CODES[params.ondisk_codes]}"
    if params.index_type == "ivfpq":
        nlist = params.nlist or default_nlist(count)
        pq_m = params.pq_m or default_pq_m(dim)
        if dim % pq_m:
            raise RetrieverError(f"--pq-m {pq_m} must divide the embedding dimension {dim}")
        # 8-bit codes need 256 training points per sub-quantiser; small collections get fewer bits.
        nbits = max(1, min(8, int(math.log2(max(count, 2)))))
        return f"IVF{nlist},PQ{pq_m}" + (f"x{nbits}" if nbits < 8 else "")
    return params.index_type


def new_index(spec: str, dim: int, params: IndexParams) -> faiss.Index:
    """An empty inner-product index from a factory string, with the build settings of ``params``."""
    try:
        index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        raise RetrieverError(f"FAISS cannot build index {spec!r}: {str(error).splitlines()[-1]}; "
                             f"use flat, hnsw, ivfpq or a valid FAISS factory string") from None
    hnsw = downcast_hnsw(index)
    if hnsw is not None:
        hnsw.hnsw.efConstruction = params.ef_construction
    refine = faiss.downcast_index(index)
    if isinstance(refine, faiss.IndexRefine):
        # FAISS re-scores only k candidates by default, which leaves PQ's error in place.
        refine.k_factor = float(params.refine_k_factor)
    ivf = ivf_part(index)
    if ivf is not None:
        ivf = faiss.downcast_index(ivf)
        if getattr(ivf, "do_polysemous_training", False):
            # Polysemous codes only speed up Hamming-filtered search, which we never turn on;
            # training them took 3.7x the IVF-PQ training time on 1M x 384 (189 s vs 51 s).
            ivf.do_polysemous_training = False
    return index


def _write_docstore(corpus: Path, fmt: str, fields: Fields, target: Path, stats: ReadStats,
                    content: ShardContentCheck, bar: tqdm) -> None:
    """Stream the corpus into a Parquet doc store, hashing it part by part for ``content``."""
    schema = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])
    batch: dict[str, list[str]] = {"id": [], "title": [], "text": []}
    with pq.ParquetWriter(target, schema) as writer:
        for document in iter_documents(corpus, fmt, fields, stats):
            content.add(document)
            bar.update()
            batch["id"].append(document.id)
            batch["title"].append(document.title)
            batch["text"].append(document.text)
            if len(batch["id"]) == 10_000:
                writer.write_table(pa.table(batch, schema=schema))
                batch = {key: [] for key in batch}
        if batch["id"]:
            writer.write_table(pa.table(batch, schema=schema))


def library_versions() -> dict:
    import torch
    import transformers

    from retriever import __version__

    return {"retriever": __version__, "python": platform.python_version(), "faiss": faiss.__version__,
            "torch": torch.__version__, "transformers": transformers.__version__, "pyarrow": pa.__version__,
            "numpy": np.__version__}


def build_index(shards_dir: str | Path, corpus: str | Path, output: str | Path, params: IndexParams = IndexParams(),
                fmt: str = "auto", fields: Fields = Fields(), overwrite: bool = False,
                progress: bool = True, tuning_queries: np.ndarray | None = None,
                lexical: LexicalParams | None = LexicalParams()) -> dict:
    """Build an index folder from complete shards and the corpus they came from; return its manifest.

    ``lexical``: BM25 settings for the index's ``bm25/`` part (built from the doc store just written), or
    None for a dense-only index.

    ``tuning_queries``: query vectors to tune ``params.target_recall`` on instead of held-out passages, for
    when real queries are at hand (they can be harder than passages: see benchmarks/README.md).
    """
    started = time.perf_counter()
    _check_tuning_queries(tuning_queries is not None, params)
    shards_dir, output = Path(shards_dir), Path(output)
    corpus_path = resolve_corpus_path(corpus)
    if output.exists() and not overwrite:
        raise RetrieverError(f"{output}: already exists; pass --overwrite to replace it or choose another --output")
    shards, encoder = check_complete(shards_dir)
    encoder = rebase_model_record({k: v for k, v in encoder.items() if k not in ("shard", "corpus")}, shards_dir,
                                  output)
    shard_records = [read_shard_metadata(s)["shard"] for s in shards]
    count = sum(record["rows"] for record in shard_records)
    dim = int(encoder["dim"])
    output.parent.mkdir(parents=True, exist_ok=True)
    for line in clean_stale(output):
        print(line, file=sys.stderr)
    building = temporary_folder(output)
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    try:
        if params.index_type == ONDISK_TYPE:
            from retriever.ondisk import build_ondisk

            corpus_of = lambda stats: corpus_record(corpus_path, output, shard_records, stats, progress)  # noqa: E731
            manifest = build_ondisk(shards, encoder, count, dim, corpus_path, fmt, fields, building, params,
                                    progress, tuning_queries, started, corpus_of)
            _move_into_place(building, output, overwrite)
            return manifest
        stats = ReadStats()
        content = ShardContentCheck(shards)
        with tqdm(total=count, desc="doc store", unit="doc", file=sys.stderr, disable=not progress) as bar:
            _write_docstore(corpus_path, fmt, fields, building / DOCSTORE_FILE, stats, content, bar)
        check_document_count(stats, count, corpus_path, shards_dir)
        content.check(corpus_path)
        lexical_record = (build_lexical(building / DOCSTORE_FILE, building / LEXICAL_DIR, lexical, progress)
                          if lexical is not None else None)
        spec = factory_string(params, dim, count)
        index = new_index(spec, dim, params)
        trained_on = train(index, shards, count, params, spec)
        held = held_out_rows(count, params) if tuning_queries is None else np.empty(0, dtype=np.int64)
        # The content check proved each shard row's corpus position, so ids and doc-store rows stream
        # shard by shard into ids.parquet; only the held-out sample waits in memory.
        ids_file = IdMapWriter(building / IDS_FILE)
        held_ids: list[str] = []
        held_rows: list[np.ndarray] = []
        held_vectors: list[np.ndarray] = []
        bar = tqdm(total=count, desc=f"index {spec}", unit="vec", file=sys.stderr, disable=not progress)
        for piece, (shard_ids, vectors) in zip(PartPlan(shards, held, count).slices, iter_shard_batches(shards)):
            rows = piece.first_label + piece.stride * np.arange(len(shard_ids), dtype=np.int64)
            keep = np.ones(len(vectors), dtype=bool)
            keep[list(piece.held)] = False
            index.add(np.ascontiguousarray(vectors[keep]))
            ids_file.write([i for i, kept in zip(shard_ids, keep) if kept], rows[keep])
            held_ids.extend(shard_ids[row] for row in piece.held)
            held_rows.append(rows[~keep])
            held_vectors.append(vectors[~keep])
            bar.update(len(shard_ids))
        bar.close()
        tuning = None
        if tuning_queries is not None:
            tuning = tune(index, shards, np.ascontiguousarray(tuning_queries, dtype=np.float32), held, params,
                           "given queries")
        elif len(held):
            tuning = tune(index, shards, np.ascontiguousarray(np.concatenate(held_vectors)), held, params,
                           "held-out own vectors")
            index.add(np.ascontiguousarray(np.concatenate(held_vectors)))
            ids_file.write(held_ids, np.concatenate(held_rows))
        ids_digest = ids_file.close()
        faiss.write_index(index, str(building / INDEX_FILE))
        manifest = write_manifest(building, encoder, corpus_record(corpus_path, output, shard_records, stats, progress),
                                  started, {
            "type": params.index_type, "factory": spec, "metric": "inner_product", "dim": dim,
            "count": int(index.ntotal), "hnsw_m": params.hnsw_m if "HNSW" in spec else None,
            "ef_construction": params.ef_construction if "HNSW" in spec else None, "trained_on": trained_on,
            "search_defaults": search_defaults(index, params, tuning), "tuning": tuning}, ids_digest, lexical_record)
        _move_into_place(building, output, overwrite)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return manifest


class IdMapWriter:
    """ids.parquet (FAISS row → id, doc-store row) written shard by shard, with the digest that
    ``integrity.ids_sha256`` gives for the whole map; only the doc-store rows (8 bytes each) are kept."""

    SCHEMA = pa.schema([("id", pa.string()), ("docstore_row", pa.int64())])

    def __init__(self, path: Path) -> None:
        self._writer = pq.ParquetWriter(path, self.SCHEMA)
        self._digest, self._rows, self._separator = hashlib.sha256(), [], ""

    def write(self, ids: list[str], rows: np.ndarray) -> None:
        if ids:
            self._digest.update((self._separator + "\n".join(ids)).encode("utf-8", "surrogatepass"))
            self._separator = "\n"
        self._rows.append(np.asarray(rows, dtype=np.int64))
        self._writer.write_table(pa.table({"id": pa.array(ids, pa.string()), "docstore_row": self._rows[-1]},
                                          schema=self.SCHEMA))

    def close(self) -> str:
        """Finish the file; the id map's digest."""
        self._writer.close()
        self._digest.update(np.concatenate(self._rows or [np.empty(0, np.int64)]).tobytes())
        return self._digest.hexdigest()


def check_document_count(stats: ReadStats, count: int, corpus_path: Path, shards_dir: Path) -> None:
    if stats.records != count:
        raise RetrieverError(f"{corpus_path}: holds {stats.records} documents but the shards in {shards_dir} hold "
                             f"{count}; re-encode this corpus or pass the corpus that was encoded")


def train(index: faiss.Index, shards: list[Path], count: int, params: IndexParams, spec: str) -> int | None:
    """Train on a sample read shard by shard; return the sample size (None if nothing to train)."""
    if index.is_trained:
        return None
    sample = sample_vectors(shards, count, params.train_size, params.seed)
    print(f"training {spec} on {len(sample)} sampled vectors", file=sys.stderr)
    try:
        index.train(sample)
    except RuntimeError as error:
        raise RetrieverError(f"FAISS could not train {spec!r} on {len(sample)} vectors: "
                             f"{str(error).splitlines()[-1]}; use fewer lists (--nlist) or a flat index") from None
    return len(sample)


def search_defaults(index: faiss.Index, params: IndexParams, tuning: dict | None) -> dict:
    defaults = {"nprobe": min(16, ivf_part(index).nlist) if ivf_part(index) is not None else None,
                "ef_search": 128 if downcast_hnsw(index) is not None else None, **params.search_defaults}
    if tuning is not None and tuning["parameter"]:
        defaults[tuning["parameter"]] = tuning["value"]
    return defaults


def corpus_record(corpus_path: Path, output: Path, shard_records: list[dict], stats: ReadStats,
                  progress: bool) -> dict:
    return {"name": "/".join(corpus_path.parts[-2:]), "path": relative_path(corpus_path, output),
            "sha256": file_sha256(corpus_path, "hash corpus" if progress else None),
            "passages_cut": sum(record.get("passages_cut", 0) for record in shard_records),
            "bytes": corpus_path.stat().st_size, "documents": stats.records, "empty_texts": stats.empty_texts}


def write_manifest(building: Path, encoder: dict, corpus: dict, started: float, index_record: dict,
                   ids_digest: str | None = None, lexical: dict | None = None) -> dict:
    """The manifest, with every file's size and SHA-256 (and the id map's digest, where there is one)."""
    integrity = {"files": file_records(building, MANIFEST_FILE), **({"ids_sha256": ids_digest} if ids_digest else {})}
    manifest = {
        "format_version": FORMAT_VERSION,
        "encoder": encoder,
        "corpus": corpus,
        "index": index_record,
        "lexical": lexical,
        "build_seconds": round(time.perf_counter() - started, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": library_versions(),
        "integrity": integrity,
    }
    write_json(building / MANIFEST_FILE, manifest)
    return manifest


def _check_tuning_queries(given: bool, params: IndexParams) -> None:
    if given and params.target_recall is None:
        raise RetrieverError("tuning queries were given without a target recall; add --target-recall")


def _move_into_place(building: Path, output: Path, overwrite: bool) -> None:
    if output.exists() and not overwrite:
        raise RetrieverError(f"{output}: appeared while building; not replaced")
    replace_folder(building, output)


def replace_manifest(index_dir: str | Path, manifest: dict) -> None:
    """Replace an index folder's manifest atomically (for steps that add to a built index)."""
    write_json(Path(index_dir) / MANIFEST_FILE, manifest)


def read_manifest(index_dir: str | Path) -> dict:
    index_dir = Path(index_dir)
    path = index_dir / MANIFEST_FILE
    if not path.is_file():
        raise RetrieverError(f"{index_dir}: not an index folder (no {MANIFEST_FILE}); build one with `retriever build`")
    return read_json_object(path, REBUILD)


def encode_for_index(corpus: str | Path, output: str | Path, encoder: Encoder | PartRunner,
                     params: IndexParams = IndexParams(), fmt: str = "auto", fields: Fields = Fields(),
                     shard_size: int = 10_000, overwrite: bool = False, progress: bool = True,
                     tuning_query_texts: list[str] | None = None) -> tuple[Path, np.ndarray | None]:
    """The encoding half of ``encode_and_index``: shards in OUTPUT.shards and the tuning queries' vectors.

    Split out so a caller can let the encoder go (e.g. Ray actors holding GPUs) before the index is built.
    """
    _check_tuning_queries(tuning_query_texts is not None, params)
    output = Path(output)
    if output.exists() and not overwrite:
        raise RetrieverError(f"{output}: already exists; pass --overwrite to replace it or choose another --output")
    shards = output.with_name(output.name + ".shards")
    if overwrite and clear_other_encoder(shards, encoder.metadata()):
        print(f"deleted {shards}: another encoder made those shards", file=sys.stderr)
    result = encode_corpus(corpus, shards, encoder, fmt, fields, shard_size, progress=progress)
    if progress:
        print(describe(result), file=sys.stderr)
    tuning_queries = None if tuning_query_texts is None else encoder.encode_queries(tuning_query_texts)
    return shards, tuning_queries


def encode_and_index(corpus: str | Path, output: str | Path, encoder: Encoder, params: IndexParams = IndexParams(),
                     fmt: str = "auto", fields: Fields = Fields(), shard_size: int = 10_000, overwrite: bool = False,
                     progress: bool = True, tuning_query_texts: list[str] | None = None,
                     lexical: LexicalParams | None = LexicalParams()) -> dict:
    """Encode then index; shards stay in OUTPUT.shards so another index type needs no re-encoding.

    Shards are reused only when made by this encoder from the same documents; with ``overwrite``, shards of
    another encoder are deleted first instead of refused.
    """
    shards, tuning_queries = encode_for_index(corpus, output, encoder, params, fmt, fields, shard_size, overwrite,
                                              progress, tuning_query_texts)
    return build_index(shards, corpus, output, params, fmt, fields, overwrite, progress, tuning_queries, lexical)
