"""Corpus and queries records from Parquet rows, ids and texts as strings, as ``corpus_records`` reads JSON lines.

``retriever.corpus`` streams whole files through these; every problem is ``file:row: what is wrong; what to do``.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from retriever.corpus_records import TITLE_HINT, Fields, as_id, as_text, listed_names, missing_field
from retriever.errors import InputFileError


def parquet_records(path: Path, fields: Fields) -> Iterator[tuple[int, str, str, str, dict]]:
    """(row, id, text, title, {}) per row, read a batch of rows at a time."""
    try:
        parquet = pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises several types for a broken file
        raise InputFileError(path, None, f"not a readable Parquet file ({error})") from None
    listed = parquet.schema_arrow.names
    names = set(listed)
    for column in {fields.id, fields.text, fields.title}:
        if listed.count(column) > 1:  # the batch's dict would keep one of them, silently
            raise InputFileError(path, None, f"the column {column!r} is there {listed.count(column)} times",
                                 "give each column its own name")
    missing = missing_field(fields, names)
    if missing is not None:
        raise InputFileError(path, None, f"missing column {missing[1]!r} (columns: {listed_names(names)})",
                             f"pass --{missing[0]}-field if the {missing[0]} lives under another column")
    if fields.title_named and fields.title not in names:
        raise InputFileError(path, None, f"no title column {fields.title!r} (columns: {listed_names(names)})", TITLE_HINT)
    columns = [c for c in (fields.id, fields.text, fields.title) if c in names]
    binary = [c for c in columns if _is_binary(parquet.schema_arrow.field(c).type)]
    row = 0
    for batch in parquet.iter_batches(columns=columns, batch_size=8192):
        data = batch.to_pydict()
        for column in binary:
            data[column] = _utf8_values(data[column], path, row, column)
        ids = data[fields.id]
        texts = data.get(fields.text, [None] * len(ids))
        titles = data.get(fields.title, [None] * len(ids)) if fields.reads_title else [None] * len(ids)
        for doc_id, text, title in zip(ids, texts, titles):
            row += 1
            yield (row, as_id(doc_id, path, row, fields.id, "parquet"),
                   as_text(text, path, row, fields.text, "parquet"), as_text(title, path, row, fields.title, "parquet"),
                   {})


def _is_binary(kind: pa.DataType) -> bool:
    """Whether a column holds bytes: any binary type, or a dictionary of them (pandas' categorical of bytes)."""
    kind = kind.value_type if pa.types.is_dictionary(kind) else kind
    view = getattr(pa.types, "is_binary_view", lambda _: False)  # pyarrow 16 on
    return any(check(kind) for check in (pa.types.is_binary, pa.types.is_large_binary, view,
                                         pa.types.is_fixed_size_binary))


def _utf8_values(values: list, path: Path, row: int, name: str) -> list:
    """A binary column's values (bytes, as pandas stores bytes objects) decoded as UTF-8, as the JSONL and TSV
    readers decode their bytes: they were refused as "got bytes". ``row``: the rows before these."""
    decoded = []
    for number, value in enumerate(values, start=row + 1):
        try:
            decoded.append(value if value is None else bytes(value).decode("utf-8"))
        except UnicodeDecodeError as error:
            raise InputFileError(path, number, f"field {name!r} holds invalid UTF-8 at byte {error.start} of its "
                                 "value", "re-encode the column as UTF-8 text (a string column)") from None
    return decoded
