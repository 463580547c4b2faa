"""Opening an index folder's BM25 part: its manifest record checked on its own (a broken entry damages the part
alone, which `retriever bm25 --overwrite` replaces whole), its files at their recorded sizes, and the part checked
against the dense part (as many rows, built from this folder's doc store), so a part built for other documents never
returns wrong ids. Adding or replacing the part is ``lexical_part``'s.
"""
from __future__ import annotations

from pathlib import Path

from retriever.errors import IndexDamaged, RetrieverError
from retriever.integrity import check_files, file_damage, reading
from retriever.lexical import LEXICAL_DIR, LexicalParams
from retriever.lexical_index import LexicalIndex
from retriever.lexical_terms import knows_splitting
from retriever.wording import counted


def corpus_terms(record: dict) -> int | None:
    """The distinct terms a BM25 part's corpus holds: its recorded vocabulary less bm25s's empty token
    (``EMPTY_TOKEN``, the one token of a passage with no terms left), which `bm25` and `info` counted as a term,
    so passages that were all empty or stopwords read as "1 terms". None for a damaged record."""
    vocabulary = record.get("vocabulary")
    return vocabulary - 1 if type(vocabulary) is int and vocabulary >= 1 else None


def terms_text(record: dict) -> str:
    """A BM25 part's terms as `bm25` and `info` state them, saying what a part without any means."""
    terms = corpus_terms(record)
    if terms == 0:
        return "0 terms (every passage is empty or stopwords: --mode bm25 finds nothing, hybrid ranks by dense)"
    return counted(terms if terms is not None else "?", "term")


def missing_lexical_message(index_dir: Path) -> str:
    return (f"{index_dir}: has no BM25 index, so --mode bm25/hybrid cannot run; add one with "
            f"`retriever bm25 {index_dir}` (reads the doc store, no re-encoding), or use --mode dense")


def lexical_record(index_dir: Path, manifest: dict) -> dict | None:
    """The manifest's BM25 record (None without one), its shape checked here rather than with the whole manifest:
    a broken entry of it damages the BM25 part alone, which `retriever bm25 --overwrite` replaces whole."""
    from retriever.index_folder import MANIFEST_FILE, lexical_shape_problem

    problem = lexical_shape_problem(manifest)
    if problem is not None:
        raise IndexDamaged(f"{index_dir / MANIFEST_FILE}: {problem}, so the BM25 part's record is damaged; rebuild "
                           f"it with `retriever bm25 {index_dir} --overwrite` (no re-encoding)")
    record = manifest.get("lexical") or None
    unknown = _unknown_setting(record) if record else None
    if unknown is not None:
        raise IndexDamaged(f"{index_dir / MANIFEST_FILE}: lexical.{unknown} this version of retriever does not know "
                           "(a hand edit, or a part a newer retriever built), so queries cannot be tokenised as the "
                           f"BM25 part's passages were; rebuild it with `retriever bm25 {index_dir} --overwrite` (no "
                           "re-encoding), or upgrade retriever if a newer one built it")
    return record


def _unknown_setting(record: dict) -> str | None:
    """The recorded stopword list, stemmer or way of splitting words this version lacks ("stopwords 'x' is a
    stopword list"), or None: read as query settings, they failed naming --bm25-* flags the user never gave."""
    for field, what in (("stopwords", "a stopword list"), ("stemmer", "a stemmer")):
        try:
            LexicalParams(**{field: record.get(field)}).check()
        except RetrieverError:
            return f"{field} {record.get(field)!r} is {what}"
    if not knows_splitting(record.get("tokenizer")):
        return "tokenizer records a way of splitting words"
    return None


def open_lexical(index_dir: Path, manifest: dict) -> LexicalIndex | None:
    """The index folder's BM25 part (None without one), checked against the dense part: its files at their recorded
    sizes, built from this folder's doc store, and as many rows: BM25 rows are doc-store rows, so a part built for
    other documents would return wrong ids. Any damage says to rebuild the part alone."""
    record = _record_with_files(index_dir, manifest)
    if not record:
        return None
    directory = record.get("directory", LEXICAL_DIR)

    def damage(path: Path, problem: str) -> IndexDamaged:  # the part's folder, or the one file read on its own
        return file_damage(index_dir, manifest, path.relative_to(index_dir).as_posix() + "/" * path.is_dir(), problem)

    with reading(index_dir / directory, damage):
        lexical = LexicalIndex(index_dir, record, lambda path: reading(path, damage))
    expected = int(manifest["index"]["count"])
    if lexical.count != expected:
        raise file_damage(index_dir, manifest, f"{directory}/", f"holds {counted(lexical.count, 'document')} "
                                                                 f"where the manifest records {expected}")
    _check_built_from(index_dir, manifest, record)
    return lexical


def check_lexical_files(index_dir: Path, manifest: dict) -> dict | None:
    """The BM25 part's record (None without one) after its cheap checks, nothing loaded (what `retriever info`
    reports): its files present at their recorded sizes, and built from this folder's doc store."""
    record = _record_with_files(index_dir, manifest)
    if record:
        _check_built_from(index_dir, manifest, record)
    return record


def _record_with_files(index_dir: Path, manifest: dict) -> dict | None:
    """``lexical_record``, its files checked present at their recorded sizes."""
    record = lexical_record(index_dir, manifest)
    if record:
        directory = record.get("directory", LEXICAL_DIR)
        check_files(index_dir, manifest, [f"{directory}/{name}" for name in record.get("files") or {}])
    return record


def _check_built_from(index_dir: Path, manifest: dict, record: dict) -> None:
    """The doc store the part was built from (its file and SHA-256) must be this folder's, as the manifest records
    it: a part copied from an index of as many documents passed every other check and returned that index's rows
    as this one's documents. Two manifest entries compared, nothing hashed; parts recorded before the field (no
    ``docstore`` at all) pass, an incomplete record or one naming another file does not."""
    from retriever.index_opening import docstore_file

    if "docstore" not in record:
        return
    built_from, own = record["docstore"], manifest.get("integrity", {}).get("files") or {}
    name = docstore_file(index_dir, manifest).name
    if set(built_from) != {"file", "sha256"}:
        problem = "this BM25 part's record of the doc store it was built from is incomplete"
    elif built_from["file"] != name:
        problem = f"this BM25 part was built from {built_from['file']}, not from this index's doc store {name}"
    elif own and (own.get(name) or {}).get("sha256") != built_from["sha256"]:
        problem = ("this BM25 part was built from another doc store than this index's (copied from another index?), "
                   "so its hits would name the wrong documents")
    else:
        return
    raise IndexDamaged(f"{index_dir / record.get('directory', LEXICAL_DIR)}: {problem}; rebuild it with "
                       f"`retriever bm25 {index_dir} --overwrite` (no re-encoding)")
