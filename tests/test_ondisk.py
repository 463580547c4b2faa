"""ivf-ondisk: built in parallel parts, merged to on-disk lists, searched memory-mapped."""
from __future__ import annotations

import json
import os
import shutil

import faiss
import numpy as np
import pyarrow as pa
import pytest

from retriever.corpus_encoding import encode_corpus
from retriever.docstore import MappedDocuments
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, build_index
from retriever.integrity import file_sha256
from retriever.lexical_part import add_lexical
from retriever.ondisk import IVFDATA_FILE
from retriever.searching import Searcher
from fixtures_corpora import write_jsonl
from fixtures_ondisk import ONDISK_PARAMS, ONDISK_QUERIES, ondisk_hits

def test_ondisk_matches_in_memory_ivf_with_same_training(ondisk_index, ondisk_shards, ondisk_corpus, tmp_path):
    build_index(ondisk_shards, ondisk_corpus, tmp_path / "memory", IndexParams("IVF8,Flat", train_size=400),
                progress=False)
    mapped, memory = Searcher(ondisk_index, device="cpu"), Searcher(tmp_path / "memory", device="cpu")
    invlists = faiss.extract_index_ivf(mapped.index).invlists
    assert isinstance(faiss.downcast_InvertedLists(invlists), faiss.OnDiskInvertedLists)
    assert mapped.manifest["index"]["parts"] == 4 and mapped.index.ntotal == 400
    for nprobe in (1, 3, 8):
        assert ondisk_hits(mapped, nprobe) == ondisk_hits(memory, nprobe)


def test_bm25_and_hybrid_on_ondisk_match_an_in_memory_index(ondisk_index, ondisk_shards, ondisk_corpus, tmp_path):
    """BM25 rows are doc-store rows; on-disk lists renumber vectors by part, so the row → label map must hold."""
    from retriever.info import verify_index

    build_index(ondisk_shards, ondisk_corpus, tmp_path / "memory", IndexParams("IVF8,Flat", train_size=400),
                progress=False)
    mapped, memory = Searcher(ondisk_index, device="cpu"), Searcher(tmp_path / "memory", device="cpu")
    assert mapped.lexical is not None and mapped.lexical.count == 400
    for mode in ("bm25", "hybrid"):
        nprobe = 8 if mode == "hybrid" else None  # BM25 alone refuses a dense search setting
        found = [[(hit.id, round(hit.score, 5)) for hit in row]
                 for row in mapped.search(ONDISK_QUERIES, 10, nprobe, mode=mode)]
        assert found == [[(hit.id, round(hit.score, 5)) for hit in row]
                         for row in memory.search(ONDISK_QUERIES, 10, nprobe, mode=mode)]
        assert all(len(row) == 10 for row in found)
    bm25_files, built_from = mapped.manifest["lexical"]["files"], mapped.manifest["lexical"]["docstore"]
    assert built_from == {"file": "docstore.arrow", "sha256": file_sha256(ondisk_index / "docstore.arrow")}
    assert verify_index(ondisk_index) == len(mapped.manifest["integrity"]["files"]) + len(bm25_files) > len(bm25_files)
    rebuilt = tmp_path / "rebuilt"  # `retriever bm25 --overwrite` reads the mapped Arrow doc store
    shutil.copytree(ondisk_index, rebuilt)
    assert add_lexical(rebuilt, overwrite=True, progress=False)["files"] == bm25_files
    assert json.loads((rebuilt / "manifest.json").read_text())["lexical"]["docstore"] == built_from
    again = Searcher(rebuilt, device="cpu").rank(ONDISK_QUERIES, 10, "bm25")
    assert again[1].tolist() == mapped.rank(ONDISK_QUERIES, 10, "bm25")[1].tolist()


