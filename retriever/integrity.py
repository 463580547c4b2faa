"""An index folder checks itself when opened.

The manifest records each file's size and SHA-256 (the BM25 part's files in its own ``lexical`` record, so
adding or rebuilding that part replaces them with it) and a digest of the id map. Opening checks
what is cheap (required keys, every recorded file present at its recorded size, counts that
agree across the manifest, FAISS, the id map and the doc store, the id-map digest);
``retriever info --verify`` also re-hashes every file. Any damage is one error that names the
file and says to rebuild.
"""
from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm import tqdm

from retriever.errors import (IndexDamaged, RetrieverError, error_line, full_disk, is_out_of_memory,
                              out_of_memory)
from retriever.wording import counted

BUILT_BY = ("build", "index")  # the commands that make an index folder, as the manifest's ``built_by`` names them
_REBUILD_WITH = "the index folder is damaged; rebuild it with `retriever {} ... --overwrite`"
REBUILD = _REBUILD_WITH.format("build")


def rebuild_advice(manifest: dict | None) -> str:
    """How to rebuild a damaged folder: with the command its manifest says built it (`index` rebuilds from the
    shards, with no model), else ``REBUILD``."""
    return _REBUILD_WITH.format(rebuild_command(manifest))


def rebuild_command(manifest: dict | None) -> str:
    """The command that built the folder, as its manifest says (`build` where it does not: built before it said)."""
    built_by = manifest.get("built_by") if isinstance(manifest, dict) else None
    return built_by if built_by in BUILT_BY else "build"


def damaged(path: Path, problem: str, manifest: dict | None = None) -> IndexDamaged:
    return IndexDamaged(f"{path}: {problem}; {rebuild_advice(manifest)}")


