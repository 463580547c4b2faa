"""Whether a shard folder is a finished encoding: every worker done, each worker's shards the ones its done marker
records, all made by one encoder and split and each the part its name says; ``shards`` reads and writes them."""
from __future__ import annotations

import re
from pathlib import Path

from retriever.errors import RetrieverError
from retriever.files import read_json_object
from retriever.shards import (differing_fields, done_marker, list_shards, parse_shard_name, read_shard_metadata,
                              shard_name)
from retriever.wording import agree, counted

_MARKER_PATTERN = re.compile(r"^_?done-w\d+of(\d+)\.json$")  # ``done_marker``'s names; the group is num_workers


def worker_shards(folder: Path, worker: int, num_workers: int, count: int) -> list[Path]:
    """A worker's ``count`` shards, or one line naming the first missing or stray: a shard deleted after it was
    written must not pass as done, and neither kind may leave `index` blaming the corpus for the rows they change."""
    found = {parse_shard_name(path.name)[2]: path
             for path in (list_shards(folder, (worker, num_workers)) if folder.is_dir() else [])}
    missing = count - sum(part < count for part in found)  # counted, not listed: a marker may record 10**12
    if missing > 0:
        first = folder / shard_name(worker, num_workers, next(part for part in range(count) if part not in found))
        raise RetrieverError(f"{first}: missing ({missing} of worker {worker}'s {counted(count, 'shard')} "
                             f"{agree(missing, 'is', 'are')} gone, deleted after or while being encoded); "
                             "rerun `retriever encode` (or `build`) on the corpus to encode them again")
    stray = sorted(part for part in found if part >= count)
    if stray:
        raise RetrieverError(f"{found[stray[0]]}: a stray shard: worker {worker}'s done marker records "
                             f"{counted(count, 'shard')}"
                             + (f" (parts 0 to {count - 1})" if count else "")
                             + (f", and {len(stray) - 1} more past them" if len(stray) > 1 else "")
                             + "; copied in, or left by another run? delete it, or rerun `retriever encode` (or "
                             "`build`) on the corpus, which removes it")
    return [found[part] for part in range(count)]


def check_complete(folder: Path) -> tuple[list[Path], dict]:
    """All shards of a finished encoding, made by one encoder; refuse anything partial or mixed."""
    shards = list_shards(folder)
    if not shards:  # a worker with no documents may be done: then name the workers that are not
        splits = sorted(int(m.group(1)) for m in map(_MARKER_PATTERN.match, (p.name for p in folder.iterdir())) if m)
        if splits:
            _check_workers(folder, splits[0])
        raise RetrieverError(f"{folder}: holds no embedding shards; run `retriever encode` first")
    for shard in shards:  # no done marker names such a worker, so the checks by worker never looked at it
        worker, num_workers, _ = parse_shard_name(shard.name)
        if worker >= num_workers:
            raise RetrieverError(f"{shard}: named for worker {worker} of {num_workers}, but the split's workers are "
                                 + (f"0 to {num_workers - 1}" if num_workers else "none") + " (copied in, or "
                                 "renamed?); no worker of the split wrote it, so delete it")
    first = read_shard_metadata(shards[0])
    num_workers = first["shard"]["num_workers"]
    _check_workers(folder, num_workers)
    for shard in shards:
        meta = first if shard == shards[0] else read_shard_metadata(shard)
        diffs = differing_fields(first, meta)
        if diffs or meta["shard"]["num_workers"] != num_workers:
            raise RetrieverError(f"{shard}: made by a different encoder or split than {shards[0].name} "
                                 f"({'; '.join(diffs) or 'num_workers differs'}); re-encode into an empty folder")
        _check_place(shard, meta["shard"])
    return shards, first


def _check_workers(folder: Path, num_workers: int) -> None:
    """That each worker's done marker is there and its shards are the ones it records (``worker_shards``)."""
    for worker in range(num_workers):
        marker = done_marker(folder, worker, num_workers)
        if not marker.is_file():
            raise RetrieverError(f"{folder}: worker {worker} of {num_workers} has not finished encoding; "
                                 f"rerun `retriever encode --worker-index {worker} --num-workers {num_workers}`")
        recorded = read_json_object(marker, "rerun `retriever encode` on the corpus").get("shards")
        if isinstance(recorded, int) and not isinstance(recorded, bool):
            worker_shards(folder, worker, num_workers, recorded)


def _check_place(shard: Path, record: dict) -> None:
    """That a shard is the part its file name says: a build lays rows out by the names, the content check finds each
    part by the record, so two shards swapped by name passed it and put every vector on another passage's row."""
    worker, num_workers, part = parse_shard_name(shard.name)
    if (record.get("worker"), record.get("num_workers"), record.get("part")) != (worker, num_workers, part):
        raise RetrieverError(f"{shard}: its record says it is part {record.get('part')} of worker "
                             f"{record.get('worker')} of {record.get('num_workers')}, not part {part} as its file "
                             "name says (renamed, or copied over another shard?); rerun `retriever encode` (or "
                             "`build`) on the corpus, which re-encodes it")
