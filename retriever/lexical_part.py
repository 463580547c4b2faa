"""Adding or replacing the BM25 part of an existing index folder (`retriever bm25`), from its doc store.

The manifest write is the one commit point: the new part is built under a folder name of its own, the
manifest is switched to it, and only then is the old part deleted. A run killed at any moment leaves the
old part and its record, or the new part and its record (replacing ``bm25/`` in place and then writing
the manifest left, for a kill in between, new files under the old record: searched silently with the
old settings). Part folders a killed run left unrecorded are deleted by the next run.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path

from retriever.errors import RetrieverError
from retriever.files import left_by_dead_processes
from retriever.folders import exclusive_build, named_output, temporary_folder
from retriever.integrity import check_folder, damaged, file_sha256, reading, recorded_files
from retriever.lexical import LEXICAL_DIR, LexicalParams, build_lexical

_PART_NAME = re.compile(rf"^{LEXICAL_DIR}(-[0-9a-f]{{8}})?$")


def add_lexical(index_dir: str | Path, params: LexicalParams = LexicalParams(), overwrite: bool = False,
                progress: bool = True) -> dict:
    """Add a BM25 part to an existing index folder from its doc store (no re-encoding); return the record.
    It holds the lock a build of that folder holds: two runs at once each deleted the other's uncommitted part as
    unrecorded (an OSError traceback, or a manifest naming a deleted part) and left an orphan part behind."""
    index_dir = Path(index_dir)
    with exclusive_build(named_output(index_dir), elsewhere=""):  # `bm25 INDEX` has no --output
        return _add_lexical(index_dir, params, overwrite, progress)


def _add_lexical(index_dir: Path, params: LexicalParams, overwrite: bool, progress: bool) -> dict:
    from retriever.index_folder import read_manifest, replace_manifest

    manifest = read_manifest(index_dir)
    if manifest.get("lexical") and not overwrite:
        raise RetrieverError(f"{index_dir}: already has a BM25 index; pass --overwrite to rebuild it")
    params.check()
    docstore = _checked_docstore(index_dir, manifest)
    recorded = (manifest.get("lexical") or {}).get("directory")
    _remove_unrecorded_parts(index_dir, recorded)
    final = index_dir / (LEXICAL_DIR if recorded != LEXICAL_DIR else f"{LEXICAL_DIR}-{secrets.token_hex(4)}")
    building = temporary_folder(final)
    try:
        with reading(docstore):
            record = build_lexical(docstore, building, params, progress)
        os.replace(building, final)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    record = {**record, "directory": final.name}
    replace_manifest(index_dir, {**manifest, "lexical": record})  # the commit point
    if recorded and recorded != final.name:
        shutil.rmtree(index_dir / recorded, ignore_errors=True)
    return record


def _remove_unrecorded_parts(index_dir: Path, recorded: str | None) -> None:
    """BM25 part folders the manifest does not name, and hidden ones of dead builds: what killed runs left."""
    for path in index_dir.iterdir():
        if path.is_dir() and _PART_NAME.match(path.name) and path.name != recorded:
            shutil.rmtree(path, ignore_errors=True)
    for leftover in left_by_dead_processes(index_dir, f".{LEXICAL_DIR}", ".building-"):
        shutil.rmtree(leftover, ignore_errors=True)


def _checked_docstore(index_dir: Path, manifest: dict) -> Path:
    """The doc store BM25 is built from, after the checks opening the folder makes (files present at their
    recorded sizes) and a hash against the manifest: BM25 rows must be the rows of the index's own doc store.
    The BM25 part itself is left out, since it is what gets rebuilt."""
    from retriever.index_folder import MANIFEST_FILE
    from retriever.searching import docstore_file, required_files

    dense = {**manifest, "lexical": None}
    check_folder(index_dir, dense, MANIFEST_FILE, required_files(manifest))
    docstore = docstore_file(index_dir, manifest)
    recorded = recorded_files(dense).get(docstore.name)
    if recorded and file_sha256(docstore) != recorded.get("sha256"):
        raise damaged(docstore, "its content is not the one the index was built with (replaced or corrupted)")
    return docstore
