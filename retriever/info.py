"""What an index folder holds, read from its manifest, and a full check of its files."""
from __future__ import annotations

from pathlib import Path

import faiss
import pyarrow.parquet as pq

from retriever.indexing import DOCSTORE_FILE, IDS_FILE, INDEX_FILE, MANIFEST_FILE, read_manifest
from retriever.integrity import check_counts, check_folder, damaged, ids_sha256, reading, verify_files

REQUIRED_FILES = (INDEX_FILE, IDS_FILE, DOCSTORE_FILE)


def index_summary(index_dir: str | Path) -> dict:
    """The manifest's essentials plus the folder's size on disk; runs the cheap open checks first."""
    index_dir = Path(index_dir)
    manifest = read_manifest(index_dir)
    check_folder(index_dir, manifest, MANIFEST_FILE, REQUIRED_FILES)
    encoder, index, corpus = manifest["encoder"], manifest["index"], manifest.get("corpus", {})
    tuning = index.get("tuning") or {}
    return {
        "path": str(index_dir),
        "encoder": {key: encoder.get(key) for key in ("model", "pooling", "normalize", "dim", "dtype",
                                                       "query_max_length", "passage_max_length", "towers")},
        "documents": corpus.get("documents"),
        "vectors": index["count"],
        "index_type": index.get("type"),
        "factory": index.get("factory"),
        "search_defaults": index.get("search_defaults", {}),
        "tuning": {key: tuning.get(key) for key in ("parameter", "value", "measured_recall", "k", "reached",
                                                    "queries")} if tuning else None,
        "bytes_on_disk": sum(p.stat().st_size for p in index_dir.rglob("*") if p.is_file()),
        "created": manifest.get("created"),
        "retriever_version": manifest.get("versions", {}).get("retriever"),
        "integrity_recorded": bool(manifest.get("integrity", {}).get("files")),
    }


def verify_index(index_dir: str | Path) -> int:
    """Re-hash every file and re-count every part; the number of files checked, or an error naming the first
    damaged one."""
    index_dir = Path(index_dir)
    manifest = read_manifest(index_dir)
    check_folder(index_dir, manifest, MANIFEST_FILE, REQUIRED_FILES)
    differing = verify_files(index_dir, manifest)
    if differing:
        raise damaged(index_dir / differing[0], "its SHA-256 differs from the one the manifest records")
    with reading(index_dir / INDEX_FILE):
        ntotal = int(faiss.read_index(str(index_dir / INDEX_FILE)).ntotal)
    with reading(index_dir / IDS_FILE):
        table = pq.read_table(index_dir / IDS_FILE)
        ids, rows = table.column("id").to_pylist(), table.column("docstore_row").to_numpy()
    with reading(index_dir / DOCSTORE_FILE):
        documents = pq.read_metadata(index_dir / DOCSTORE_FILE).num_rows
    check_counts(index_dir, manifest, {INDEX_FILE: ntotal, IDS_FILE: len(ids), DOCSTORE_FILE: documents}, IDS_FILE,
                 ids_sha256(ids, rows))
    return len(manifest["integrity"]["files"])