def test_moved_folder_still_opens(ondisk_index, tmp_path, tiny_model_dir):
    before = ondisk_hits(Searcher(ondisk_index, device="cpu"), 4)
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    os.rename(ondisk_index, moved)
    try:
        # the model's recorded path is relative to the folder, so a moved index is told where the model is
        assert ondisk_hits(Searcher(moved, device="cpu", model=str(tiny_model_dir)), 4) == before
    finally:
        os.rename(moved, ondisk_index)


def test_missing_ivfdata_is_a_clear_error(ondisk_index, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(ondisk_index, copy)
    (copy / IVFDATA_FILE).unlink()
    with pytest.raises(RetrieverError, match="index.ivfdata: missing"):
        Searcher(copy, device="cpu")


def test_another_builds_index_faiss_of_the_same_size_is_named_not_the_lists(ondisk_index, ondisk_shards, ondisk_corpus,
                                                                             tmp_path):
    """Another build's list directory reads this build's lists at the wrong places: the first search's rows were
    called damage to index.ivfdata, which is whole."""
    build_index(ondisk_shards, ondisk_corpus, tmp_path / "other", IndexParams(**{**ONDISK_PARAMS, "train_size": 320}),
                progress=False)
    copy = shutil.copytree(ondisk_index, tmp_path / "copy")
    assert (tmp_path / "other" / "index.faiss").stat().st_size == (copy / "index.faiss").stat().st_size
    shutil.copy(tmp_path / "other" / "index.faiss", copy / "index.faiss")
    with pytest.raises(RetrieverError, match=rf"^{copy / 'index.faiss'}: its SHA-256 differs from the one the manifest "
                                             r"records \(another build's index.faiss, or damaged\), so it would read "
                                             r"index.ivfdata's lists at the wrong places; [^\n]*rebuild[^\n]*$"):
        Searcher(copy, device="cpu").search(ONDISK_QUERIES, k=10, nprobe=8)


def test_a_directory_in_place_of_the_lists_is_said_to_be_one_not_missing(ondisk_index, tmp_path):
    copy = shutil.copytree(ondisk_index, tmp_path / "copy")
    (copy / IVFDATA_FILE).unlink()
    (copy / IVFDATA_FILE).mkdir()
    with pytest.raises(RetrieverError, match=rf"^{copy / IVFDATA_FILE}: a directory where a file should be; "
                                             r"[^\n]*rebuild[^\n]*$"):
        Searcher(copy, device="cpu")


def test_an_address_space_limit_below_the_lists_is_said_not_called_damage(ondisk_index, monkeypatch):
    """Under `ulimit -v` below index.ivfdata's size FAISS cannot map the lists: that is the limit, not damage (it said
    the folder was damaged and to rebuild it, which fails alike)."""
    real = faiss.read_index

    def mapped_under_a_limit(path, *flags):
        if flags:
            raise RuntimeError("Error in void faiss::OnDiskInvertedLists::do_mmap() at /project/faiss/invlists/"
                               "OnDiskInvertedLists.cpp:285: Error: 'ptro != MAP_FAILED' failed: could not mmap "
                               f"{ondisk_index}/index.ivfdata: Cannot allocate memory")
        return real(path)

    monkeypatch.setattr(faiss, "read_index", mapped_under_a_limit)
    with pytest.raises(RetrieverError) as caught:
        Searcher(ondisk_index, device="cpu")
    message = str(caught.value)
    assert message.startswith(f"out of memory opening {ondisk_index / 'index.faiss'} ('ptro != MAP_FAILED' failed: "
                              f"could not mmap {ondisk_index}/index.ivfdata: Cannot allocate memory; the file is "
                              "not damaged)")
    assert "rebuild" not in message and "ulimit -v" in message


def _opened_by_another_user(folder) -> str:
    """What opening the index in ``folder`` gives a user who does not own its files (root cannot be refused a file:
    a forked child drops to nobody; it only reads, so nothing it runs needs a thread or an import)."""
    from retriever.index_opening import open_index

    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome comes back through the pipe
        os.close(reader)
        outcome = "opened"
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            index, _ = open_index(folder, json.loads((folder / "manifest.json").read_text()))
            outcome = f"opened {index.ntotal}"
        except BaseException as error:  # noqa: BLE001 - any failure is the outcome
            outcome = f"{type(error).__name__}: {error}"
        os.write(writer, outcome.encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        outcome = pipe.read().decode()
    os.waitpid(child, 0)
    return outcome


def _shared_copy(ondisk_index, mode: int):
    """A copy of the index anyone may reach, its files at ``mode``, its folder read-only."""
    import tempfile
    from pathlib import Path

    root = Path(tempfile.mkdtemp())
    root.chmod(0o755)
    copy = root / "shared"
    shutil.copytree(ondisk_index, copy)
    for path in copy.rglob("*"):
        path.chmod(0o555 if path.is_dir() else mode)
    copy.chmod(0o555)
    return copy


def test_an_ondisk_index_of_read_only_files_opens_for_a_user_who_cannot_write_them(ondisk_index):
    """FAISS mapped index.ivfdata for writing (mode r+): a read-only folder, or one of another user's files, was
    called damaged, to be rebuilt."""
    copy = _shared_copy(ondisk_index, 0o444)
    try:
        assert _opened_by_another_user(copy) == "opened 400"
    finally:
        _remove_shared(copy)


def test_an_index_file_the_user_may_not_read_is_said_so_not_called_damaged(ondisk_index):
    copy = _shared_copy(ondisk_index, 0o444)
    copy.chmod(0o755)
    (copy / IVFDATA_FILE).chmod(0o400)
    try:
        outcome = _opened_by_another_user(copy)
    finally:
        _remove_shared(copy)
    assert outcome.startswith(f"RetrieverError: {copy / 'index.faiss'}: this user may not read it (")
    assert "Permission denied" in outcome and "read access" in outcome and "rebuild" not in outcome


def _remove_shared(copy) -> None:
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(copy.parent)


def test_workers_split_shards_label_the_same_documents(ondisk_index, ondisk_corpus, ondisk_encoder, tmp_path):
    split = tmp_path / "split"
    for worker in range(2):
        encode_corpus(ondisk_corpus, split, ondisk_encoder, shard_size=60, worker_index=worker, num_workers=2,
                      progress=False)
    build_index(split, ondisk_corpus, tmp_path / "idx", IndexParams(**ONDISK_PARAMS), progress=False)
    assert ondisk_hits(Searcher(tmp_path / "idx", device="cpu"), 8) == ondisk_hits(Searcher(ondisk_index, device="cpu"),
                                                                                    8)


def test_target_recall_tunes_nprobe_and_adds_held_out_vectors(ondisk_shards, ondisk_corpus, tmp_path):
    params = IndexParams(**{**ONDISK_PARAMS, "ondisk_codes": "sq8"}, target_recall=0.9, tuning_queries=60)
    manifest = build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", params, progress=False)
    tuning = manifest["index"]["tuning"]
    assert tuning["parameter"] == "nprobe" and tuning["lower_bound"] >= 0.9
    assert manifest["index"]["search_defaults"]["nprobe"] == tuning["value"] < 8
    searcher = Searcher(tmp_path / "idx", device="cpu")
    assert searcher.default_nprobe == tuning["value"] and searcher.index.ntotal == 400
    labels = searcher.search_vectors(searcher.encoder.encode_queries(ONDISK_QUERIES[:1]), 400, nprobe=8)[1]
    assert sorted(labels[0].tolist()) == list(range(400))  # every row, held-out ones included, once


def test_id_lookups_read_rows_not_the_whole_store(ondisk_index):
    allocated = pa.total_allocated_bytes()
    documents = MappedDocuments(ondisk_index)
    assert pa.total_allocated_bytes() - allocated < 10_000
    assert documents.ids_of([5, 0, 399]) == ["doc0005", "doc0000", "doc0399"]
    assert documents.document("doc0123")["text"] == documents.records([123])["text"][0]
    assert documents.document("nope") is None and documents.document("doc9999") is None
    assert documents.lacking(["doc0123", "nope", "doc9999"]) == ["nope", "doc9999"]
    searcher = Searcher(ondisk_index, device="cpu")
    assert searcher.document_text("doc0007").endswith(documents.records([7])["text"][0])


def test_shards_from_another_corpus_are_refused(ondisk_shards, tmp_path):
    other = write_jsonl(tmp_path / "other.jsonl", [{"_id": f"x{i:04d}", "text": "a b"} for i in range(400)])
    with pytest.raises(RetrieverError, match="encoded from other documents"):
        build_index(ondisk_shards, other, tmp_path / "idx", IndexParams(**ONDISK_PARAMS), progress=False)
    assert not (tmp_path / "idx").exists()


def test_opening_prints_no_faiss_notes(ondisk_index, capfd):
    Searcher(ondisk_index, device="cpu", dtype="fp32").search(ONDISK_QUERIES[:1], k=3)
    printed = capfd.readouterr()
    assert "ONDISK" not in printed.out + printed.err and "ivfdata" not in printed.out + printed.err, printed


def test_a_merge_the_disk_cannot_hold_is_refused_not_killed(ondisk_shards, ondisk_corpus, tmp_path, monkeypatch):
    import retriever.ivfmerge as ivfmerge

    # FAISS sizes index.ivfdata and writes it through a memory map: a full disk would kill the process (SIGBUS)
    monkeypatch.setattr(ivfmerge.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(RetrieverError, match=r"KiB are needed for index\.ivfdata and 0 KiB are free on its file "
                                             r"system; free some space \(or choose another path\) and rerun the same command"):
        build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**ONDISK_PARAMS), progress=False)
    assert not (tmp_path / "idx").exists()


def test_the_doc_store_pass_shows_its_progress_with_a_total(ondisk_shards, ondisk_corpus, tmp_path, capsys):
    """An in-memory build draws a `doc store` bar over the corpus pass; the on-disk one, made for corpora of millions,
    read the whole corpus (and sorted its ids) with nothing on stderr."""
    build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**{**ONDISK_PARAMS, "parallel_parts": 1}),
                lexical=None)
    bar = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("doc store")]
    assert bar and "400/400" in bar[-1], bar