def file_sha256(path: Path, progress: str | None = None, read: Callable[[int], object] | None = None) -> str:
    """SHA-256 of a file; ``progress`` names a progress bar with a total, for files that take minutes; ``read`` is
    told each block's size (a bar over several files)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle, tqdm(total=path.stat().st_size, desc=progress, unit="B", unit_scale=True,
                                          file=sys.stderr, disable=progress is None) as bar:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            bar.update(len(block))
            if read is not None:
                read(len(block))
    return digest.hexdigest()


# Hashes of inputs this process may hash twice, by the file's identity when hashed (``remembered_sha256``)
_REMEMBERED: dict[tuple, str] = {}
_REMEMBERED_MAX = 16
# A file modified this recently when hashed is not remembered: a second write within the same tick of the file
# system's clock would leave its identity as it was
_SETTLED_NS = 2_000_000_000


def remembered_sha256(path: Path, progress: str | None = None) -> str:
    """``file_sha256`` of an input this process may hash again, read once while it stays the same file (device,
    inode, size, modification and change times): `build --tune-fusion-on` hashed its corpus for the manifest, and its
    tuning read the whole file again to tell whether it is the index's corpus. Not for checking a folder's own files:
    a check re-reads them, since damage on disk leaves their times as they were."""
    before = _identity(path)
    if before in _REMEMBERED:
        return _REMEMBERED[before]
    digest = file_sha256(path, progress)
    if _identity(path) == before and time.time_ns() - before[3] > _SETTLED_NS:
        if len(_REMEMBERED) >= _REMEMBERED_MAX:
            _REMEMBERED.pop(next(iter(_REMEMBERED)))
        _REMEMBERED[before] = digest
    return digest


def _identity(path: Path) -> tuple:
    status = path.stat()
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def file_records(folder: Path, skip: str | None = None) -> dict[str, dict]:
    """Size and SHA-256 of every file in a freshly built folder, for the manifest."""
    return {path.name: {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
            for path in sorted(folder.iterdir()) if path.is_file() and path.name != skip}


def ids_sha256(ids: list[str], docstore_rows: np.ndarray) -> str:
    """Digest of the id map in row order: catches rows that were reordered, not only changed."""
    digest = hashlib.sha256("\n".join(ids).encode("utf-8", "surrogatepass"))
    digest.update(np.ascontiguousarray(docstore_rows, dtype=np.int64).tobytes())
    return digest.hexdigest()


def recorded_files(manifest: dict) -> dict[str, dict]:
    """Size and SHA-256 of every recorded file by its path in the folder: the dense parts' and the BM25 part's."""
    files = dict(manifest.get("integrity", {}).get("files") or {})
    lexical = manifest.get("lexical") or {}
    files.update({f"{lexical.get('directory', 'bm25')}/{name}": record
                  for name, record in (lexical.get("files") or {}).items()})
    return files


def dense_part(manifest: dict) -> dict:
    """The manifest without its BM25 part: what dense search and a rebuild of that part check."""
    return {**manifest, "lexical": None}


def file_damage(folder: Path, manifest: dict, name: str, problem: str) -> IndexDamaged:
    """The damage error for one recorded file; a BM25 file is rebuilt alone, without re-encoding."""
    lexical_dir = (manifest.get("lexical") or {}).get("directory", "bm25")
    if name.startswith(f"{lexical_dir}/"):
        return IndexDamaged(f"{folder / name}: {problem}; the BM25 part is damaged; rebuild it with "
                              f"`retriever bm25 {folder} --overwrite` (no re-encoding)")
    return damaged(folder / name, problem, manifest)


def check_folder(folder: Path, manifest: dict, manifest_name: str, required: tuple[str, ...]) -> None:
    """Cheap checks before anything is loaded: manifest keys, files present, sizes as recorded."""
    for key, inner in (("encoder", ("model", "dim")), ("index", ("count",))):
        section = manifest.get(key)
        missing = [name for name in inner if not isinstance(section, dict) or name not in section]
        if missing:
            raise damaged(folder / manifest_name, f"the manifest lacks {key}.{missing[0]}", manifest)
    check_files(folder, manifest, (*required, *recorded_files(manifest)))


def check_files(folder: Path, manifest: dict, names: Iterable[str]) -> None:
    """Each named file present, at the size the manifest records for it (where it records one)."""
    recorded = recorded_files(manifest)
    for name in dict.fromkeys(names):
        path = folder / name
        if not path.is_file():
            raise file_damage(folder, manifest, name, absence(path))
        if name in recorded and path.stat().st_size != recorded[name]["bytes"]:
            raise file_damage(folder, manifest, name, f"{path.stat().st_size} bytes where the manifest records "
                                                      f"{recorded[name]['bytes']} (truncated or replaced)")


def absence(path: Path) -> str:
    """What stands where one of the folder's files should be, for its damage error: a directory there was called
    missing."""
    if path.is_dir():
        return "a directory where a file should be"
    return "not a regular file" if path.exists() else "missing"


@contextmanager
def reading(path: Path, damage: Callable[[Path, str], RetrieverError] = damaged) -> Iterator[None]:
    """Turn any failure to read one of the folder's files into the damage error naming it (``damage``: the BM25
    part's says how to rebuild that part alone), but for memory running out and a file the user may not read:
    under `ulimit -v` an ivf-ondisk index's mapped lists were called damaged, and so was a folder of another
    user's files; a rebuild would fail alike, or replace an index that is fine."""
    try:
        yield
    except RetrieverError:
        raise
    except Exception as error:  # FAISS, Arrow and the OS each raise their own types for a broken file
        if full_disk(error) is not None:  # met writing what is built from the file, not damage to it
            raise
        first_line = error_line(error)
        if is_out_of_memory(error):
            raise out_of_memory(f"opening {path} ({first_line}; the file is not damaged)") from None
        if isinstance(error, PermissionError) or "Permission denied" in str(error):  # FAISS's is a RuntimeError
            raise RetrieverError(f"{path}: this user may not read it ({first_line}); the file is not damaged: "
                                 "give the user read access to the index folder's files") from None
        raise damage(path, f"cannot be read ({first_line})") from None


def check_counts(folder: Path, manifest: dict, counts: dict[str, int], ids_name: str, ids_digest: str) -> None:
    """The manifest's count, FAISS's ntotal, the id map's and the doc store's rows (``counts``, by file name)
    must agree, and the id map must be the one the index was built with."""
    expected = int(manifest["index"]["count"])
    for name, count in counts.items():
        if count != expected:
            raise damaged(folder / name, f"holds {counted(count, 'entry')} where the manifest records {expected}", manifest)
    recorded = manifest.get("integrity", {}).get("ids_sha256")
    if recorded is not None and recorded != ids_digest:
        raise damaged(folder / ids_name,
                      "its rows differ from the ones the index was built with (reordered or replaced)", manifest)


def verify_files(folder: Path, manifest: dict, progress: bool = True) -> list[str]:
    """Re-hash every recorded file, under one progress bar over their bytes (a large index's take minutes); the
    names of those that differ (empty when all match)."""
    if not manifest.get("integrity", {}).get("files"):
        raise RetrieverError(f"{folder}: the manifest records no file hashes (built by an older version); "
                             "rebuild it to get them")
    present = {name: record for name, record in recorded_files(manifest).items() if (folder / name).is_file()}
    with tqdm(total=sum((folder / name).stat().st_size for name in present), desc="verify", unit="B",
              unit_scale=True, file=sys.stderr, disable=not progress) as bar:
        return [name for name, record in recorded_files(manifest).items()
                if name not in present or file_sha256(folder / name, read=bar.update) != record["sha256"]]
