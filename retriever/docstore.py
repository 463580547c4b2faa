"""Document lookups by FAISS label and by id, in two layouts.

``ParquetDocuments``: the in-memory index types' ``ids.parquet`` (label → id, doc-store row)
and ``docstore.parquet``, read whole when opened (small collections).

``MappedDocuments``: the on-disk index type's layout, for collections larger than RAM. FAISS
labels are doc-store rows, the doc store is an uncompressed Arrow IPC file opened memory-mapped
(pages come from the file on demand and are shared with the page cache, nothing is decoded up
front), and id → row goes through a second mapped file with the ids sorted, binary-searched
(written by ``retriever.id_order``).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retriever.corpus import Document
from retriever.errors import RetrieverError
from retriever.id_order import sorted_position

DOCSTORE_SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])
MAPPED_DOCSTORE_FILE = "docstore.arrow"
ID_ORDER_FILE = "ids.sorted.arrow"
_BATCH_ROWS = 50_000


def document_tables(documents: Iterable[Document], rows: int = _BATCH_ROWS) -> Iterator[pa.Table]:
    """Documents as id/title/text tables of ``rows`` rows (the last one shorter), in corpus order."""
    batch: dict[str, list[str]] = {"id": [], "title": [], "text": []}
    for document in documents:
        batch["id"].append(document.id)
        batch["title"].append(document.title)
        batch["text"].append(document.text)
        if len(batch["id"]) == rows:
            yield pa.table(batch, schema=DOCSTORE_SCHEMA)
            batch = {key: [] for key in batch}
    if batch["id"]:
        yield pa.table(batch, schema=DOCSTORE_SCHEMA)


def write_mapped_docstore(documents: Iterable[Document], target: Path) -> int:
    """Stream documents into an Arrow IPC file in corpus order; return how many."""
    count = 0
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_file(sink, DOCSTORE_SCHEMA) as writer:
        for table in document_tables(documents):
            writer.write_table(table)
            count += table.num_rows
    return count


def write_parquet_docstore(documents: Iterable[Document], target: Path) -> None:
    """The in-memory index types' doc store: a Parquet file in corpus order."""
    with pq.ParquetWriter(target, DOCSTORE_SCHEMA) as writer:
        for table in document_tables(documents, 10_000):
            writer.write_table(table)


def open_mapped(path: Path) -> pa.ipc.RecordBatchFileReader:
    """An Arrow IPC file whose batches point into the mapped file (nothing is copied)."""
    try:
        return pa.ipc.open_file(pa.memory_map(str(path), "r"))
    except (OSError, pa.ArrowInvalid) as error:
        raise RetrieverError(f"{path}: not a readable Arrow file ({error}); rebuild the index") from None


class MappedDocuments:
    """Memory-mapped doc store + sorted id index: pages are read when a row is asked for."""

    def __init__(self, folder: Path) -> None:
        reader = open_mapped(folder / MAPPED_DOCSTORE_FILE)
        self._batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        self._starts = np.cumsum([0] + [batch.num_rows for batch in self._batches])
        order = open_mapped(folder / ID_ORDER_FILE).get_batch(0)
        self._sorted_ids, self._sorted_rows = order.column("id"), order.column("row")
        self.sorted_ids = len(self._sorted_ids)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _field(self, name: str, labels: Sequence[int]) -> list:
        """One column at the given rows, gathered batch by batch (only those rows' pages are read)."""
        labels = np.asarray(labels, dtype=np.int64)
        if len(labels) and (labels.min() < 0 or labels.max() >= len(self)):
            raise IndexError(f"doc-store row out of range 0..{len(self) - 1}")
        where = np.searchsorted(self._starts, labels, side="right") - 1
        values: list = [None] * len(labels)
        for batch in np.unique(where):
            positions = np.flatnonzero(where == batch)
            found = self._batches[batch].column(name).take(pa.array(labels[positions] - self._starts[batch]))
            for position, value in zip(positions, found.to_pylist()):
                values[position] = value
        return values

    def ids_of(self, labels: Sequence[int]) -> list[str]:
        return self._field("id", labels)

    def labels_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """FAISS labels of doc-store rows (BM25 returns rows): here they are the same numbers."""
        return rows

    def records(self, labels: Sequence[int]) -> dict[str, list]:
        return {name: self._field(name, labels) for name in ("title", "text")}

    def lacking(self, doc_ids: Sequence[str]) -> list[str]:
        """Those of ``doc_ids`` the index does not hold, in their order: the sorted ids alone are searched."""
        return [doc_id for doc_id in doc_ids if sorted_position(self._sorted_ids, doc_id) is None]

    def document(self, doc_id: str) -> dict | None:
        """Title and text of one id, or None; found by binary search in the mapped sorted ids."""
        position = sorted_position(self._sorted_ids, doc_id)
        if position is None:
            return None
        row = self._sorted_rows[position].as_py()
        return {key: values[0] for key, values in self.records([row]).items()}


class ParquetDocuments:
    """The in-memory types' id map (FAISS row → id, doc-store row) and doc store, read whole."""

    def __init__(self, id_map: pa.Table, docstore: pa.Table) -> None:
        self.ids: list[str] = id_map.column("id").to_pylist()
        self.rows = id_map.column("docstore_row").to_numpy()
        self._docstore = docstore
        self.docstore_rows = docstore.num_rows
        self._row_of: dict[str, int] | None = None
        self._label_of_row: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def ids_of(self, labels: Sequence[int]) -> list[str]:
        return [self.ids[label] for label in labels]

    def labels_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """FAISS labels of doc-store rows (BM25 returns rows), through the id map's inverse, made once."""
        if self._label_of_row is None:
            self._label_of_row = np.empty(len(self.rows), dtype=np.int64)
            self._label_of_row[self.rows] = np.arange(len(self.rows))
        return self._label_of_row[rows]

    def records(self, labels: Sequence[int]) -> dict[str, list]:
        return self._docstore.take(np.asarray([self.rows[label] for label in labels],
                                              dtype=np.int64)).to_pydict()

    def lacking(self, doc_ids: Sequence[str]) -> list[str]:
        """Those of ``doc_ids`` the index does not hold, in their order: the doc store's ids are matched against them
        in Arrow, not through ``document``'s map of every id to its row, a Python dict of the whole collection."""
        ids = self._docstore.column("id")
        held = set(pc.unique(pc.filter(ids, pc.is_in(ids, value_set=pa.array(doc_ids, pa.string())))).to_pylist())
        return [doc_id for doc_id in doc_ids if doc_id not in held]

    def document(self, doc_id: str) -> dict | None:
        """Title and text of one id, or None (the first call maps every id to its row)."""
        if self._row_of is None:
            self._row_of = {doc_id: i for i, doc_id in enumerate(self._docstore.column("id").to_pylist())}
        row = self._row_of.get(doc_id)
        return None if row is None else {key: values[0] for key, values in self._docstore.take([row]).to_pydict().items()}
