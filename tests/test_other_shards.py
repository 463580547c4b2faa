"""Shards another encoder or split made in a folder being encoded: refused before it changes, or cleared by
`build --overwrite`."""
from __future__ import annotations

import pytest

from retriever.corpus_encoding import encode_corpus
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.other_shards import clear_other_encoder
from retriever.shard_completeness import check_complete
from retriever.shards import list_shards
from test_corpus_encoding import encoder, shard_contents, write_corpus


def test_shards_of_another_split_or_encoder_are_refused_before_the_folder_changes(tiny_model_dir, tmp_path):
    """Only the shards a run rewrote were compared: `--num-workers 2` with another model wrote beside a finished
    one-worker folder (two encoders' vectors in one folder), and a refused rerun deleted the done marker."""
    corpus = write_corpus(tmp_path / "c.jsonl", 6)
    out = tmp_path / "out"
    encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, progress=False)
    before = shard_contents(out)
    other = Encoder(EncoderSettings(model=str(tiny_model_dir), pooling="cls"), device="cpu", dtype="fp32")
    with pytest.raises(RetrieverError, match="different encoder or split.*pooling"):
        encode_corpus(corpus, out, other, shard_size=2, worker_index=1, num_workers=2, progress=False)
    with pytest.raises(RetrieverError, match=r"different encoder or split \(num_workers: 1 vs 2\)"):
        encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, num_workers=2, progress=False)
    assert shard_contents(out) == before
    check_complete(out)  # still finished


def test_overwrite_clears_another_encoders_shards_behind_a_damaged_first_one(tiny_model_dir, tmp_path):
    """`build --overwrite` read only the first shard to tell whose the folder was: a truncated first shard hid
    the other encoder's shards, and the build it had asked to replace them refused them."""
    corpus = write_corpus(tmp_path / "c.jsonl", 6)
    out = tmp_path / "out"
    encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, progress=False)
    first = list_shards(out)[0]
    first.write_bytes(first.read_bytes()[:100])  # killed mid-copy, or a full disk
    (out / "notes.txt").write_text("mine")
    other = Encoder(EncoderSettings(model=str(tiny_model_dir), pooling="cls"), device="cpu", dtype="fp32")
    assert clear_other_encoder(out, other.metadata())
    assert list_shards(out) == [] and (out / "notes.txt").read_text() == "mine"
    assert encode_corpus(corpus, out, other, shard_size=2, progress=False).encoded == 6


def test_an_encode_folder_is_told_how_to_replace_its_shards_and_a_build_one_its_overwrite(tiny_model_dir, tmp_path):
    """`encode` has no --overwrite: its refusal advised `build --overwrite`, which does not touch an encode folder;
    it names the files to delete, and `build --overwrite` only for a build's OUT.shards folder."""
    import shlex
    import subprocess

    corpus = write_corpus(tmp_path / "c.jsonl", 4)
    other = Encoder(EncoderSettings(model=str(tiny_model_dir), pooling="cls"), device="cpu", dtype="fp32")
    for name, build in (("my out", False), ("idx.shards", True)):
        out = tmp_path / name
        encode_corpus(corpus, out, encoder(tiny_model_dir), shard_size=2, progress=False)
        with pytest.raises(RetrieverError) as refused:
            encode_corpus(corpus, out, other, shard_size=2, progress=False)
        assert ("build --overwrite" in str(refused.value)) == build
        command = str(refused.value).split("(rm ")[1].split(")")[0]
        subprocess.run(f"rm {command}", shell=True, check=True, cwd=tmp_path)
        assert not list(out.iterdir())  # the shards and done marker went, so the rerun takes it
        encode_corpus(corpus, out, other, shard_size=2, progress=False)
        assert shlex.quote(str(out)) in str(refused.value)


def test_shards_of_another_corpus_file_still_there_are_refused_but_a_build_replaces_its_own(tiny_model_dir, tmp_path):
    """`encode B.jsonl -o S` where S holds A.jsonl's shards replaced every one of them, saying only "re-encoded 3
    parts whose documents changed"; a corpus file moved away (or the same file) still resumes part by part, and a
    build replaces what OUT.shards holds."""
    first, second = write_corpus(tmp_path / "a.jsonl", 4), tmp_path / "b.jsonl"
    second.write_text(first.read_text().replace("doc", "other"), encoding="utf-8")
    out = tmp_path / "S"
    encode_corpus(first, out, encoder(tiny_model_dir), shard_size=2, progress=False)
    before = shard_contents(out)
    with pytest.raises(RetrieverError) as refused:
        encode_corpus(second, out, encoder(tiny_model_dir), shard_size=2, progress=False)
    assert str(refused.value).startswith(f"{out}: its shards were encoded from {first}, which is still there, and "
                                         f"this run reads another corpus file, {second}: encoding it here would "
                                         "replace them all; encode into another --output, or delete its shards")
    assert shard_contents(out) == before
    assert encode_corpus(first, out, encoder(tiny_model_dir), shard_size=2, progress=False).skipped == 4
    moved = first.rename(tmp_path / "moved.jsonl")
    assert encode_corpus(moved, out, encoder(tiny_model_dir), shard_size=2, progress=False).skipped == 4
    moved.rename(first)
    assert encode_corpus(second, out, encoder(tiny_model_dir), shard_size=2, progress=False,
                         replace_other_corpus=True).encoded == 4
