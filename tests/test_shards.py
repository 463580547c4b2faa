"""Shard records as `index` reads them: parts located by each worker's own record."""
from __future__ import annotations

import pytest

from retriever.corpus_encoding import encode_corpus
from retriever.encode_result import describe
from retriever.encoder import Encoder, EncoderSettings
from retriever.indexing import build_index
from retriever.searching import Searcher


@pytest.fixture()
def tiny_encoder(tiny_model_dir) -> Encoder:
    return Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")


def test_workers_that_used_different_shard_sizes_index_together(tiny_beir, tiny_encoder, tmp_path, one_torch_thread):
    """Workers run on their own machines and may pass their own --shard-size: each shard records it. `index` cut
    every worker's share by the last shard's size, so it said the shards were encoded from other documents, and
    the rerun of `encode` it advised reused them and the refusal came back."""
    for worker, shard_size in ((0, 2), (1, 5)):
        encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=shard_size, worker_index=worker,
                      num_workers=2, progress=False)
    build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", progress=False)
    hit = Searcher(tmp_path / "idx", device="cpu", dtype="fp32").search(
        ["Whales the whale and the octopus live in the ocean"], k=1)[0][0]
    assert hit.id == "d8" and hit.score > 0.999


def test_a_rerun_with_another_shard_size_says_so_before_encoding(tiny_beir, tiny_encoder, tmp_path, capsys,
                                                                 one_torch_thread):
    """Every part is cut otherwise, so every part is encoded again: a resume with another --shard-size threw the
    finished shards away in silence, and the summary blamed the corpus (`parts whose documents changed`)."""
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=5, progress=False)
    result = encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=4, progress=False)
    assert (result.changed_parts, result.earlier_shard_size) == (3, 5)
    assert ("shards were cut at --shard-size 5, this run cuts at 4, so every part is encoded again; stop it and "
            "pass --shard-size 5 to reuse them") in capsys.readouterr().err
    assert describe(result).endswith("re-encoded 3 parts cut at --shard-size 5 before")
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=4, progress=False)
    assert capsys.readouterr().err == ""  # cut as before: nothing to say


def test_a_resume_in_batches_of_another_size_goes_on_with_a_note(tiny_beir, tiny_model_dir, tmp_path, capsys,
                                                                  one_torch_thread):
    """The passages a resume encodes in batches of another size round otherwise in their last bits: the index mixed
    them with the first run's without a word (the batch size was recorded nowhere)."""
    from retriever.shards import list_shards, read_shard_metadata

    def encoder(batch_size: int) -> Encoder:
        return Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32", batch_size=batch_size)

    encode_corpus(tiny_beir, tmp_path / "shards", encoder(4), shard_size=5, progress=False)
    assert capsys.readouterr().err == ""
    shards = list_shards(tmp_path / "shards", (0, 1))
    shards[-1].unlink()  # the run stopped before its last part
    result = encode_corpus(tiny_beir, tmp_path / "shards", encoder(2), shard_size=5, progress=False)
    assert (result.skipped, result.encoded) == (10, 2)
    assert capsys.readouterr().err == (
        f"note: {tmp_path / 'shards'}: its shards were encoded in batches of 4 and this run encodes in batches of 2: "
        "it goes on, reusing them, but the vectors it makes round otherwise in their last bits, so they will not all "
        "be an uninterrupted run's; resume with --batch-size 4 to continue it as it was\n")
    assert [read_shard_metadata(path)["shard"]["batch_size"] for path in shards] == [4, 4, 2]


def test_one_short_part_is_the_same_part_at_any_larger_shard_size(tiny_beir, tiny_encoder, tmp_path, capsys):
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=20, progress=False)
    result = encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=30, progress=False)
    assert (result.skipped, result.earlier_shard_size, capsys.readouterr().err) == (12, None, "")


