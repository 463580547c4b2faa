"""The work folder of an ``ivf-ondisk`` build, ``OUTPUT.parts/``, which makes the build resumable.

The trained quantizer and each finished part are kept there until the index is in place, beside
a record of the build's inputs (shards, encoder, factory, sample and part settings). A rerun
after a crash reuses what the record says is the same and skips the finished parts; a record
that differs means other inputs, and the folder is emptied and rebuilt, never reused. A folder of that name
that a build did not make is refused, never emptied. Each part and the trained index is recorded (size, SHA-256,
what it was made from) once written, and checked against its record before it is reused: one that fails is
made again. Just before the index is moved into place the folder notes its manifest, so that parts a crash left
after the move are deleted by the next build of that output (``clear_finished``).
Parts are filled by Ray tasks with ``--ray``, else by worker processes.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import sys
from typing import TYPE_CHECKING
from contextlib import suppress
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from retriever.cores import usable_cores
from retriever.errors import RetrieverError
from retriever.files import atomic_write, read_json, write_json
from retriever.ivfparts import (ShardSlice, file_digest, held_path, part_identity, record_path,
                                record_problem, recorded_sha256, write_record)
from retriever.part_processes import fill_in_processes
from retriever.pid_names import WRITER, clear_left_behind, left_behind
from retriever.shards import VECTOR_FIELDS, read_shard_metadata
from retriever.wording import size_text

if TYPE_CHECKING:
    from retriever.faiss_index import IndexParams  # it imports ondisk, which imports this module

INPUTS_FILE = "inputs.json"
TRAINED_FILE = "trained.faiss"
FINISHED_FILE = "finished.json"
PARTS_SUFFIX = ".parts"  # OUTPUT.parts, beside the index folder
# the keys of ``inputs_record``: an inputs.json without exactly these is not a build's record
INPUT_KEYS = {"shards", "encoder", "factory", "train_size", "seed", "part_size", "held_rows_sha256", "faiss"}
# what a build writes in OUTPUT.parts (records are ``ivfparts.record_path``), and the hidden temporaries of those
# (``files.temporary_path``) and probe folders (``files.creatable_problem``) a killed run can leave
_WRITTEN = re.compile(r"inputs\.json|finished\.json|trained\.faiss(\.json)?|part-\d{5,}\.faiss(\.held\.npz|\.json)?")
_TEMPORARY = re.compile(rf"\.(.+)\.(?:tmp-{WRITER}|(probe)-\d+(?:-\d+)?)")


def parts_folder(output: Path) -> Path:
    return output.with_name(output.name + PARTS_SUFFIX)


def inputs_record(shards: list[Path], encoder: dict, spec: str, params: IndexParams, held: np.ndarray) -> dict:
    """What the trained quantizer and the parts depend on: equal records, interchangeable parts."""
    records = [read_shard_metadata(shard)["shard"] for shard in shards]
    return {"shards": [[shard.name, shard.stat().st_size, record["rows"], record["content_sha256"]]
                       for shard, record in zip(shards, records)],
            "encoder": {name: encoder.get(name) for name in VECTOR_FIELDS}, "factory": spec,
            "train_size": params.train_size, "seed": params.seed, "part_size": params.part_size,
            "held_rows_sha256": hashlib.sha256(np.asarray(held, np.int64).tobytes()).hexdigest(),
            "faiss": faiss.__version__}


class PartsFolder:
    """``OUTPUT.parts/`` for one set of inputs: emptied first if it holds another build's parts, refused if it is
    not a build's; its trained index is checked against its record (``ivfparts.record_problem``)."""

    def __init__(self, folder: Path, inputs: dict) -> None:
        self.folder = folder
        recorded = owned_inputs(folder)
        if recorded is not None and recorded != inputs:
            print(f"{folder}: its parts were built from other inputs (shards or index settings); rebuilding "
                  "them", file=sys.stderr)
            remove_parts_folder(folder)  # owned_inputs saw only files a build writes
        folder.mkdir(parents=True, exist_ok=True)
        clean_temporaries(folder)
        write_json(folder / INPUTS_FILE, inputs)
        problem = record_problem(self.trained, [self.trained]) if self.trained.is_file() else None
        if problem:
            print(f"{self.trained}: {problem}; training it again", file=sys.stderr)
            self.trained.unlink()

    @property
    def trained(self) -> Path:
        return self.folder / TRAINED_FILE

    def save_trained(self, index: faiss.Index) -> None:
        atomic_write(self.trained, lambda tmp: faiss.write_index(index, str(tmp)))
        write_record(self.trained, [self.trained])

    def part(self, number: int) -> Path:
        return self.folder / f"part-{number:05d}.faiss"

    def reusable(self, number: int, slices: list[ShardSlice]) -> bool:
        """Whether part ``number`` is finished and is what its record says; a damaged, replaced or unrecorded
        one is said so on stderr and filled again."""
        part = self.part(number)
        if not part.is_file():
            return False
        problem = record_problem(part, [part, held_path(part)], **part_identity(recorded_sha256(self.trained), slices))
        if problem:
            print(f"{part}: {problem}; filling it again", file=sys.stderr)
            record_path(part).unlink(missing_ok=True)
        return not problem


