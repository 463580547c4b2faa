"""Embedding shards + corpus → an index folder: FAISS index, id map, doc store and manifest.

The folder is assembled under a hidden temporary name and renamed into place at the end, so
an interrupted build leaves nothing that looks like an index. Which index to build is
``faiss_index``'s policy, the folder's files ``index_folder``'s, the tuning ``tuning``'s, the
encoding of the corpus first (``encode_and_index``) ``index_encoding``'s.
"""
from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from retriever.corpus import Document, Fields, ReadStats, check_rereadable, iter_documents, resolve_corpus_path
from retriever.docstore import MAPPED_DOCSTORE_FILE, write_parquet_docstore
from retriever.encoder import Encoder
from retriever.errors import (CORPUS_PATH, INDEX_PATH, RetrieverError, check_kind, faiss_message, full_disk_named,
                              given_path)
from retriever.build_output import check_output, move_into_place, refuse_inputs_inside, shards_to_index
from retriever.faiss_index import (INDEX_TYPES, IndexParams, factory_string, hnsw_record, new_index, search_defaults,
                                   train, with_search_defaults)
from retriever.index_checks import check_buildable, check_trainable
from retriever.index_encoding import check_tuning_queries, encode_for_index
from retriever.index_memory import check_index_memory
from retriever.folders import exclusive_build, fresh_building_folder, named_output
from retriever.index_folder import (DOCSTORE_FILE, IDS_FILE, INDEX_FILE, MANIFEST_FILE, IdMapWriter,
                                    check_document_count, corpus_record, read_manifest, replace_manifest,
                                    write_manifest)
from retriever.lexical import LEXICAL_DIR, LexicalParams, build_lexical
from retriever.ondisk import ONDISK_TYPE, PartPlan, build_ondisk
from retriever.partwork import clear_finished, mark_finished, parts_folder
from retriever.recorded_paths import locate, rebase_model_record
from retriever.shard_origin import READING, ShardContentCheck, check_reading, reading_record
from retriever.shards import iter_shard_batches, read_shard_metadata
from retriever.tuning import check_held_out, held_out_rows, tune_build

__all__ = ["DOCSTORE_FILE", "IDS_FILE", "INDEX_FILE", "INDEX_TYPES", "MANIFEST_FILE", "IndexParams", "build_index",
           "encode_and_index", "encode_for_index", "read_manifest"]


def build_index(shards_dir: str | Path, corpus: str | Path, output: str | Path, params: IndexParams = IndexParams(),
                fmt: str = "auto", fields: Fields = Fields(), overwrite: bool = False,
                progress: bool = True, tuning_queries: np.ndarray | None = None,
                lexical: LexicalParams | None = LexicalParams(), built_by: str = "index") -> dict:
    """Build an index folder from complete shards and the corpus they came from; return its manifest, which names
    the command that rebuilds it (``built_by``: `index`, or `build` when it encoded the shards too).

    ``lexical``: BM25 settings for the index's ``bm25/`` part (built from the doc store just written), or
    None for a dense-only index.

    ``tuning_queries``: query vectors to tune ``params.target_recall`` on instead of held-out passages, for
    when real queries are at hand (they can be harder than passages: see benchmarks/README.md).
    """
    shards_dir = given_path(shards_dir, "shards_dir", "the shard folder's path (str or Path)")
    corpus, output = given_path(corpus, "corpus", CORPUS_PATH), given_path(output, "output", INDEX_PATH)
    check_rereadable(corpus)
    named = named_output(output)
    with exclusive_build(named), full_disk_named(named):  # a library's full disk names the output, not its temporary
        return _build_index(shards_dir, corpus, output, params, fmt, fields, overwrite, progress,
                            tuning_queries, lexical, built_by)


