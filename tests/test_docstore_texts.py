"""The doc store's texts as BM25 reads them: the same rows, in the same order, from either layout."""
from __future__ import annotations

import pytest

from retriever.corpus import Document
from retriever.docstore import write_mapped_docstore, write_parquet_docstore
from retriever.docstore_texts import document_count, document_texts

DOCUMENTS = [Document("d1", "a cat", "Pets"), Document("d2", "no title here", ""), Document("d3", "", "Only title")]


@pytest.mark.parametrize("name, write", [("docstore.parquet", write_parquet_docstore),
                                         ("docstore.arrow", write_mapped_docstore)])
def test_both_layouts_give_each_rows_title_and_text_in_row_order(tmp_path, name, write):
    write(DOCUMENTS, tmp_path / name)
    assert document_count(tmp_path / name) == 3
    assert list(document_texts(tmp_path / name, batch_rows=2)) == ["Pets a cat", "no title here", "Only title"]
