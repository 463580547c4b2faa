"""ids.sorted.arrow by external sort: the same file the in-memory sort wrote, duplicates refused."""
from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from retriever.corpus import Document
from retriever.docstore import open_mapped, write_mapped_docstore
from retriever.errors import RetrieverError
from retriever.id_order import write_id_order


def docstore_of(path, ids: list[str]):
    write_mapped_docstore((Document(doc_id, "", "t") for doc_id in ids), path)
    return open_mapped(path)


def in_memory_sort(docstore, target) -> None:
    """How ids.sorted.arrow was written before (and how the 10M benchmark's folder was): one sort in memory."""
    ids = docstore.read_all().column("id")
    order = pc.sort_indices(ids)
    batch = pa.record_batch({"id": ids.take(order).combine_chunks(), "row": order.cast(pa.int64())})
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


@pytest.mark.parametrize("run_rows", [37, 1000, 5000])
def test_runs_merge_into_the_in_memory_sorts_file(tmp_path, run_rows):
    rng = random.Random(run_rows)
    ids = [f"{rng.choice(['doc', 'd', 'é-', ''])}{rng.randrange(10**9)}" for _ in range(3000)]
    ids = list(dict.fromkeys(ids)) + ["", "zzzz", "日本"]
    docstore = docstore_of(tmp_path / "docstore.arrow", ids)
    in_memory_sort(docstore, tmp_path / "reference.arrow")
    write_id_order(docstore, tmp_path / "ids.sorted.arrow", run_rows=run_rows)
    assert (tmp_path / "ids.sorted.arrow").read_bytes() == (tmp_path / "reference.arrow").read_bytes()
    order = open_mapped(tmp_path / "ids.sorted.arrow")
    assert order.num_record_batches == 1  # MappedDocuments reads batch 0 only
    assert [p.name for p in tmp_path.iterdir()] != [] and not list(tmp_path.glob(".*sorting*"))


@pytest.mark.parametrize("ids, duplicate, records", [(["b", "a", "c", "a"], "a", "2 and 4"),  # in different runs
                                                     (["x", "x", "y"], "x", "1 and 2"),  # in one run
                                                     (["m", "q", "n", "q", "p", "q"], "q", "[246] and [46]")])
def test_duplicate_ids_are_refused_wherever_they_fall(tmp_path, ids, duplicate, records):
    docstore = docstore_of(tmp_path / "docstore.arrow", ids)
    with pytest.raises(RetrieverError, match=f"^corpus.jsonl: duplicate document id '{duplicate}' \\(records {records}\\)"):
        write_id_order(docstore, tmp_path / "ids.sorted.arrow", run_rows=2, source="corpus.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docstore.arrow"]