@pytest.mark.parametrize("index_type", ["flat", "ivf-ondisk"])
def test_shards_renamed_into_each_others_places_are_refused_not_indexed(tiny_beir, tiny_encoder, tmp_path,
                                                                        one_torch_thread, index_type):
    """Two shards swapped by name (renamed, or copied over one another): each still matched its own part's content,
    so the build went through with every vector of both put on another passage's row (ivf-ondisk: another document
    came back; flat: the right id with another passage's title and text), exit 0."""
    from retriever.errors import RetrieverError
    from retriever.indexing import IndexParams

    shards = tmp_path / "shards"
    encode_corpus(tiny_beir, shards, tiny_encoder, shard_size=4, progress=False)
    first, second = shards / "embeddings-w000of001-00000.parquet", shards / "embeddings-w000of001-00001.parquet"
    first.rename(tmp_path / "held")
    second.rename(first)
    (tmp_path / "held").rename(second)
    params = IndexParams(index_type, **({"nlist": 2, "train_size": 12} if index_type == "ivf-ondisk" else {}))
    with pytest.raises(RetrieverError, match=r"embeddings-w000of001-00000\.parquet: its record says it is part 1 of "
                                             r"worker 0 of 1, not part 0 as its file name says"):
        build_index(shards, tiny_beir, tmp_path / "idx", params, progress=False)
    assert not (tmp_path / "idx").exists()


def test_a_shard_whose_vector_bytes_were_damaged_in_place_is_refused(tiny_beir, tiny_encoder, tmp_path,
                                                                     one_torch_thread):
    """Same-size damage inside a shard's vector data (a flipped byte: bit rot, a bad copy) passed every record check
    (ids, rows, columns, content) and was indexed as other vectors, exit 0."""
    import numpy as np

    from retriever.errors import RetrieverError
    from retriever.shards import read_shard

    shards = tmp_path / "shards"
    encode_corpus(tiny_beir, shards, tiny_encoder, shard_size=6, progress=False)
    path = shards / "embeddings-w000of001-00001.parquet"
    value = read_shard(path)[1][2, 5]
    data = bytearray(path.read_bytes())
    at = data.find(np.float32(value).tobytes())
    assert at > 0, "the vector's bytes are stored as they are"
    data[at] ^= 0x01  # the lowest mantissa bit: still a finite number
    path.write_bytes(bytes(data))
    import pyarrow.parquet as pq

    assert pq.read_table(path).column("embedding")[2].values[5].as_py() != value  # read past every record check
    with pytest.raises(RetrieverError, match=r"embeddings-w000of001-00001\.parquet: its vectors differ from the "
                                             r"SHA-256 recorded when it was written"):
        build_index(shards, tiny_beir, tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx").exists()


def test_a_stray_shard_beyond_the_done_markers_count_is_named(tiny_beir, tiny_encoder, tmp_path, one_torch_thread):
    """A shard past the count a worker's done marker records (copied in from a run over a larger corpus) made `index`
    blame the corpus ("holds 12 ... the shards hold 16") without naming the shard."""
    import json
    import re
    import shutil

    from retriever.errors import RetrieverError

    larger = tmp_path / "larger.jsonl"
    extra = [{"_id": f"x{i}", "title": "", "text": f"extra passage {i}"} for i in range(4)]
    larger.write_text((tiny_beir / "corpus.jsonl").read_text() + "".join(json.dumps(row) + "\n" for row in extra))
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=4, progress=False)
    encode_corpus(larger, tmp_path / "other", tiny_encoder, shard_size=4, progress=False)
    stray = tmp_path / "shards" / "embeddings-w000of001-00003.parquet"
    shutil.copy(tmp_path / "other" / stray.name, stray)
    with pytest.raises(RetrieverError, match=re.escape(f"{stray}: a stray shard: worker 0's done marker records 3 "
                                                       "shards (parts 0 to 2)")) as error:
        build_index(tmp_path / "shards", tiny_beir, tmp_path / "idx", progress=False, lexical=None)
    assert "corpus" not in str(error.value).split(";")[0] and not (tmp_path / "idx").exists()


