"""What makes a shard folder a finished encoding, as `index` checks it: every worker done, no shard missing, stray
or outside the split."""
from __future__ import annotations

import pytest

from retriever.corpus_encoding import encode_corpus
from retriever.encoder import Encoder, EncoderSettings
from retriever.shard_completeness import check_complete, worker_shards


@pytest.fixture()
def tiny_encoder(tiny_model_dir) -> Encoder:
    return Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")


def test_a_folder_with_only_an_empty_workers_done_marker_names_the_workers_that_have_not_run(tiny_encoder, tmp_path):
    """A worker with no documents (more workers than documents) finishes at once with no shard; with only it done,
    the folder was said to hold no shards ("run `retriever encode` first"), naming no worker."""
    from retriever.errors import RetrieverError
    corpus = tmp_path / "one.jsonl"
    corpus.write_text('{"_id": "a", "text": "a lone passage"}\n')
    encode_corpus(corpus, tmp_path / "shards", tiny_encoder, worker_index=1, num_workers=2, progress=False)
    with pytest.raises(RetrieverError, match=r"worker 0 of 2 has not finished encoding; rerun `retriever encode "
                                             r"--worker-index 0 --num-workers 2`"):
        check_complete(tmp_path / "shards")


@pytest.mark.parametrize("record_worker", [2, 1])
def test_a_shard_named_for_a_worker_outside_the_split_is_refused_naming_it(tiny_beir, tiny_encoder, tmp_path,
                                                                           one_torch_thread, record_worker):
    """A shard named for worker 2 of 2 (workers are 0 and 1) was never looked at by the done-marker checks, so one
    whose record agreed with its name passed `check_complete` and its rows went into the index."""
    import re

    from retriever.errors import RetrieverError
    from retriever.shards import read_shard, read_shard_metadata, write_shard

    shards = tmp_path / "shards"
    for worker in (0, 1):
        encode_corpus(tiny_beir, shards, tiny_encoder, shard_size=4, worker_index=worker, num_workers=2,
                      progress=False)
    source = shards / "embeddings-w001of002-00000.parquet"
    metadata = read_shard_metadata(source)
    metadata["shard"]["worker"] = record_worker
    outside = shards / "embeddings-w002of002-00000.parquet"
    write_shard(outside, *read_shard(source)[:2], metadata)
    with pytest.raises(RetrieverError, match=re.escape(f"{outside}: named for worker 2 of 2, but the split's workers "
                                                       "are 0 to 1")):
        check_complete(shards)


@pytest.mark.parametrize("count, gone", [(1, "1 of worker 0's 1 shard is gone"), (2, "2 of worker 0's 2 shards are gone")])
def test_missing_shards_are_counted_in_agreement(tmp_path, count, gone):
    """One missing shard of one was said as "1 of worker 0's 1 shards are gone"."""
    from retriever.errors import RetrieverError

    with pytest.raises(RetrieverError, match=f"missing \\({gone}, deleted"):
        worker_shards(tmp_path, 0, 1, count)


def test_a_stray_shard_past_one_recorded_names_one_shard(tmp_path):
    """It said "worker 0's done marker records 1 shards"."""
    from retriever.errors import RetrieverError
    from retriever.shards import shard_name

    for part in (0, 1):
        (tmp_path / shard_name(0, 1, part)).write_bytes(b"")
    with pytest.raises(RetrieverError, match=r"a stray shard: worker 0's done marker records 1 shard \(parts 0 to 0\);"):
        worker_shards(tmp_path, 0, 1, 1)


def test_a_done_marker_recording_a_huge_shard_count_is_answered_at_once(tmp_path):
    """A marker edited (or damaged) to record 10**12 shards listed every missing part number: `index` hung and grew
    towards terabytes of memory before it could say one was missing (probe round 17)."""
    import time

    from retriever.errors import RetrieverError
    from retriever.shards import shard_name

    (tmp_path / shard_name(0, 1, 0)).write_bytes(b"")
    started = time.perf_counter()
    with pytest.raises(RetrieverError, match=r"embeddings-w000of001-00001\.parquet: missing \(999999999999 of worker "
                                             r"0's 1000000000000 shards are gone"):
        worker_shards(tmp_path, 0, 1, 10**12)
    assert time.perf_counter() - started < 1
