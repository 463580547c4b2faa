"""Interrupted and disturbed long runs (probe round 7): what a kill, a deleted folder, a read-only mount or a second
run at the same time leaves, and that the rerun finishes the work."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from retriever.corpus_encoding import encode_corpus, encode_parts
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.folders import exclusive_build
from retriever.indexing import IndexParams, encode_and_index
from retriever.lexical import LexicalParams
from retriever.lexical_part import add_lexical
from retriever.shard_completeness import check_complete
from retriever.shards import done_marker, list_shards, read_shard
from test_corpus_encoding import write_corpus


def tiny_encoder(model_dir: Path) -> Encoder:
    return Encoder(EncoderSettings(model=str(model_dir)), device="cpu", dtype="fp32", batch_size=8)


class FolderDeletedMidRun:
    """Encodes here, part after part, and deletes the whole shard folder once two parts are written (a user's
    `rm -rf` or a cleanup job while the run goes on)."""

    def __init__(self, encoder: Encoder, output: Path) -> None:
        self.encoder, self.output = encoder, output

    def metadata(self) -> dict:
        return self.encoder.metadata()

    def run_parts(self, jobs, progress):
        for number, outcome in enumerate(encode_parts(self.encoder, jobs, progress)):
            if number == 1:
                shutil.rmtree(self.output)
            yield outcome


def test_a_shard_folder_deleted_while_encoding_is_not_marked_done(tiny_model_dir, tmp_path, one_torch_thread):
    """The later shards were written into a folder made again, the done marker too: exit 0 with 2 of 5 shards
    missing, and `index` then said the corpus was not the one encoded."""
    corpus, output = write_corpus(tmp_path / "c.jsonl", 25), tmp_path / "shards"
    encoder = tiny_encoder(tiny_model_dir)
    with pytest.raises(RetrieverError, match=r"embeddings-w000of001-00000\.parquet: missing \(2 of worker 0's 5 "):
        encode_corpus(corpus, output, FolderDeletedMidRun(encoder, output), shard_size=5, progress=False)
    assert not done_marker(output, 0, 1).exists()
    result = encode_corpus(corpus, output, encoder, shard_size=5, progress=False)  # the rerun encodes the two again
    assert (result.encoded, result.skipped) == (10, 15)
    shards, _ = check_complete(output)
    assert [i for shard in shards for i in read_shard(shard)[0]] == [f"doc{i}" for i in range(25)]


def test_a_shard_deleted_after_encoding_is_named_not_the_corpus(tiny_model_dir, tmp_path, one_torch_thread):
    """`index` said `holds 25 documents but the shards hold 20; re-encode this corpus or pass the corpus that was
    encoded`, though the corpus was the one encoded."""
    corpus, output = write_corpus(tmp_path / "c.jsonl", 25), tmp_path / "shards"
    encode_corpus(corpus, output, tiny_encoder(tiny_model_dir), shard_size=5, progress=False)
    list_shards(output)[2].unlink()
    with pytest.raises(RetrieverError, match=r"00002\.parquet: missing \(1 of worker 0's 5 shards.*rerun `retriever "
                                             r"encode`"):
        check_complete(output)


def test_encoding_into_a_read_only_folder_is_one_line(tiny_model_dir, tmp_path, monkeypatch):
    """A shard folder on a read-only mount (its shards complete or not): an OSError traceback from the done
    marker's removal. The mount is stood in for by refusing every entry made or removed in the folder."""
    corpus, output = write_corpus(tmp_path / "c.jsonl", 5), tmp_path / "shards"
    output.mkdir()
    for name in ("mkdir", "unlink"):
        real = getattr(os, name)

        def read_only(path, *args, _real=real, **kwargs):
            if Path(path).parent == output:
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, read_only)
    with pytest.raises(RetrieverError, match=r"shards: nothing can be created in .*shards \(Read-only file system\); "
                                             "choose another --output"):
        encode_corpus(corpus, output, tiny_encoder(tiny_model_dir), shard_size=5, progress=False)


def test_a_second_bm25_run_of_one_index_is_refused_while_one_runs(tiny_beir, tiny_model_dir, tmp_path):
    """Two `bm25 --overwrite` runs at once deleted each other's uncommitted part as unrecorded (`OSError: Directory
    not empty` traceback, or a manifest naming a deleted part) and left an orphan part; a `bm25` during a build of
    the same folder wrote the old manifest into the new folder."""
    index = tmp_path / "idx"
    encode_and_index(tiny_beir, index, tiny_encoder(tiny_model_dir), IndexParams("flat"), progress=False)
    with exclusive_build(index):  # what a running build or bm25 of that folder holds
        with pytest.raises(RetrieverError, match=r"idx: another build of it is running \(pid \d+\); wait for it "
                                                 r"to end$"):
            add_lexical(index, LexicalParams(k1=1.5), overwrite=True, progress=False)
    assert add_lexical(index, LexicalParams(k1=1.5), overwrite=True, progress=False)["k1"] == 1.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx", "idx.shards", "tiny-beir"]  # lock released
