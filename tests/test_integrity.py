"""Hashing what an index folder records."""
from __future__ import annotations

import os
import time

import retriever.integrity as integrity
from retriever.corpus import ReadStats
from retriever.evaluation import corpus_difference
from retriever.index_folder import corpus_record


def _counting_hashes(monkeypatch) -> list:
    """Every whole read of a file to hash it, wherever the hashing function was imported."""
    reads, real = [], integrity.file_sha256

    def counted(path, *args, **kwargs):
        reads.append(path)
        return real(path, *args, **kwargs)

    for module in ("retriever.integrity", "retriever.evaluation", "retriever.index_folder"):
        monkeypatch.setattr(f"{module}.file_sha256", counted, raising=False)
    return reads


def test_a_corpus_hashed_for_the_manifest_is_not_read_again_by_the_other_corpus_check(tmp_path, monkeypatch):
    """`build --tune-fusion-on` hashed the corpus for the manifest, then its tuning hashed the same file again to
    tell whether it is the index's corpus: a whole extra read of a large corpus. A file changed since is read again."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a"}\n')
    old = time.time() - 100  # as a corpus is: written well before it is hashed
    os.utime(corpus, (old, old))
    reads = _counting_hashes(monkeypatch)
    record = corpus_record(corpus, tmp_path / "index", [], ReadStats(), progress=False)
    assert corpus_difference(record, corpus) is None
    assert reads == [corpus]
    corpus.write_text('{"_id": "d1", "text": "b"}\n')  # the same size, other content
    assert corpus_difference(record, corpus) == "the same size, other content"
    assert len(reads) == 2


def test_a_file_changed_just_before_it_is_hashed_is_not_remembered(tmp_path, monkeypatch):
    """A write in the same clock tick as the hash, and another after it, leave one modification time: a file written
    moments before it is hashed is hashed again next time."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("x")
    reads = _counting_hashes(monkeypatch)
    assert integrity.remembered_sha256(corpus) == integrity.remembered_sha256(corpus)
    assert len(reads) == 2