def test_the_merge_of_the_parts_shows_its_progress_over_the_lists(ondisk_shards, ondisk_corpus, tmp_path, capfd):
    """The merge into index.ivfdata (and the tuning's merge before it) wrote the whole index with nothing on stderr;
    FAISS's verbose merge says how many lists it has merged, which the bar follows, and nothing reaches stdout."""
    build_index(ondisk_shards, ondisk_corpus, tmp_path / "idx", IndexParams(**{**ONDISK_PARAMS, "parallel_parts": 1}),
                lexical=None)
    captured = capfd.readouterr()
    nlist = ONDISK_PARAMS["nlist"]
    bar = [line for line in captured.err.replace("\r", "\n").splitlines() if line.startswith("merge lists")]
    assert bar and f"{nlist}/{nlist}" in bar[-1], bar
    assert "merged" not in captured.out and "resizing" not in captured.out


def test_plain_faiss_opens_the_ondisk_index_with_the_manifests_nprobe(ondisk_index):
    """The file held FAISS's own nprobe 1 while the manifest's default (here min(16, nlist)) was retriever's alone."""
    recorded = json.loads((ondisk_index / "manifest.json").read_text())["index"]["search_defaults"]["nprobe"]
    plain = faiss.read_index(str(ondisk_index / "index.faiss"), faiss.IO_FLAG_ONDISK_SAME_DIR)
    assert faiss.extract_index_ivf(plain).nprobe == recorded == 8
