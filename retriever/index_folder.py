"""The index folder's files: their names, the id map, and the manifest that records and checks them."""
from __future__ import annotations

import hashlib
import platform
import time
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from retriever.corpus import ReadStats
from retriever.encoder_settings import RECORD_KINDS, RECORDED_DTYPES, unknown_setting_problem
from retriever.errors import RetrieverError
from retriever.files import read_json_object, write_json
from retriever.folder_kinds import not_an_index
from retriever.integrity import REBUILD, file_records, rebuild_advice, rebuild_command, remembered_sha256
from retriever.recorded_paths import relative_path
from retriever.wording import counted

INDEX_FILE = "index.faiss"
IDS_FILE = "ids.parquet"
DOCSTORE_FILE = "docstore.parquet"
MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1


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
    """Refuse a corpus holding another number of documents than the shards encoded from it."""
    if stats.records != count:
        raise RetrieverError(f"{corpus_path}: holds {counted(stats.records, 'document')} but the shards in "
                             f"{shards_dir} hold {count}; re-encode this corpus or pass the corpus that was encoded")


def corpus_record(corpus_path: Path, output: Path, shard_records: list[dict], stats: ReadStats,
                  progress: bool) -> dict:
    """The manifest's record of the corpus: where it is (relative to the index), its SHA-256 and counts."""
    return {"name": "/".join(corpus_path.parts[-2:]), "path": relative_path(corpus_path, output),
            "sha256": remembered_sha256(corpus_path, "hash corpus" if progress else None),
            "passages_cut": sum(record.get("passages_cut", 0) for record in shard_records),
            "bytes": corpus_path.stat().st_size, "documents": stats.records, "empty_texts": stats.empty_texts}


def library_versions() -> dict:
    """The versions a manifest records, to tell which build made an index."""
    import torch
    import transformers

    from retriever import __version__

    return {"retriever": __version__, "python": platform.python_version(), "faiss": faiss.__version__,
            "torch": torch.__version__, "transformers": transformers.__version__, "pyarrow": pa.__version__,
            "numpy": np.__version__}


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


def replace_manifest(index_dir: str | Path, manifest: dict) -> None:
    """Replace an index folder's manifest atomically (for steps that add to a built index)."""
    write_json(Path(index_dir) / MANIFEST_FILE, manifest)


def manifest_bytes(index_dir: Path) -> bytes | None:
    """The manifest as it is now (None if absent): a Searcher compares it before and after opening a folder."""
    try:
        return (index_dir / MANIFEST_FILE).read_bytes()
    except OSError:
        return None


def manifest_changes(index_dir: Path, before: bytes | None, within: float = 0.25) -> bool:
    """Whether the manifest changes from ``before`` within ``within`` seconds: a failed open is then a build
    replacing the folder (``bm25 --overwrite`` deletes the old BM25 part just after the manifest names the new), not
    damage."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if manifest_bytes(index_dir) != before:
            return True
        time.sleep(0.05)
    return manifest_bytes(index_dir) != before


def read_manifest(index_dir: str | Path) -> dict:
    """The manifest of an index folder, its entries' types checked (``check_manifest_shape``)."""
    index_dir = Path(index_dir)
    path = index_dir / MANIFEST_FILE
    if not path.is_file():
        raise not_an_index(index_dir, MANIFEST_FILE)
    manifest = read_json_object(path, REBUILD)
    check_manifest_shape(manifest, path)
    return manifest


_NONE = type(None)
# The type of every manifest entry the code reads, where it is present, so a hand-edited or damaged manifest
# fails here in one line rather than as an AttributeError deep in a command.
MANIFEST_SHAPE: dict[str, type | tuple[type, ...]] = {
    "format_version": int, "encoder": dict, "corpus": dict, "index": dict, "integrity": dict,
    "index.count": int, "index.dim": int, "index.type": str, "index.factory": str,
    "index.search_defaults": (dict, _NONE), "index.tuning": (dict, _NONE), "integrity.files": dict,
    "integrity.ids_sha256": str, "corpus.documents": int,
    "index.search_defaults.nprobe": (int, _NONE), "index.search_defaults.ef_search": (int, _NONE),
    **{f"encoder.{name}": kind for name, kind in RECORD_KINDS.items()},
}
# The hybrid fusion's record, checked only by what reads it (``fusion.recorded_fusion``): a broken entry there fails
# hybrid search alone, and retuning replaces it or `retriever bm25 INDEX --drop-fusion` drops it.
FUSION_SHAPE: dict[str, type | tuple[type, ...]] = {
    "fusion": (dict, _NONE), "fusion.method": str, "fusion.rrf_k": (int, float), "fusion.alpha": (int, float),
    "fusion.depth": int, "fusion.tuned": (dict, _NONE),
}
# The BM25 part's record, checked only by what reads that part (``lexical_opening``): a broken entry there fails
# bm25 and hybrid search alone, and `retriever bm25 INDEX --overwrite` replaces the record whole.
LEXICAL_SHAPE: dict[str, type | tuple[type, ...]] = {
    "lexical": (dict, _NONE), "lexical.files": dict, "lexical.documents": int, "lexical.directory": str,
    "lexical.stemmer": (str, _NONE), "lexical.stopwords": (str, _NONE), "lexical.tokenizer": dict,
    "lexical.docstore": dict, "lexical.docstore.file": str, "lexical.docstore.sha256": str,
}
_FILE_RECORD = {"bytes": int, "sha256": str}
SEARCH_SETTINGS = ("nprobe", "ef_search")  # what `index.search_defaults` records, null when it has none
SEARCH_SETTING_RANGE = (1, 2**31 - 1)  # what FAISS's nprobe and efSearch take


