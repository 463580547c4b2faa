"""The doc store's title and text of each row, in row order and one batch in memory at a time: what BM25 indexes,
read from either layout (``docstore``), so the corpus is never held whole as text."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq

from retriever.texts import passage_text


def _text_batches(docstore: Path, batch_rows: int) -> Iterator:
    """Record batches of the doc store: Parquet (in-memory index types) or the on-disk type's mapped Arrow file."""
    if docstore.suffix == ".arrow":
        from retriever.docstore import open_mapped

        reader = open_mapped(docstore)
        return (reader.get_batch(i) for i in range(reader.num_record_batches))
    return pq.ParquetFile(docstore).iter_batches(batch_size=batch_rows, columns=["title", "text"])


def document_count(docstore: Path) -> int:
    """Rows in the doc store, read from its footer or mapped file without reading a text."""
    if docstore.suffix == ".arrow":
        from retriever.docstore import open_mapped

        return open_mapped(docstore).read_all().num_rows  # zero-copy views of the mapped file
    return pq.ParquetFile(docstore).metadata.num_rows


def document_texts(docstore: Path, batch_rows: int = 10_000) -> Iterator[str]:
    """Title and text of each doc-store row, in row order, one batch in memory at a time."""
    for batch in _text_batches(docstore, batch_rows):
        for title, text in zip(batch.column("title").to_pylist(), batch.column("text").to_pylist()):
            yield passage_text(title, text or "")
