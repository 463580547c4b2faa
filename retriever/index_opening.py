"""Opening the dense part of an index folder: which files a folder of each index type holds, and its FAISS index
with its documents, counts checked against the manifest (search, `info --verify` and `retriever bm25` share it)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from retriever.docstore import ID_ORDER_FILE, MAPPED_DOCSTORE_FILE, MappedDocuments, ParquetDocuments
from retriever.errors import RetrieverError
from retriever.index_folder import (DOCSTORE_FILE, IDS_FILE, INDEX_FILE, MANIFEST_FILE, manifest_bytes,
                                    manifest_changes, read_manifest)
from retriever.integrity import (check_counts, check_folder, damaged, dense_part, file_sha256, ids_sha256, reading,
                                 recorded_files)
from retriever.ondisk import IVFDATA_FILE, ONDISK_TYPE, read_ondisk_index

REOPEN_ATTEMPTS = 3  # opens of a folder a build keeps replacing before giving up
T = TypeVar("T")


def opened_whole(index_dir: Path, read: Callable[[], T]) -> T:
    """What ``read`` returns, having read the folder of one build: the manifest is compared before and after it,
    and a change (or a failure followed by a change within a moment: ``manifest_changes``) means a build swapped a
    new version in meanwhile, so ``read`` runs again. Files of two versions paired failed as damage, telling the
    user to rebuild a healthy index. The manifest records every file's digest, so the same bytes mean the same
    files."""
    for _ in range(REOPEN_ATTEMPTS):
        before = manifest_bytes(index_dir)
        try:
            result = read()
        except RetrieverError:
            if not manifest_changes(index_dir, before):
                raise
            continue
        if manifest_bytes(index_dir) == before:
            return result
    raise RetrieverError(f"{index_dir}: the index kept being replaced while it was opened; try again once its build "
                         "has finished")


def required_files(manifest: dict) -> tuple[str, ...]:
    """The files an index folder of this manifest's type must hold (read before the manifest is checked)."""
    index = manifest.get("index")
    if isinstance(index, dict) and index.get("type") == ONDISK_TYPE:
        return INDEX_FILE, IVFDATA_FILE, MAPPED_DOCSTORE_FILE, ID_ORDER_FILE
    return INDEX_FILE, IDS_FILE, DOCSTORE_FILE


def checked_manifest(index_dir: Path) -> dict:
    """The manifest of an index folder whose dense part's files are all there at their recorded sizes: the cheap
    checks, before any model is loaded (``serve`` runs them on every folder before loading the first)."""
    manifest = read_manifest(index_dir)
    check_folder(index_dir, dense_part(manifest), MANIFEST_FILE, required_files(manifest))
    return manifest


def check_default_mode(index_dir: Path, manifest: dict, mode: str, fusion_overrides: dict | None = None) -> None:
    """Refuse a default ``mode`` the manifest and file sizes alone show the index cannot serve (no BM25 part, or
    one failing its cheap checks; for hybrid, a damaged fusion record the ``fusion_overrides`` do not stand in for,
    as ``recorded_fusion`` says), with ``Searcher.check_mode``'s messages,
    before any model loads: Searcher runs it first, and ``serve`` on every folder before loading the first."""
    from retriever.fusion import check_mode, recorded_fusion
    from retriever.lexical_opening import check_lexical_files, missing_lexical_message

    if check_mode(mode) != "dense" and check_lexical_files(index_dir, manifest) is None:
        raise RetrieverError(missing_lexical_message(index_dir))
    damage = recorded_fusion(index_dir, manifest, fusion_overrides)[1] if mode == "hybrid" else None
    if damage:
        raise damage


def check_servable(index_dir: Path, mode: str, fusion_overrides: dict | None = None) -> None:
    """The cheap checks and ``check_default_mode`` of one version of the folder (``opened_whole``): ``serve`` runs
    them on every folder before loading the first model."""
    opened_whole(index_dir, lambda: check_default_mode(index_dir, checked_manifest(index_dir), mode, fusion_overrides))


