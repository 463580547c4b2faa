"""What an index folder holds, read from its manifest, and a full check of its files."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from retriever.encoder_settings import OVERRIDABLE, unknown_setting_problem
from retriever.errors import INDEX_PATH, IndexDamaged, RetrieverError, given_path
from retriever.factory_setting import factory_setting
from retriever.fusion import recorded_fusion
from retriever.index_folder import MANIFEST_FILE, SEARCH_SETTINGS, read_manifest
from retriever.index_opening import checked_manifest, open_index, opened_whole, required_files
from retriever.integrity import check_folder, file_damage, reading, recorded_files, verify_files
from retriever.lexical_opening import check_lexical_files, corpus_terms, lexical_record, open_lexical
from retriever.lexical import LEXICAL_DIR, splits_alike
from retriever.lexical_build import SORTED_VOCAB_FILE
from retriever.lexical_terms import differs_only_in_letters, splits_as_now, tokenizer_record


def index_summary(index_dir: str | Path) -> dict:
    """The manifest's essentials plus the folder's size on disk; runs the cheap open checks first. Damage to the
    BM25 part is reported in ``bm25.damage`` rather than raised: dense search of the folder still works."""
    index_dir = given_path(index_dir, "index_dir", INDEX_PATH)
    return opened_whole(index_dir, lambda: _summary(index_dir))


def _summary(index_dir: Path) -> dict:
    manifest = checked_manifest(index_dir)  # the encoder record's types, and settings a hand edit added
    encoder, index, corpus = manifest["encoder"], manifest["index"], manifest.get("corpus", {})
    if unknown := unknown_setting_problem(encoder, _entry(manifest, "versions").get("retriever")):
        raise RetrieverError(f"{index_dir / MANIFEST_FILE}: {unknown}")  # a newer retriever's: the summary omits it
    tuning = _entry(index, "tuning")
    return {
        "path": str(index_dir),
        "encoder": {key: encoder.get(key) for key in ("model", *OVERRIDABLE, "dim", "dtype")},
        "documents": corpus.get("documents"),
        "vectors": index["count"],
        "index_type": index.get("type"),
        "factory": index.get("factory"),
        "search_defaults": used_search_defaults({key: _entry(index, "search_defaults").get(key)
                                                 for key in SEARCH_SETTINGS}, index.get("factory")),
        "tuning": {key: tuning.get(key) for key in ("parameter", "value", "measured_recall", "k", "reached",
                                                    "queries")} if tuning else None,
        "bm25": _lexical_summary(index_dir, manifest),
        "fusion": _fusion_summary(index_dir, manifest),
        "bytes_on_disk": _bytes_on_disk(index_dir),
        "created": manifest.get("created"),
        "retriever_version": _entry(manifest, "versions").get("retriever"),
        "integrity_recorded": bool(manifest.get("integrity", {}).get("files")),
    }


def used_search_defaults(defaults: dict, factory: object) -> dict:
    """``defaults`` with null for a setting the index does not take: a manifest built before IndexParams refused
    them holds an nprobe for an HNSW or flat index, which no search uses. Which one it takes is read from the factory
    string, not from an empty index of it (an exotic one's lists and codebooks took hundreds of MB); shown as
    recorded if the string is not one FAISS reads (a damaged manifest)."""
    try:
        taken = factory_setting(factory if isinstance(factory, str) else "")
    except ValueError:
        return defaults
    return {key: value if key == taken else None for key, value in defaults.items()}


def _bytes_on_disk(index_dir: Path) -> int:
    """The size of the folder's files now. A build deletes an old part's folder or file while it is walked (``bm25
    --overwrite`` just after the manifest names the new part; a swap): what is gone is not counted, as ``os.walk``
    skips a folder gone before it is listed (``rglob`` raised FileNotFoundError), and ``opened_whole`` reads again
    if the manifest changed meanwhile."""
    total = 0
    for folder, _, names in os.walk(index_dir):
        for name in names:
            try:
                status = os.stat(os.path.join(folder, name))
            except (FileNotFoundError, NotADirectoryError):
                continue
            total += status.st_size if stat.S_ISREG(status.st_mode) else 0
    return total


def _entry(record: dict, key: str) -> dict:
    """An entry that should be an object, or {} where a damaged manifest holds anything else (the manifest check
    leaves entries search does not read, such as ``versions``, to the summary)."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def _lexical_summary(index_dir: Path, manifest: dict) -> dict | None:
    """The BM25 settings queries are tokenised and scored with, and the part's damage (None if its cheap checks
    pass) with how to rebuild it; None for a dense-only index."""
    lexical = manifest.get("lexical")
    if not lexical:
        return None
    try:
        check_lexical_files(index_dir, manifest)
        current, damage = _splits_as_now(index_dir, manifest, lexical), None
    except IndexDamaged as error:
        damage = str(error)
        current = splits_as_now(lexical.get("tokenizer")) if isinstance(lexical, dict) else False
    lexical = lexical if isinstance(lexical, dict) else {}
    return {**{key: lexical.get(key) for key in ("k1", "b", "method", "stemmer", "stopwords", "documents",
                                                  "vocabulary")}, "terms": corpus_terms(lexical),
            "current_splitting": current, "damage": damage}


def _splits_as_now(index_dir: Path, manifest: dict, lexical: dict) -> bool:
    """Whether a rebuild would split the part's passages as they are: recorded with today's splitting, or before
    NFKC and case folding (and maybe before some letter pairs: CJK ones, or Thai, Lao, Khmer and Myanmar ones) with
    no letter folding changes or those pairs cut among its terms and stopwords, so that only such a letter standing
    alone (no term then, one now) could differ (``lexical_terms.holds_letter_split_otherwise``). Its vocabulary
    unreadable is damage, not a former splitting."""
    recorded = lexical.get("tokenizer")
    if splits_as_now(recorded):
        return True
    if not differs_only_in_letters(recorded, tokenizer_record()):
        return False
    name = f"{lexical.get('directory', LEXICAL_DIR)}/{SORTED_VOCAB_FILE}"
    with reading(index_dir / name, lambda _, problem: file_damage(index_dir, manifest, name, problem)):
        return splits_alike(index_dir / str(lexical.get("directory", LEXICAL_DIR)), lexical.get("stopwords"), recorded)


def _fusion_summary(index_dir: Path, manifest: dict) -> dict | None:
    """The recorded hybrid fusion (what `--tune-fusion-on` stored), where it was tuned and its record's damage with
    how to mend it (None if sound; only hybrid search fails on it); None if none is recorded."""
    fusion = manifest.get("fusion")
    if not fusion:
        return None
    damage = recorded_fusion(index_dir, manifest, None)[1]
    fusion = fusion if isinstance(fusion, dict) else {}
    tuned = _entry(fusion, "tuned")
    return {**{key: fusion.get(key) for key in ("method", "rrf_k", "alpha", "depth")},
            "tuned": {key: tuned.get(key) for key in ("dataset", "split", "queries", "metric", "score",
                                                      "untuned_rrf")} if tuned else None,
            "damage": str(damage) if damage else None}


def verify_index(index_dir: str | Path, progress: bool = True) -> int:
    """Re-hash every file and re-count every part; the number of files checked, or an error naming the first
    damaged one (a damaged BM25 or fusion record too, which the summary only reports)."""
    index_dir = given_path(index_dir, "index_dir", INDEX_PATH)
    return opened_whole(index_dir, lambda: _verify(index_dir, progress))  # a swap mid-hash is not damage


def _verify(index_dir: Path, progress: bool) -> int:
    manifest = read_manifest(index_dir)
    lexical_record(index_dir, manifest)  # its shape, before its files are read by their records
    fusion_damage = recorded_fusion(index_dir, manifest, None)[1]
    if fusion_damage:
        raise fusion_damage
    check_folder(index_dir, manifest, MANIFEST_FILE, required_files(manifest))
    differing = verify_files(index_dir, manifest, progress)
    if differing:
        raise file_damage(index_dir, manifest, differing[0], "its SHA-256 differs from the one the manifest records")
    open_index(index_dir, manifest)  # reads every part and checks the counts and the id map's digest
    open_lexical(index_dir, manifest)
    return len(recorded_files(manifest))
