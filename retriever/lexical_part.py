"""The BM25 part of an index folder: adding or replacing it (`retriever bm25`) from the folder's doc store
(opening it is ``lexical_opening``'s).

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
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from retriever.errors import RetrieverError, check_kind, full_disk_named
from retriever.output_paths import creatable_problem
from retriever.folders import exclusive_build, named_output, temporary_folder
from retriever.pid_names import left_by_dead_processes
from retriever.integrity import check_folder, damaged, dense_part, file_sha256, reading, recorded_files
from retriever.lexical import LEXICAL_DIR, LexicalParams, build_lexical, splits_alike
from retriever.lexical_names import canonical
from retriever.lexical_terms import differs_only_in_letters

_PART_NAME = re.compile(rf"^{LEXICAL_DIR}(-[0-9a-f]{{8}})?$")


def check_writable(index_dir: Path, what: str) -> None:
    """Refuse a folder nothing can be created in (read-only) before the work whose result is written there: `bm25`
    split every passage, and fusion tuning searched every query, before failing on it."""
    from retriever.index_folder import MANIFEST_FILE

    problem = creatable_problem(index_dir / MANIFEST_FILE)  # probes with a folder of its own, named from it
    if problem:
        raise RetrieverError(f"{index_dir}: {what} ({problem}); make the folder writable, or copy the index "
                             "somewhere writable")


def add_lexical(index_dir: str | Path, params: LexicalParams = LexicalParams(), overwrite: bool = False,
                progress: bool = True, retuning: str | None = None) -> dict:
    """Add a BM25 part to an existing index folder from its doc store (no re-encoding); return the record.
    It holds the lock a build of that folder holds: two runs at once each deleted the other's uncommitted part as
    unrecorded (an OSError traceback, or a manifest naming a deleted part) and left an orphan part behind.
    ``retuning`` ("DATASET split SPLIT") says the caller tunes the fusion next, so a fusion record dropped here is
    not said to leave hybrid on RRF k=60, nor to need the tuning the same run does."""
    check_kind(params, LexicalParams, "params", "LexicalParams, e.g. LexicalParams(k1=1.2)")
    index_dir = Path(index_dir)
    with index_lock(index_dir):
        return _add_lexical(index_dir, params, overwrite, progress, retuning)


@contextmanager
def index_lock(index_dir: Path, what: str = "build") -> Iterator[None]:
    """The build lock of the index folder (``folders.exclusive_build``), under the name given and, reached through a
    link, the folder's own too: a run through a link and one through the folder took two locks and both ran."""
    names = {name.parent.resolve() / name.name: name for name in (named_output(index_dir.resolve()),
                                                                   named_output(index_dir))}  # one lock file, once
    with ExitStack() as held:
        for name in names.values():
            held.enter_context(exclusive_build(name, what, elsewhere=""))  # `bm25 INDEX` has no --output
        yield


def _add_lexical(index_dir: Path, params: LexicalParams, overwrite: bool, progress: bool,
                 retuning: str | None = None) -> dict:
    from retriever.fusion import recorded_fusion
    from retriever.index_folder import read_manifest, replace_manifest

    manifest = read_manifest(index_dir)
    if manifest.get("lexical") and not overwrite:
        raise RetrieverError(f"{index_dir}: already has a BM25 index; pass --overwrite to rebuild it")
    params.check()
    check_writable(index_dir, "the BM25 part cannot be written into it")  # it failed once every passage was split
    docstore, docstore_sha256 = _checked_docstore(index_dir, manifest)
    recorded = _recorded_directory(manifest)
    _remove_unrecorded_parts(index_dir, recorded)
    final = index_dir / (LEXICAL_DIR if recorded != LEXICAL_DIR else f"{LEXICAL_DIR}-{secrets.token_hex(4)}")
    building = temporary_folder(final)
    try:
        with full_disk_named(index_dir):
            record = build_lexical(docstore, building, params, progress, docstore_sha256, lambda: reading(docstore))
        os.replace(building, final)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    record = {**record, "directory": final.name}
    broken = recorded_fusion(index_dir, manifest, None)[1]  # a damaged fusion record is dropped: the repair it names
    tuned = isinstance(manifest.get("fusion"), dict) and not broken
    changed = _scoring_changes(manifest, record, final) if tuned else []
    kept = {key: value for key, value in manifest.items() if not ((changed or broken) and key == "fusion")}
    replace_manifest(index_dir, {**kept, "lexical": record})  # the commit point
    if recorded and recorded != final.name:
        shutil.rmtree(index_dir / recorded, ignore_errors=True)
    if changed:
        _say_fusion_dropped(index_dir, manifest["fusion"], changed, retuning)
    if broken:
        then = (f"--tune-fusion-on tunes it anew on {retuning}" if retuning else "so hybrid uses RRF k=60; tune it "
                f"with `retriever bm25 {index_dir} --tune-fusion-on DATASET --split train`")
        print(f"note: {index_dir}: the damaged hybrid fusion record is dropped; {then}", file=sys.stderr)
    return record