def _build_index(shards_dir: Path, corpus: str | Path, output: Path, params: IndexParams, fmt: str, fields: Fields,
                 overwrite: bool, progress: bool, tuning_queries: np.ndarray | None, lexical: LexicalParams | None,
                 built_by: str) -> dict:
    started = time.perf_counter()
    check_tuning_queries(tuning_queries is not None, params)
    ondisk = params.index_type == ONDISK_TYPE
    shards_dir, output = Path(shards_dir), check_output(Path(output), overwrite, ondisk)
    if lexical is not None:
        lexical.check()
    corpus_path = resolve_corpus_path(corpus)
    shards, encoder = shards_to_index(shards_dir)
    refuse_inputs_inside(output, {"the corpus": corpus, "the shards": shards_dir,
                                  "the model": locate(encoder.get("model_path"), shards_dir)})
    check_reading(shards_dir, encoder.get(READING), reading_record(corpus_path, fmt, fields),
                  "encode them again with the new flags (`retriever build --overwrite`, or `encode` to a new folder)",
                  corpus_path)
    encoder = rebase_model_record({k: v for k, v in encoder.items() if k not in ("shard", "corpus", READING)},
                                  shards_dir, output)
    shard_records = [read_shard_metadata(s)["shard"] for s in shards]
    count = sum(record["rows"] for record in shard_records)
    tuning_queries = tuning_vectors(tuning_queries, int(encoder["dim"]))
    check_buildable(params, int(encoder["dim"]))
    check_trainable(params, int(encoder["dim"]), count, f"the shards in {shards_dir} hold")
    if tuning_queries is None:
        check_held_out(count, params, f"the shards in {shards_dir} hold")
    if not ondisk:  # made once: its memory checked here, then filled
        spec = factory_string(params, int(encoder["dim"]), count)
        empty = new_index(spec, int(encoder["dim"]), params)
        check_index_memory(empty, count, spec)
    building = fresh_building_folder(output)
    try:
        corpus_of = lambda stats: corpus_record(corpus_path, output, shard_records, stats, progress)  # noqa: E731
        inputs = (shards, encoder, count, int(encoder["dim"]), corpus_path, fmt, fields, building, params, progress,
                  tuning_queries, started, corpus_of)
        manifest = (build_ondisk(*inputs, parts_folder(output)) if ondisk
                    else _build_in_memory(*inputs, lexical, (spec, empty)))
        manifest = {**manifest, "built_by": built_by}
        replace_manifest(building, manifest)
        if ondisk and lexical is not None:
            manifest = _add_ondisk_lexical(building, manifest, lexical, progress)
        if ondisk:
            mark_finished(parts_folder(output), building / MANIFEST_FILE)
        move_into_place(building, output, overwrite)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    # the parts were kept until now so that a crash at any point before resumes from them; after it, the next
    # build of this output deletes them (see _check_output)
    clear_finished(parts_folder(output), output / MANIFEST_FILE)
    return manifest


def _add_ondisk_lexical(building: Path, manifest: dict, lexical: LexicalParams, progress: bool) -> dict:
    """The on-disk type's BM25 part, from its mapped Arrow doc store (BM25 rows are its rows, as FAISS labels are),
    named by the hash the manifest already records for it (not hashed again)."""
    docstore_sha256 = manifest["integrity"]["files"][MAPPED_DOCSTORE_FILE]["sha256"]
    manifest = {**manifest, "lexical": build_lexical(building / MAPPED_DOCSTORE_FILE, building / LEXICAL_DIR, lexical,
                                                     progress, docstore_sha256)}
    replace_manifest(building, manifest)
    return manifest


def _build_in_memory(shards: list[Path], encoder: dict, count: int, dim: int, corpus_path: Path, fmt: str,
                     fields: Fields, building: Path, params: IndexParams, progress: bool,
                     tuning_queries: np.ndarray | None, started: float, corpus_of,
                     lexical: LexicalParams | None, empty: tuple[str, faiss.Index]) -> dict:
    """Fill ``building`` with a flat/HNSW/IVF index folder (``build_ondisk``'s arguments, and the empty index with
    its factory string); return its manifest."""
    stats, content = ReadStats(), ShardContentCheck(shards)
    with tqdm(total=count, desc="doc store", unit="doc", file=sys.stderr, disable=not progress) as bar:
        write_parquet_docstore(_checked(iter_documents(corpus_path, fmt, fields, stats), content, bar.update),
                               building / DOCSTORE_FILE)
    check_document_count(stats, count, corpus_path, shards[0].parent)
    content.check(corpus_path)
    lexical_record = (build_lexical(building / DOCSTORE_FILE, building / LEXICAL_DIR, lexical, progress)
                      if lexical is not None else None)
    spec, index = empty
    trained_on = train(index, shards, count, params, spec, progress)
    held = held_out_rows(count, params) if tuning_queries is None else np.empty(0, dtype=np.int64)
    ids_file = IdMapWriter(building / IDS_FILE)
    held_ids, held_rows, held_vectors = _add_shards(index, shards, held, count, ids_file, spec, progress)
    tuning = tune_build(index, shards, tuning_queries, held_vectors, held, params, progress=progress)
    if len(held):
        _add(index, held_vectors, spec)
        ids_file.write(held_ids, held_rows)
    ids_digest = ids_file.close()
    defaults = search_defaults(index, params, tuning)
    faiss.write_index(with_search_defaults(index, defaults), str(building / INDEX_FILE))
    return write_manifest(building, encoder, corpus_of(stats), started, {
        "type": params.index_type, "factory": spec, "metric": "inner_product", "dim": dim,
        "count": int(index.ntotal), **hnsw_record(index), "trained_on": trained_on,
        "search_defaults": defaults, "tuning": tuning}, ids_digest, lexical_record)


