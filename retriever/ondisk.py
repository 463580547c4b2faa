"""Indexes larger than RAM (``--index-type ivf-ondisk``): FAISS's own recipe, as in its
``demo_ondisk_ivf.py`` and autofaiss.

1. Train the IVF (coarse centroids + codes) on a sample read shard by shard.
2. Fill parts of about ``--part-size`` vectors in parallel (worker processes, or Ray tasks with
   ``--ray``), each adding its shards to a copy of the trained empty index and writing it out.
   The trained index and finished parts survive a crash (``retriever.partwork``).
3. Merge the parts' inverted lists into one ``index.ivfdata`` file (``retriever.ivfmerge``), which
   ``search`` and ``serve`` map into memory instead of reading.

FAISS labels are doc-store rows, so the id map is the memory-mapped doc store itself (see
``retriever.docstore``). Nothing here holds more than one part's codes or one shard's vectors.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import faiss
import numpy as np
from tqdm import tqdm

from retriever.choices import ONDISK_TYPE
from retriever.corpus import Document, Fields, ReadStats, iter_documents
from retriever.docstore import ID_ORDER_FILE, MAPPED_DOCSTORE_FILE, open_mapped, write_mapped_docstore
from retriever.errors import RetrieverError
from retriever.id_order import write_id_order
from retriever.index_folder import INDEX_FILE, check_document_count, write_manifest
from retriever.integrity import absence
from retriever.ivfmerge import faiss_notes_silenced, merge_parts
from retriever.ivfparts import ShardSlice, read_held
from retriever.partwork import PartsFolder, check_part_settings, fill_parts, inputs_record
from retriever.shard_origin import ShardContentCheck
from retriever.shards import read_shard_metadata
from retriever.tuning import held_out_rows, tune_build

if TYPE_CHECKING:
    from retriever.faiss_index import IndexParams  # it imports this module

IVFDATA_FILE = "index.ivfdata"
CODES = {"sq8": "SQ8", "fp16": "SQfp16", "flat": "Flat"}
READ_FLAGS = faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY


def read_ondisk_index(path: Path) -> faiss.Index:
    """Open an on-disk index with its inverted lists mapped from the ``.ivfdata`` beside it, so the
    folder can be moved (the path recorded at build time is not used)."""
    if not (path.parent / IVFDATA_FILE).is_file():
        raise RetrieverError(f"{path.parent / IVFDATA_FILE}: {absence(path.parent / IVFDATA_FILE)}; the on-disk index "
                             "is incomplete, rebuild it")
    with faiss_notes_silenced():
        return faiss.read_index(str(path), READ_FLAGS)


class PartPlan:
    """Shards grouped into parts, and where each shard's rows land among the labels."""

    def __init__(self, shards: list[Path], held: np.ndarray, part_size: int) -> None:
        self.parts: list[list[ShardSlice]] = []
        offsets, first_labels, strides = [], [], []
        seen: dict[int, int] = {}
        offset, part_rows = 0, 0
        for shard in shards:
            meta = read_shard_metadata(shard)["shard"]
            worker, workers, rows = meta["worker"], meta["num_workers"], meta["rows"]
            local = held[(held >= offset) & (held < offset + rows)] - offset
            piece = ShardSlice(str(shard.resolve()), worker + workers * seen.get(worker, 0), workers,
                               tuple(int(row) for row in local))
            seen[worker] = seen.get(worker, 0) + rows
            if not self.parts or part_rows + rows > part_size:
                self.parts.append([])
                part_rows = 0
            self.parts[-1].append(piece)
            part_rows += rows
            offsets.append(offset)
            first_labels.append(piece.first_label)
            strides.append(workers)
            offset += rows
        self._offsets, self._first = np.array(offsets), np.array(first_labels)
        self._strides, self.held = np.array(strides), held

    @property
    def slices(self) -> list[ShardSlice]:
        """Every shard's slice, in shard order."""
        return [piece for part in self.parts for piece in part]

    def labels_of_kept(self, kept: np.ndarray) -> np.ndarray:
        """Labels of rows numbered as ``exact.exact_neighbours(exclude_rows=held)`` numbers them."""
        rows = kept + np.searchsorted(self.held - np.arange(len(self.held)), kept, side="right")
        shard = np.searchsorted(self._offsets, rows, side="right") - 1
        labels = self._first[shard] + self._strides[shard] * (rows - self._offsets[shard])
        return np.where(kept >= 0, labels, -1)


def write_documents(corpus: Path, fmt: str, fields: Fields, folder: Path, stats: ReadStats,
                    content: ShardContentCheck, count: int, progress: bool = True) -> None:
    """The mapped doc store (corpus order, hashed part by part for ``content``, under a ``doc store`` bar of the
    ``count`` documents the shards hold, as the in-memory build draws) and its sorted id index, whose external sort
    is also where duplicate ids are refused (the reader's check holds every id)."""
    docstore = folder / MAPPED_DOCSTORE_FILE
    with tqdm(total=count, desc="doc store", unit="doc", file=sys.stderr, disable=not progress) as bar:
        write_mapped_docstore(_hashed(iter_documents(corpus, fmt, fields, stats, unique_ids=False), content,
                                      bar.update), docstore)
    write_id_order(open_mapped(docstore), folder / ID_ORDER_FILE, source=corpus)