def test_a_shard_folder_reads_as_one_parquet_dataset(tiny_beir, tiny_encoder, tmp_path, one_torch_thread):
    """`pd.read_parquet(folder)` (a pyarrow dataset) failed on the done marker, `done-w000of001.json`: not Parquet.
    Markers now start with '_', which Parquet readers skip; a folder with an older marker still indexes."""
    import pandas as pd

    from retriever.shards import done_marker

    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=5, progress=False)
    table = pd.read_parquet(tmp_path / "shards")
    assert sorted(table["id"]) == sorted(f"d{i}" for i in range(1, 13)) and len(table["embedding"][0]) == 32
    marker = done_marker(tmp_path / "shards", 0, 1)
    marker.rename(tmp_path / "shards" / marker.name.lstrip("_"))  # as runs before the rename wrote it
    build_index(tmp_path / "shards", tiny_beir, tmp_path / "index", progress=False)
    encode_corpus(tiny_beir, tmp_path / "shards", tiny_encoder, shard_size=5, progress=False)  # resumes, renames it
    assert [p.name for p in (tmp_path / "shards").glob("*.json")] == ["_done-w000of001.json"]


def test_a_shard_read_failing_for_want_of_memory_or_threads_is_not_called_invalid(tmp_path, monkeypatch):
    """Under `ulimit -v` Arrow cannot start its reading threads: the shard was called invalid, to be re-encoded or
    deleted, though nothing was wrong with it."""
    import numpy as np
    import pyarrow as pa

    from retriever import shards as shard_module
    from retriever.errors import RetrieverError

    path = tmp_path / "embeddings-w000of001-00000.parquet"
    shard_module.write_shard(path, ["a", "b"], np.ones((2, 4), dtype=np.float32), {})

    def no_threads(*args, **kwargs):
        raise pa.lib.ArrowException("Unknown error: Failed to launch worker thread: Resource temporarily unavailable")

    monkeypatch.setattr(shard_module.pq, "ParquetFile", no_threads)
    monkeypatch.setattr(shard_module.pq, "read_metadata", no_threads)
    for read in (shard_module.read_shard, shard_module.shard_ids_sha256, shard_module.read_shard_metadata):
        with pytest.raises(RetrieverError) as caught:
            read(path)
        message = str(caught.value)
        assert message.startswith(f"out of memory reading {path} (Unknown error: Failed to launch worker thread")
        assert "the file is not damaged" in message and "re-encode" not in message and "delete" not in message


def test_a_shard_of_one_row_recording_two_says_one_row(tmp_path):
    """It said "holds 1 rows where its metadata records 2"."""
    import numpy as np

    from retriever.errors import RetrieverError
    from retriever.shards import read_shard_metadata, write_shard

    path = tmp_path / "embeddings-w000of001-00000.parquet"
    record = {"worker": 0, "num_workers": 1, "part": 0, "rows": 2, "shard_size": 2}
    write_shard(path, ["a"], np.ones((1, 4), dtype=np.float32), {"dim": 4, "shard": record})
    with pytest.raises(RetrieverError, match=r"\(holds 1 row where its metadata records 2\)"):
        read_shard_metadata(path)


def test_part_numbers_past_five_digits_are_shards_in_part_order(tmp_path):
    """Part 100000 is named with six digits (a corpus of 10M documents at --shard-size 50): the name pattern took
    exactly five, so `encode` wrote every part, then called that shard missing ('deleted after or while being
    encoded'), and each rerun re-encoded it and failed again (probe round 17)."""
    from retriever.shards import list_shards, parse_shard_name, shard_name

    for split in ((0, 1, 99_999), (0, 1, 100_000), (3, 1_000, 1_234_567)):
        assert parse_shard_name(shard_name(*split)) == split
    for part in (100_000, 99_999, 100_001):
        (tmp_path / shard_name(0, 1, part)).touch()
    assert [parse_shard_name(p.name)[2] for p in list_shards(tmp_path, (0, 1))] == [99_999, 100_000, 100_001]