def _checked(documents: Iterator[Document], content: ShardContentCheck, progress) -> Iterator[Document]:
    """The documents, each hashed into ``content`` and counted by ``progress`` on the way to the doc store."""
    for document in documents:
        content.add(document)
        progress()
        yield document


def _add_shards(index: faiss.Index, shards: list[Path], held: np.ndarray, count: int, ids_file: IdMapWriter,
                spec: str, progress: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Add every shard row but the held-out ones, writing the id map as it goes; the held-out (ids, doc-store
    rows, vectors). The content check proved each shard row's corpus position, so ids and doc-store rows
    stream shard by shard; only the held-out sample waits in memory."""
    held_ids: list[str] = []
    held_rows: list[np.ndarray] = []
    held_vectors: list[np.ndarray] = []
    bar = tqdm(total=count, desc=f"index {spec}", unit="vec", file=sys.stderr, disable=not progress)
    for piece, (shard_ids, vectors) in zip(PartPlan(shards, held, count).slices, iter_shard_batches(shards)):
        rows = piece.first_label + piece.stride * np.arange(len(shard_ids), dtype=np.int64)
        keep = np.ones(len(vectors), dtype=bool)
        keep[list(piece.held)] = False
        _add(index, np.ascontiguousarray(vectors[keep]), spec)
        ids_file.write([i for i, kept in zip(shard_ids, keep) if kept], rows[keep])
        held_ids.extend(shard_ids[row] for row in piece.held)
        held_rows.append(rows[~keep])
        held_vectors.append(vectors[~keep])
        bar.update(len(shard_ids))
    bar.close()
    return held_ids, np.concatenate(held_rows), np.ascontiguousarray(np.concatenate(held_vectors))


def _add(index: faiss.Index, vectors: np.ndarray, spec: str) -> None:
    """``index.add``, with FAISS's refusal (a C++ exception's text) turned into one line."""
    try:
        index.add(vectors)
    except RuntimeError as error:
        raise RetrieverError(f"FAISS cannot add vectors to {spec!r}: {faiss_message(error)}; "
                             "use flat, hnsw, ivfpq or another FAISS factory string") from None


def tuning_vectors(queries, dim: int) -> np.ndarray | None:
    """The library's ``tuning_queries`` as float32 rows of the index's width, refused in one line before the corpus
    pass otherwise: the wrong width was a bare AssertionError from FAISS after the doc store was written, an empty
    array StopIteration, and NaN rows tuned on nothing."""
    if queries is None:
        return None
    try:
        vectors = np.asarray(queries, dtype=np.float32)
    except (TypeError, ValueError):
        raise RetrieverError("tuning_queries: not an array of numbers; give one query vector a row") from None
    if vectors.ndim != 2:
        raise RetrieverError(f"tuning_queries: an array of shape {vectors.shape}; give one query vector of {dim} "
                             "numbers a row")
    if len(vectors) == 0 or vectors.shape[1] != dim:
        raise RetrieverError(f"tuning_queries: {len(vectors)} rows of {vectors.shape[1]} numbers, where the index "
                             f"takes at least one row of {dim} (its vectors' width)")
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(bad):
        raise RetrieverError(f"tuning_queries: row {bad[0] + 1} holds NaN or an infinity; give finite query vectors")
    return np.ascontiguousarray(vectors)


def encode_and_index(corpus: str | Path, output: str | Path, encoder: Encoder, params: IndexParams = IndexParams(),
                     fmt: str = "auto", fields: Fields = Fields(), shard_size: int = 10_000, overwrite: bool = False,
                     progress: bool = True, tuning_query_texts: list[str] | None = None,
                     lexical: LexicalParams | None = LexicalParams()) -> dict:
    """Encode then index; shards stay in OUTPUT.shards so another index type needs no re-encoding. Shards are
    reused only when made by this encoder from the same documents; with ``overwrite``, shards of another encoder
    are deleted first instead of refused."""
    check_kind(encoder, Encoder, "encoder", "Encoder, e.g. Encoder(EncoderSettings.for_model('minilm'))")
    check_kind(params, IndexParams, "params", "IndexParams, e.g. IndexParams('flat')")
    if lexical is not None:
        lexical.check()  # before the encoding, not after it
    shards, tuning_queries = encode_for_index(corpus, output, encoder, params, fmt, fields, shard_size, overwrite,
                                              progress, tuning_query_texts)
    return build_index(shards, corpus, output, params, fmt, fields, overwrite, progress, tuning_queries, lexical,
                       built_by="build")