def _hashed(documents: Iterator[Document], content: ShardContentCheck, read) -> Iterator[Document]:
    for document in documents:
        content.add(document)
        read(1)
        yield document


def held_part(trained: Path, parts: list[str], path: Path) -> str:
    """The vectors the parts held out, as one more part file."""
    index = faiss.read_index(str(trained))
    held = [read_held(part) for part in parts]
    index.add_with_ids(np.ascontiguousarray(np.concatenate([vectors for vectors, _ in held])),
                       np.concatenate([labels for _, labels in held]))
    faiss.write_index(index, str(path))
    return str(path)


def write_ondisk_index(index: faiss.Index, path: Path) -> None:
    """Write the index with a bare ``.ivfdata`` file name, so nothing records the build folder."""
    invlists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(index).invlists)
    invlists.filename = IVFDATA_FILE
    faiss.write_index(index, str(path))


def trained_quantizer(work: PartsFolder, spec: str, dim: int, shards: list[Path], count: int, params: IndexParams,
                      progress: bool = True) -> int:
    """Train the empty index into ``work`` unless a crashed run of the same inputs did; the sample size."""
    from retriever.faiss_index import new_index, train  # it imports this module

    if work.trained.is_file():
        if progress:
            print(f"resuming: reusing the trained quantizer in {work.folder}", file=sys.stderr)
        return min(params.train_size, count)  # what `train` samples (see shards.sample_rows)
    index = new_index(spec, dim, params)
    trained_on = train(index, shards, count, params, spec, progress)
    work.save_trained(index)
    return trained_on


def tune_on_parts(trained: Path, parts: list[str], building: Path, shards: list[Path], plan: PartPlan,
                  params: IndexParams, tuning_queries: np.ndarray | None,
                  progress: bool = True) -> tuple[dict, list[str]]:
    """Tune nprobe on the merged parts; the tuning record and the part files to merge (held-out vectors
    added as one more part)."""
    held = plan.held
    held_vectors = np.concatenate([read_held(part)[0] for part in parts])
    index = merge_parts(trained, parts, building / "tuning.ivfdata", progress)
    tuning = tune_build(index, shards, tuning_queries, held_vectors, held, params, plan.labels_of_kept, progress)
    del index
    os.remove(building / "tuning.ivfdata")
    if len(held):
        parts = [*parts, held_part(trained, parts, building / "part-held.faiss")]
    return tuning, parts


def build_ondisk(shards: list[Path], encoder: dict, count: int, dim: int, corpus_path: Path, fmt: str, fields: Fields,
                 building: Path, params: IndexParams, progress: bool, tuning_queries: np.ndarray | None,
                 started: float, corpus_of: Callable[[ReadStats], dict], work_folder: Path) -> dict:
    """Fill ``building`` with an on-disk index folder; return its manifest (see the module docstring).
    ``corpus_of(stats)`` gives the manifest's corpus record once the corpus has been read; the trained
    quantizer and the parts are kept in ``work_folder`` (see ``retriever.partwork``)."""
    from retriever.faiss_index import factory_string, search_defaults, with_search_defaults  # it imports this module

    check_part_settings(params)
    stats, content = ReadStats(), ShardContentCheck(shards)
    write_documents(corpus_path, fmt, fields, building, stats, content, count, progress)
    check_document_count(stats, count, corpus_path, shards[0].parent)
    content.check(corpus_path)
    spec = factory_string(params, dim, count)
    held = held_out_rows(count, params) if tuning_queries is None else np.empty(0, dtype=np.int64)
    plan = PartPlan(shards, held, params.part_size)
    work = PartsFolder(work_folder, inputs_record(shards, encoder, spec, params, held))
    trained_on = trained_quantizer(work, spec, dim, shards, count, params, progress)
    files = fill_parts(work, plan.parts, params, progress)
    tuning = None
    if tuning_queries is not None or len(held):
        tuning, files = tune_on_parts(work.trained, files, building, shards, plan, params, tuning_queries, progress)
    index = merge_parts(work.trained, files, building / IVFDATA_FILE, progress)
    if os.path.exists(building / "part-held.faiss"):
        os.remove(building / "part-held.faiss")
    defaults = search_defaults(index, params, tuning)
    write_ondisk_index(with_search_defaults(index, defaults), building / INDEX_FILE)
    record = {"type": ONDISK_TYPE, "factory": spec, "metric": "inner_product", "dim": dim, "count": int(index.ntotal),
              "codes": params.ondisk_codes, "parts": len(plan.parts), "part_size": params.part_size,
              "trained_on": trained_on, "search_defaults": defaults, "tuning": tuning}
    del index  # unmaps the inverted lists before the folder is renamed
    return write_manifest(building, encoder, corpus_of(stats), started, record)