def clean_temporaries(folder: Path) -> None:
    """Delete the unfinished files (``files.temporary_path``) that killed workers of this host left; another host's
    (a Ray task on another node, on a shared file system) are kept and named, since its process cannot be seen."""
    clear_left_behind(left_behind(folder, ".", ".tmp-"), "a part being written by",
                      "remove it once that build no longer runs there")


def _ours(entry: Path) -> bool:
    """Whether an entry of OUTPUT.parts is one the build writes there: a file of its names or a temporary of one,
    or a probe folder."""
    temporary = _TEMPORARY.fullmatch(entry.name)
    if _WRITTEN.fullmatch(temporary.group(1) if temporary else entry.name) is None or entry.is_symlink():
        return False
    return entry.is_dir() if temporary and temporary.group(2) == "probe" else entry.is_file()


def owned_inputs(folder: Path) -> dict | None:
    """The inputs record of a build's parts folder, None when there is nothing there yet; a folder that is not
    a build's (an entry the build does not write, or no record of the shape it writes) is refused, never emptied."""
    if not (folder.exists() or folder.is_symlink()):
        return None
    if folder.is_symlink() or not folder.is_dir():
        raise _not_ours(folder, "it is a file or a link")
    entries = list(folder.iterdir())
    foreign = sorted(entry.name for entry in entries if not _ours(entry))
    if foreign:
        raise _not_ours(folder, f"it holds {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}")
    if all(_TEMPORARY.fullmatch(entry.name) for entry in entries):
        return None  # empty, or a first run killed while writing its record
    recorded = _recorded(folder / INPUTS_FILE)
    if recorded is None:
        raise _not_ours(folder, f"its {INPUTS_FILE} is missing or not a build's record; delete the folder if a "
                                "build made it")
    return recorded


def _not_ours(folder: Path, why: str) -> RetrieverError:
    return RetrieverError(f"{folder}: exists and is not the parts folder of an ivf-ondisk build ({why}); move it "
                          "away or choose another --output")


def _recorded(path: Path) -> dict | None:
    try:
        record = read_json(path)
    except RetrieverError:
        return None
    return record if isinstance(record, dict) and set(record) == INPUT_KEYS else None


def unfinished_note(folder: Path, output: Path) -> str | None:
    """A note for a build of another type beside the parts of an unfinished ivf-ondisk build of ``output``: they are
    kept, since rerunning that build resumes from them, but they may be gigabytes, left without a word."""
    try:
        if owned_inputs(folder) is None:
            return None
        size = sum(entry.stat().st_size for entry in folder.iterdir() if entry.is_file())
    except (RetrieverError, OSError):
        return None
    return (f"note: {folder}: the parts of an unfinished ivf-ondisk build of {output} ({size_text(size)}), which this "
            "build leaves as they are; rerun that build to resume it, or remove the folder")


def mark_finished(folder: Path, manifest: Path) -> None:
    """Note in OUTPUT.parts the manifest of the index its parts made, just before that index is moved into place:
    parts left behind by a crash after the move are then known to be done with (``clear_finished``)."""
    if folder.is_dir():
        write_json(folder / FINISHED_FILE, {"manifest_sha256": file_digest(manifest)[1]})