# What shapes BM25's scores: a fusion tuned with other values was tuned for another ranking.
_SCORING = ("k1", "b", "method", "stemmer", "stopwords", "tokenizer")


def _scoring_changes(manifest: dict, record: dict, part: Path) -> list[str]:
    """The scoring settings the new BM25 record changes from the one it replaces ("k1 0.9 -> 2.0"); none when the
    old record is broken, since what it scored with is unknown. A tokenizer recorded before NFKC and case folding
    (and CJK, or Thai, Lao, Khmer and Myanmar, letter pairs) is no change where the new ``part``'s terms and
    stopwords hold no letter those pairs cut (a letter alone is a term now), nor the old part's one folding
    changes: no passage held one, so each got the terms it had (``lexical_terms.holds_letter_split_otherwise``)."""
    old = manifest.get("lexical")
    if not isinstance(old, dict):
        return []
    # a setting as it scores: `en` and `english` name one stopword list (`en` and `eng` the stemmer `english`), so a
    # repair naming it the other way, or a record an older version wrote as given, keeps the fusion
    changed = [name for name in _SCORING if canonical(name, old.get(name)) != canonical(name, record.get(name))]
    if (changed == ["tokenizer"] and differs_only_in_letters(old.get("tokenizer"), record.get("tokenizer"))
            and splits_alike(part, record.get("stopwords"), old.get("tokenizer"))
            and _old_part_splits_alike(part.parent, manifest)):
        return []
    return [f"{name} {old.get(name)} -> {record.get(name)}" if name != "tokenizer" else  # a record too long to show
            "tokenizer: text is cut into words otherwise" for name in changed]


def _old_part_splits_alike(index_dir: Path, manifest: dict) -> bool:
    """``lexical.splits_alike`` for the part being replaced (its terms as its tokenizer made them); False where it
    cannot be read, as its terms are then unknown."""
    import pyarrow as pa

    old, directory = manifest["lexical"], _recorded_directory(manifest)
    try:
        return directory is not None and splits_alike(index_dir / directory, old.get("stopwords"), old.get("tokenizer"))
    except (OSError, pa.ArrowException):
        return False


def _say_fusion_dropped(index_dir: Path, fusion: dict, changed: list[str], retuning: str | None = None) -> None:
    """The tuned fusion's nDCG (and its BM25-only score) measured the BM25 index just replaced: kept, it was shown
    by `info` and used by hybrid searches as tuned for this one. ``retuning``: as ``add_lexical``'s."""
    tuned = fusion.get("tuned") if isinstance(fusion.get("tuned"), dict) else {}
    where = f"tuned on {tuned.get('dataset')} {tuned.get('split')}" if tuned else "recorded"
    retune = (f"`retriever bm25 {index_dir} --tune-fusion-on {tuned.get('dataset')} --split {tuned.get('split')}`"
              if tuned else f"`retriever bm25 {index_dir} --tune-fusion-on DATASET --split SPLIT`")
    then = (f"; --tune-fusion-on tunes it anew on {retuning}" if retuning else
            f" and hybrid uses RRF k=60; tune it again with {retune}")
    print(f"note: {index_dir}: the hybrid fusion {where} measured the BM25 index this replaces ({', '.join(changed)}), "
          f"so it is dropped{then}", file=sys.stderr)


def _recorded_directory(manifest: dict) -> str | None:
    """The folder the BM25 record names, if it names one inside the index folder: a broken record (what
    ``--overwrite`` repairs) must not send the clean-up elsewhere."""
    from retriever.index_folder import is_part_folder_name

    lexical = manifest.get("lexical")
    directory = lexical.get("directory", LEXICAL_DIR) if isinstance(lexical, dict) else None
    return directory if is_part_folder_name(directory) else None


def _remove_unrecorded_parts(index_dir: Path, recorded: str | None) -> None:
    """BM25 part folders the manifest does not name, and hidden ones of dead builds: what killed runs left."""
    for path in index_dir.iterdir():
        if path.is_dir() and _PART_NAME.match(path.name) and path.name != recorded:
            shutil.rmtree(path, ignore_errors=True)
    for leftover in left_by_dead_processes(index_dir, f".{LEXICAL_DIR}", ".building-"):
        shutil.rmtree(leftover, ignore_errors=True)


def _checked_docstore(index_dir: Path, manifest: dict) -> tuple[Path, str | None]:
    """The doc store BM25 is built from, after the checks opening the folder makes (files present at their
    recorded sizes) and a hash against the manifest: BM25 rows must be the rows of the index's own doc store.
    The BM25 part itself is left out, since it is what gets rebuilt. Also the hash, where the manifest has one."""
    from retriever.index_folder import MANIFEST_FILE
    from retriever.index_opening import docstore_file, required_files

    dense = dense_part(manifest)
    check_folder(index_dir, dense, MANIFEST_FILE, required_files(manifest))
    docstore = docstore_file(index_dir, manifest)
    recorded = recorded_files(dense).get(docstore.name)
    if recorded and file_sha256(docstore) != recorded.get("sha256"):
        raise damaged(docstore, "its content is not the one the index was built with (replaced or corrupted)")
    return docstore, recorded.get("sha256") if recorded else None
