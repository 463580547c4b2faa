"""What a folder given where an index folder belongs is instead, and the command that fits it.

`info`, `search`, `evaluate --index` and `serve` given a model folder, a BEIR collection or `encode`'s shards said
only "not an index folder; build one", which left the user to work out how from what they had.
"""
from __future__ import annotations

import re
from pathlib import Path

from retriever.corpus import BEIR_FILES
from retriever.errors import RetrieverError
from retriever.partwork import PARTS_SUFFIX, finished_with, owned_inputs
from retriever.pid_names import WRITER, writer_of
from retriever.shards import done_marker, list_shards, parse_shard_name

MODEL_MARKERS = ("config.json", "modules.json")  # a Hugging Face or sentence-transformers model folder's own files


def not_an_index(folder: Path, manifest_name: str) -> RetrieverError:
    """The error for ``folder``, which lacks ``manifest_name``: what it is (shards, a model, a BEIR collection) and
    the command that makes an index of it, else how to build one."""
    from retriever.model_loading import RETRIEVER_CONFIG

    if not folder.is_dir():  # a library call (the CLI checks the folder exists): a typo, or a file of the folder
        return RetrieverError(_not_a_folder(folder, manifest_name))
    lacks = f"not an index folder (no {manifest_name})"
    staging = _staging_folder(folder, lacks)
    if staging:
        return RetrieverError(staging)
    shards = list_shards(folder) if folder.is_dir() else []
    if shards and (unfinished := _unfinished_worker(folder, shards)):  # stopped before a worker's done marker
        worker, workers = unfinished
        return RetrieverError(f"{folder}: a folder of embedding shards whose encoding did not finish (worker {worker} "
                              f"of {workers} has no done marker), {lacks}; finish it with `retriever encode "
                              f"--worker-index {worker} --num-workers {workers}` (or rerun the build that made it), "
                              f"then index it with `retriever index {folder} --corpus CORPUS --output INDEX`")
    if shards:  # `encode` output, or a `build` stopped before indexing
        return RetrieverError(f"{folder}: a folder of embedding shards, {lacks}; index it with "
                              f"`retriever index {folder} --corpus CORPUS --output INDEX`")
    if _ondisk_parts(folder):
        output = folder.with_name(folder.name.removesuffix(PARTS_SUFFIX))
        if finished_with(folder, output / manifest_name):  # a crash after the move, before they were deleted
            return RetrieverError(f"{folder}: the parts of an ivf-ondisk build of {output} that finished (its index "
                                  f"is in place), {lacks}; the next build of {output} deletes them, or remove "
                                  f"{folder}")
        return RetrieverError(f"{folder}: the parts of an ivf-ondisk build of {output} that did not finish, {lacks}; "
                              f"rerun that build (the same command) to finish it, then use {output}")
    if any((folder / name).is_file() for name in (*MODEL_MARKERS, RETRIEVER_CONFIG)):
        return RetrieverError(f"{folder}: a model folder, {lacks}; build an index with it: "
                              f"`retriever build CORPUS --model {folder} --output INDEX`")
    if all((folder / name).is_file() for name in BEIR_FILES):
        return RetrieverError(f"{folder}: a BEIR collection, {lacks}; build an index of its corpus: "
                              f"`retriever build {folder} --output INDEX`")
    return RetrieverError(f"{folder}: {lacks}; build one with `retriever build`")


def _not_a_folder(path: Path, manifest_name: str) -> str:
    """The line for a path that is no folder: "build one" told a user who had given its manifest, or mistyped the
    folder's name, to build an index they had."""
    if not path.exists():
        return f"{path}: no such folder; give the path of an index folder"
    if path.name == manifest_name:
        return f"{path}: a file, not an index folder; give the folder holding it, {path.parent}"
    return f"{path}: a file, not an index folder; give the index folder (it holds {manifest_name})"


_STAGING = re.compile(rf"^\.(.+)\.(building|old)-({WRITER})$")  # ``folders.temporary_folder``'s names


def _staging_folder(folder: Path, lacks: str) -> str | None:
    """The line for a build's hidden ``.NAME.building-PID@HOST`` (or an --overwrite's ``.NAME.old-PID@HOST``): whose
    build it is, whether that process still runs (unseen on another host) and what to do; a stopped build's folder
    was "not an index folder"."""
    match = _STAGING.match(folder.name)
    writer = writer_of(match.group(3)) if match else None
    if writer is None:
        return None
    output, building, alive = folder.with_name(match.group(1)), match.group(2) == "building", not writer.gone
    by = f"by process {writer.pid}" + (f" on host {writer.host}" if writer.elsewhere else "")
    what = (f"the unfinished build of {output} {by}" if building else
            f"what an --overwrite build of {output} {by} set aside")
    state = "cannot be seen from here" if writer.elsewhere else "is still running" if alive else "is no longer running"
    if writer.elsewhere:
        remedy = "once that build no longer runs, " + ("remove this folder" if building else f"move it back to "
                                                       f"{output} if that is missing, else remove it")
        remedy += " (a build here keeps it)"
    elif building:
        remedy = (f"wait for it to put {output} in place" if alive else
                  f"rerun that build (the same command) to build {output}, which deletes this folder first, or "
                  "remove it")
    else:
        remedy = ("it deletes this folder when done" if alive else
                  "the next build of it deletes this folder (or puts it back if the index is missing), or remove it")
    return f"{folder}: {what}, which {state}; {lacks}; {remedy}"


def _ondisk_parts(folder: Path) -> bool:
    """Whether ``folder`` is the ``OUTPUT.parts`` an ivf-ondisk build keeps until its index is in place."""
    try:
        return folder.name.endswith(PARTS_SUFFIX) and owned_inputs(folder) is not None
    except RetrieverError:  # a folder of that name holding what a build does not write
        return False


def _unfinished_worker(folder: Path, shards: list[Path]) -> tuple[int, int] | None:
    """The first worker of the shards' split without its done marker: `retriever index` refuses such a folder, so
    pointing at it would send the user round in a circle."""
    workers = parse_shard_name(shards[0].name)[1]
    return next(((worker, workers) for worker in range(workers) if not done_marker(folder, worker, workers).is_file()),
                None)