def finished_with(folder: Path, manifest: Path) -> bool:
    """Whether ``folder`` is a build's parts folder whose index is in place (``manifest`` is the one it noted)."""
    marker = folder / FINISHED_FILE
    try:
        if not (marker.is_file() and manifest.is_file() and owned_inputs(folder) is not None):
            return False
        return read_json(marker) == {"manifest_sha256": file_digest(manifest)[1]}  # else a crash before the move
    except (RetrieverError, OSError):
        return False


def clear_finished(folder: Path, manifest: Path) -> str | None:
    """Delete a build's parts folder whose index is in place (``finished_with``); what was done."""
    if not finished_with(folder, manifest):
        return None
    with suppress(OSError):
        clean_temporaries(folder)  # names another host's, which stay
        if not remove_parts_folder(folder):
            return f"deleted the parts in {folder}, left by a build that finished; the folder stays for the " \
                   "temporaries still being written there"
    return f"deleted {folder}, left by a build that finished"


def remove_parts_folder(folder: Path) -> bool:
    """Delete a build's parts folder, its finished mark and then its inputs record last: a build killed while deleting
    it leaves a folder the next build still knows as its own (and, marked, deletes), never parts without a record,
    which would be refused as a user's. A temporary whose writer may still run (on another host, or alive here) is
    kept, as ``clean_temporaries`` keeps it, and with it the folder, which then holds only temporaries (a build
    takes it as empty). Whether the folder is gone."""
    last = (FINISHED_FILE, INPUTS_FILE)
    writing = {entry for entry, writer in left_behind(folder, ".", ".tmp-") if not writer.gone}
    for entry in sorted(folder.iterdir(), key=lambda entry: last.index(entry.name) if entry.name in last else -1):
        if entry not in writing:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    if writing:
        return False
    folder.rmdir()
    return True


def check_part_settings(params: IndexParams) -> None:
    if params.part_size < 1 or (params.parallel_parts is not None and params.parallel_parts < 1):
        raise RetrieverError("--part-size and --parallel-parts must be at least 1")
    if params.ray_address is not None and params.parallel_parts is not None:
        raise RetrieverError("--parallel-parts sets worker processes on this machine; with --ray, parts are Ray tasks: "
                             "use --ray-workers and --ray-cpus-per-worker instead")
    if params.ray_address is not None:  # before the corpus pass and training, not after
        from retriever.distributed.ray_capacity import check_local_cpus
        from retriever.distributed.ray_runtime import check_address, require_ray

        require_ray()
        check_address(params.ray_address)
        check_local_cpus(params.ray_address, params.ray_workers, params.ray_cpus_per_worker)


def fill_parts(work: PartsFolder, parts: list[list[ShardSlice]], params: IndexParams,
               progress: bool = True) -> list[str]:
    """Fill the parts not finished yet (Ray tasks with ``params.ray_address``, else processes); return
    every part's file, in order."""
    # absolute paths: a Ray worker (on another node, too) does not run in this process's folder
    todo = [(str(work.trained.resolve()), slices, str(work.part(number).resolve()))
            for number, slices in enumerate(parts) if not work.reusable(number, slices)]
    if len(todo) < len(parts):
        print(f"resuming: {len(parts) - len(todo)} of {len(parts)} parts already built in {work.folder}",
              file=sys.stderr)
    with tqdm(total=len(parts), initial=len(parts) - len(todo), desc="fill parts", unit="part", file=sys.stderr,
              disable=not progress) as bar:
        if todo and params.ray_address is not None:
            from retriever.distributed.ray_parts import fill_parts_on_ray

            fill_parts_on_ray(params.ray_address, todo, params.ray_workers, params.ray_cpus_per_worker,
                              lambda: bar.update(1))
        elif todo:
            fill_in_processes(todo, min(params.parallel_parts or usable_cores(), len(todo)),
                              lambda: bar.update(1))
    return [str(work.part(number)) for number in range(len(parts))]