def docstore_file(index_dir: Path, manifest: dict) -> Path:
    """The doc store of an index folder of this manifest's type (BM25 is built from it)."""
    ondisk = manifest.get("index", {}).get("type") == ONDISK_TYPE
    return index_dir / (MAPPED_DOCSTORE_FILE if ondisk else DOCSTORE_FILE)


def open_index(index_dir: Path, manifest: dict) -> tuple[faiss.Index, MappedDocuments | ParquetDocuments]:
    """The FAISS index and its documents, counts checked against the manifest. An on-disk index and
    its doc store are memory-mapped, not read; the others' id map and doc store are read whole."""
    damage = functools.partial(damaged, manifest=manifest)  # names the command that built it
    if manifest["index"].get("type") == ONDISK_TYPE:
        with reading(index_dir / INDEX_FILE, damage):
            check_list_directory(index_dir, manifest)
            index = read_ondisk_index(index_dir / INDEX_FILE)
        with reading(index_dir / MAPPED_DOCSTORE_FILE, damage):
            documents = MappedDocuments(index_dir)
        counts = {INDEX_FILE: int(index.ntotal), MAPPED_DOCSTORE_FILE: len(documents),
                  ID_ORDER_FILE: documents.sorted_ids}
        check_counts(index_dir, manifest, counts, ID_ORDER_FILE, "")
        return index, documents
    with reading(index_dir / INDEX_FILE, damage):
        index = faiss.read_index(str(index_dir / INDEX_FILE))
    with reading(index_dir / IDS_FILE, damage):
        ids = read_parquet(index_dir / IDS_FILE)
    with reading(index_dir / DOCSTORE_FILE, damage):
        documents = ParquetDocuments(ids, read_parquet(index_dir / DOCSTORE_FILE, memory_map=True))
    check_counts(index_dir, manifest, {INDEX_FILE: int(index.ntotal), IDS_FILE: len(documents),
                                       DOCSTORE_FILE: documents.docstore_rows},
                 IDS_FILE, ids_sha256(documents.ids, documents.rows))
    return index, documents


def read_parquet(path: Path, columns: list[str] | None = None, memory_map: bool = False) -> pa.Table:
    """One Parquet file's table, as ``pq.read_table`` reads it, but through ``ParquetFile``: ``read_table`` goes
    through ``pyarrow.dataset``, whose import brings pandas, 0.75 s of CPU (of ~5) at the start of every search,
    evaluation, mining run or server, for a file that needs none of it."""
    return pq.ParquetFile(path, memory_map=memory_map).read(columns=columns)


def check_list_directory(index_dir: Path, manifest: dict) -> None:
    """Refuse an ivf-ondisk index.faiss other than the one the manifest records: it says where each list lies in
    index.ivfdata, so another build's of the same size (which the size check passes) reads the lists at the wrong
    places, and the first search's rows were called damage to index.ivfdata. It holds the centroids and where the
    lists lie, not the lists, so hashing it costs about what reading it does."""
    path, recorded = index_dir / INDEX_FILE, (recorded_files(manifest).get(INDEX_FILE) or {}).get("sha256")
    if recorded and file_sha256(path) != recorded:
        raise damaged(path, f"its SHA-256 differs from the one the manifest records (another build's {INDEX_FILE}, "
                            f"or damaged), so it would read {IVFDATA_FILE}'s lists at the wrong places", manifest)


def check_labels(labels: np.ndarray, index: faiss.Index, index_dir: Path, manifest: dict) -> None:
    """A healthy index returns each document row at most once per query, and only rows that exist: damage of the
    right size (not caught on open) shows in a search's ``labels`` instead of as an IndexError or the same hit k
    times."""
    found = np.sort(np.where(labels >= 0, labels, -1 - np.arange(labels.shape[1])), axis=1)
    if labels.size and (labels.max() >= index.ntotal or labels.min() < -1 or (found[:, 1:] == found[:, :-1]).any()):
        data = IVFDATA_FILE if manifest["index"]["type"] == ONDISK_TYPE else INDEX_FILE
        raise damaged(index_dir / data, "it returned document rows that do not exist, or one row twice for a query "
                                        "(`retriever info --verify` checks every file)", manifest)