def _entry(manifest: dict, key: str) -> tuple[bool, object]:
    """(present, value) of a dotted key such as ``index.search_defaults.nprobe``."""
    holder: object = manifest
    for name in key.split("."):
        if not isinstance(holder, dict) or name not in holder:
            return False, None
        holder = holder[name]
    return True, holder


def _inside_folder(name: str) -> bool:
    """A path that stays in the index folder: relative, without '..' (a manifest never names files elsewhere)."""
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


def check_manifest_shape(manifest: dict, path: Path) -> None:
    """Refuse entries of the wrong type (``MANIFEST_SHAPE``, the encoder record's included) or range, file records
    without their size and hash, paths that lead out of the index folder, and an encoder setting a hand edit added. The BM25 part's record is left to ``lexical_shape_problem``."""
    problem = _shape_problem(manifest, MANIFEST_SHAPE) or _files_problem(manifest, "integrity")
    lowest, highest = SEARCH_SETTING_RANGE
    for setting in SEARCH_SETTINGS:
        value = _entry(manifest, f"index.search_defaults.{setting}")[1]
        if problem is None and isinstance(value, int) and not lowest <= value <= highest:
            problem = _wrong(f"index.search_defaults.{setting}", value, "an integer from 1 to 2**31 - 1")
    if problem is not None or (problem := _encoder_problem(manifest)) is not None:
        raise RetrieverError(f"{path}: {problem}; {rebuild_advice(manifest)}")
    _check_format_version(manifest, path)
    if hand_edit := unknown_setting_problem(manifest.get("encoder", {}), _entry(manifest, "versions.retriever")[1],
                                            hand_edits_only=True):
        raise RetrieverError(f"{path}: {hand_edit}")


def _encoder_problem(manifest: dict) -> str | None:
    """An encoder precision no encoder computes in, or a dimension that is not the index's (``dim`` was shown by
    `info` and `serve` as recorded, ``"32"`` or 64 for a 32-dimension index)."""
    dtype, dim, index_dim = (_entry(manifest, key)[1] for key in ("encoder.dtype", "encoder.dim", "index.dim"))
    if isinstance(dtype, str) and dtype not in RECORDED_DTYPES:
        return _wrong("encoder.dtype", dtype, f"one of {', '.join(RECORDED_DTYPES)}")
    if isinstance(dim, int) and isinstance(index_dim, int) and dim != index_dim:
        return _wrong("encoder.dim", dim, f"index.dim {index_dim}, the vectors' dimension")
    return None


def lexical_shape_problem(manifest: dict) -> str | None:
    """What is wrong with the shape of the manifest's BM25 record (``LEXICAL_SHAPE``, its files' records, a
    directory that is no folder name inside the index folder), or None."""
    problem = _shape_problem(manifest, LEXICAL_SHAPE)
    directory = _entry(manifest, "lexical.directory")[1]
    if problem is None and isinstance(directory, str) and not is_part_folder_name(directory):
        problem = _wrong("lexical.directory", directory, "the name of a folder inside the index folder")
    return problem or _files_problem(manifest, "lexical")


def fusion_shape_problem(manifest: dict) -> str | None:
    """What is wrong with the types of the manifest's hybrid fusion record (``FUSION_SHAPE``), or None."""
    return _shape_problem(manifest, FUSION_SHAPE)


def is_part_folder_name(name: object) -> bool:
    """A name of one folder directly inside the index folder (what ``lexical.directory`` must be)."""
    return isinstance(name, str) and _inside_folder(name) and len(Path(name).parts) == 1


def _wrong(key: str, value: object, expected: str) -> str:
    return f"{key} is {type(value).__name__} {str(value)[:40]!r}, not {expected}"


def _shape_problem(manifest: dict, shape: dict[str, type | tuple[type, ...]]) -> str | None:
    for key, expected in shape.items():
        present, value = _entry(manifest, key)
        if present and (not isinstance(value, expected) or (int in _kinds(expected) and isinstance(value, bool))):
            return _wrong(key, value, " or ".join("null" if k is _NONE else k.__name__ for k in _kinds(expected)))
    return None


def _files_problem(manifest: dict, part: str) -> str | None:
    """A file record of ``part`` without its size and hash, or naming a path outside the index folder."""
    for name, record in ((manifest.get(part) or {}).get("files") or {}).items():
        if not _inside_folder(name):
            return _wrong(f"{part}.files key", name, "a path inside the index folder")
        for field, kind in _FILE_RECORD.items():
            if not isinstance(record, dict) or not isinstance(record.get(field), kind):
                return _wrong(f"{part}.files[{name!r}].{field}",
                              record.get(field) if isinstance(record, dict) else record, kind.__name__)
    return None


def _check_format_version(manifest: dict, path: Path) -> None:
    """Refuse a folder of another layout (a newer retriever's) rather than read its entries as this one's: the
    version was written from the start and never read, so such a folder was searched as if it were format 1."""
    version = manifest.get("format_version", FORMAT_VERSION)  # hand-made manifests (tests) may leave it out
    if version != FORMAT_VERSION:
        from retriever import __version__

        built_by = _entry(manifest, "versions.retriever")[1]
        raise RetrieverError(f"{path}: format_version is {version}, and retriever {__version__} reads format "
                             f"{FORMAT_VERSION} only; open it with the retriever that built it"
                             + (f" ({built_by})" if isinstance(built_by, str) else "")
                             + f" or rebuild it with `retriever {rebuild_command(manifest)} ... --overwrite`")


def _kinds(expected: type | tuple[type, ...]) -> tuple[type, ...]:
    return expected if isinstance(expected, tuple) else (expected,)
