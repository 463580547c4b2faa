"""Where a shard set came from: the corpus documents (a content hash per part) and the reading flags that made
documents of its lines (``--format``, ``--id-field``, ``--text-field``, ``--title-field``).

The flags are recorded beside the encoder record in every shard, so a rerun or an index build given other flags
is told which flag differs, where a content mismatch alone could not tell an edited corpus from a changed flag.
Shards written before the record have none: they are checked by content alone, as before.
"""
from __future__ import annotations

import hashlib
import json
import shlex
from collections import defaultdict
from pathlib import Path

from retriever.corpus import Document, Fields, detect_format
from retriever.errors import RetrieverError
from retriever.shards import id_lines, read_shard_metadata, shard_ids_sha256

READING = "reading"  # the key of the flags record in a shard's metadata
_FLAGS = {"format": "--format", "id_field": "--id-field", "text_field": "--text-field", "title_field": "--title-field"}


def reading_record(corpus_path: Path, fmt: str, fields: Fields) -> dict:
    """The flags that shape the documents read from ``corpus_path``: the format it is read as (``auto`` resolved,
    so naming the format the extension gives changes nothing) and, but for TSV (whose columns come from its
    header), the field names."""
    record = {"format": detect_format(corpus_path, fmt)}
    if record["format"] != "tsv":
        record.update(id_field=fields.id, text_field=fields.text, title_field=fields.title)
    return record


def _flags(record: dict, names: list[str]) -> str:
    return " ".join(f"{_FLAGS[name]} {shlex.quote(str(record.get(name)))}" for name in names)


def reading_problem(recorded: object, given: dict) -> tuple[str, str] | None:
    """(what differs, the flags to rerun with) when shards whose reading record is ``recorded`` were read with
    other flags than ``given``; None when they agree or the shards record none (written before the record)."""
    if not isinstance(recorded, dict) or not recorded:
        return None
    names = ["format"] if recorded.get("format") != given.get("format") else [
        name for name in _FLAGS if recorded.get(name) != given.get(name)]
    if not names:
        return None
    return (f"its shards were encoded from the corpus read with {_flags(recorded, names)}, this run reads it with "
            f"{_flags(given, names)}", _flags(recorded, names))


def check_reading(folder: Path, recorded: object, given: dict, re_encode: str, corpus: Path | None = None) -> None:
    """Refuse, in one line, a run reading the corpus of the shards in ``folder`` with other flags than they
    were encoded with; ``re_encode`` says how to encode them again with the new flags instead. A ``corpus`` whose
    extension names another format than theirs is another file (a copy in another format), which their --format
    would misread: the advice is then to pass theirs."""
    problem = reading_problem(recorded, given)
    if problem is None:
        return
    theirs = recorded["format"]
    if corpus is not None and theirs != given.get("format") and _format_by_name(corpus) not in (None, theirs):
        raise RetrieverError(f"{folder}: its shards were encoded from a {theirs} corpus, and {corpus} is read as "
                             f"{given.get('format')} (by its extension); pass the {theirs} file they were encoded "
                             f"from to use them, or {re_encode}")
    raise RetrieverError(f"{folder}: {problem[0]}; rerun with {problem[1]} to use them, or {re_encode}")


def _format_by_name(corpus: Path) -> str | None:
    """The format a corpus file's extension names, None when it names none."""
    try:
        return detect_format(corpus)
    except RetrieverError:
        return None


class ContentHash:
    """Incremental hash of a part's documents: what a shard's vectors were made from."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()

    def add(self, document: Document) -> None:
        record = json.dumps([document.id, document.title, document.text], ensure_ascii=False)
        self._digest.update(record.encode("utf-8", "surrogatepass") + b"\n")

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


class ShardContentCheck:
    """Recompute each part's content hash, and a hash of its ids, while the corpus streams past, to prove the
    shards came from it and that each shard's id column names its rows' documents in corpus order."""

    def __init__(self, shards: list[Path]) -> None:
        self._expected: dict[tuple[int, int], tuple[Path, str]] = {}
        self._hashes: dict[tuple[int, int], ContentHash] = defaultdict(ContentHash)
        self._ids = defaultdict(hashlib.sha256)  # per part: SHA-256 of its id_lines
        self._position = 0
        self._shard_sizes: dict[int, int] = {}  # per worker: each worker runs on its own, with its own --shard-size
        self._flags_recorded = True  # then the build compared them (check_reading): only the documents can differ
        for path in shards:
            metadata = read_shard_metadata(path)
            shard = metadata["shard"]
            if "content_sha256" not in shard:
                raise RetrieverError(f"{path}: the shard records no content hash (an older version made it); rerun "
                                     "`retriever encode` on the corpus, which re-encodes such shards")
            self._expected[(shard["worker"], shard["part"])] = (path, shard["content_sha256"])
            self._num_workers = shard["num_workers"]
            self._shard_sizes.setdefault(shard["worker"], shard["shard_size"])
            self._flags_recorded = self._flags_recorded and bool(metadata.get(READING))

    def add(self, document: Document) -> None:
        worker, rank = self._position % self._num_workers, self._position // self._num_workers
        key = (worker, rank // self._shard_sizes.get(worker, 1))
        self._hashes[key].add(document)
        self._ids[key].update(id_lines([document.id]))
        self._position += 1

    def check(self, corpus: Path) -> None:
        for key, (path, expected) in sorted(self._expected.items()):
            if key not in self._hashes or self._hashes[key].hexdigest() != expected:
                raise RetrieverError(f"{path}: encoded from other documents than {corpus} holds now"
                                     + (" (read with the same flags: the corpus changed); rerun `retriever encode` "
                                        "(or `build`) on it, which re-encodes the changed parts"
                                        if self._flags_recorded else
                                        ", or read with other --format/--id-field/--text-field/--title-field than "
                                        "`encode` was; pass those, or rerun `retriever encode` with them (it "
                                        "re-encodes changed parts)"))
            if shard_ids_sha256(path) != self._ids[key].hexdigest():
                raise RetrieverError(f"{path}: its id column does not list its part's documents of {corpus} in "
                                     "order (the shard was rewritten); rerun `retriever encode` (or `build`) "
                                     "on the corpus, which re-encodes it")
