"""Shards record the reading flags their documents were read with: a rerun or an index build given other flags
names the flag, its recorded and given values and what to do (it said only 'other documents ..., or read with
other --format/--id-field/--text-field/--title-field', or re-encoded every part without a word)."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from retriever.corpus import Fields
from retriever.corpus_encoding import encode_corpus
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, build_index, encode_and_index
from retriever.shards import METADATA_KEY, list_shards, read_shard_metadata

HEADLINED = Fields(title="headline")


def corpus(path: Path, count: int = 6) -> Path:
    """Documents with both a title and a headline, so either --title-field reads them (as different texts)."""
    path.write_text("".join(json.dumps({"_id": f"d{i}", "title": f"title {i}", "headline": f"news {i}",
                                        "text": f"the cat number {i} sat"}) + "\n" for i in range(count)))
    return path


@pytest.fixture()
def encoded(tiny_model_dir, tmp_path) -> tuple[Path, Path, Encoder]:
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32", batch_size=8)
    source = corpus(tmp_path / "c.jsonl")
    encode_corpus(source, tmp_path / "shards", encoder, shard_size=4, progress=False)
    return source, tmp_path / "shards", encoder


def test_shards_record_the_reading_flags(encoded) -> None:
    _, shards, _ = encoded
    assert read_shard_metadata(list_shards(shards)[0])["reading"] == {
        "format": "jsonl", "id_field": "_id", "text_field": "text", "title_field": "title"}


def test_an_index_build_with_another_title_field_names_it(encoded, tmp_path) -> None:
    source, shards, _ = encoded
    with pytest.raises(RetrieverError, match=r"shards: its shards were encoded from the corpus read with --title-field "
                                             r"title, this run reads it with --title-field headline; rerun with "
                                             r"--title-field title to use them, or "):
        build_index(shards, source, tmp_path / "idx", IndexParams("flat"), fields=HEADLINED, progress=False,
                    lexical=None)
    assert not (tmp_path / "idx").exists()


def test_naming_the_format_the_extension_gives_is_the_same_reading(encoded, tmp_path) -> None:
    source, shards, _ = encoded
    build_index(shards, source, tmp_path / "idx", IndexParams("flat"), fmt="jsonl", progress=False, lexical=None)


def test_a_resumed_encode_with_another_field_is_refused_before_anything_changes(encoded) -> None:
    source, shards, encoder = encoded
    before = {path.name: path.read_bytes() for path in shards.iterdir()}
    with pytest.raises(RetrieverError, match=r"its shards were encoded from the corpus read with --text-field text, "
                                             r"this run reads it with --text-field headline; rerun with --text-field "
                                             r"text to use them, or encode into another --output"):
        encode_corpus(source, shards, encoder, fields=Fields(text="headline"), shard_size=4, progress=False)
    assert {path.name: path.read_bytes() for path in shards.iterdir()} == before


def test_build_overwrite_re_encodes_shards_read_with_other_flags(tiny_model_dir, tmp_path) -> None:
    """An interrupted build resumed with another flag is refused; with --overwrite it encodes them again."""
    import shutil

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32", batch_size=8)
    source, output = corpus(tmp_path / "c.jsonl"), tmp_path / "idx"
    encode_and_index(source, output, encoder, IndexParams("flat"), shard_size=4, progress=False, lexical=None)
    shutil.rmtree(output)  # the shards stay, as after a build killed while indexing
    with pytest.raises(RetrieverError, match="--title-field title to use them, or .*--overwrite"):
        encode_and_index(source, output, encoder, IndexParams("flat"), fields=HEADLINED, shard_size=4,
                         progress=False, lexical=None)
    encode_and_index(source, output, encoder, IndexParams("flat"), fields=HEADLINED, shard_size=4,
                     overwrite=True, progress=False, lexical=None)
    assert read_shard_metadata(list_shards(tmp_path / "idx.shards")[0])["reading"]["title_field"] == "headline"


def forget_reading(shards: Path) -> None:
    """Make the shards as a version before the reading record wrote them."""
    for path in list_shards(shards):
        table = pq.read_table(path)
        metadata = json.loads(table.schema.metadata[METADATA_KEY])
        del metadata["reading"]
        pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata).encode()}), path)


def test_shards_without_a_reading_record_work_as_before(encoded, tmp_path) -> None:
    source, shards, encoder = encoded
    forget_reading(shards)
    with pytest.raises(RetrieverError, match="other documents than .* holds now, or read with other --format"):
        build_index(shards, source, tmp_path / "idx", IndexParams("flat"), fields=HEADLINED, progress=False,
                    lexical=None)
    build_index(shards, source, tmp_path / "idx", IndexParams("flat"), progress=False, lexical=None)
    result = encode_corpus(source, shards, encoder, shard_size=4, progress=False)
    assert result.skipped == 6


def test_an_edited_corpus_is_said_to_have_changed(encoded, tmp_path) -> None:
    source, shards, _ = encoded
    source.write_text(source.read_text().replace("number 3", "number three"))
    with pytest.raises(RetrieverError, match=r"other documents than .* holds now \(read with the same flags: the "
                                             r"corpus changed\)"):
        build_index(shards, source, tmp_path / "idx", IndexParams("flat"), progress=False, lexical=None)


@pytest.mark.parametrize("command", ["index", "encode"])
def test_a_copy_of_the_corpus_in_another_format_is_not_advised_to_be_read_as_the_old_one(encoded, tmp_path,
                                                                                       command) -> None:
    """Shards encoded from JSONL, given a TSV copy of the corpus: the advice was 'rerun with --format jsonl', which
    would read the TSV file as JSONL."""
    _, shards, encoder = encoded
    copy = tmp_path / "c.tsv"
    copy.write_text("id\ttitle\ttext\n" + "".join(f"d{i}\ttitle {i}\tthe cat number {i} sat\n" for i in range(6)))
    with pytest.raises(RetrieverError) as error:
        if command == "index":
            build_index(shards, copy, tmp_path / "idx", IndexParams("flat"), progress=False, lexical=None)
        else:
            encode_corpus(copy, shards, encoder, shard_size=4, progress=False)
    assert f"{shards}: its shards were encoded from a jsonl corpus, and {copy} is read as tsv (by its extension); " \
           "pass the jsonl file they were encoded from to use them, or " in str(error.value)
    assert "--format jsonl" not in str(error.value)


def test_a_corpus_named_for_its_format_but_read_as_another_is_advised_its_own_format(encoded, tmp_path) -> None:
    source, shards, _ = encoded
    with pytest.raises(RetrieverError, match=r"read with --format jsonl, this run reads it with --format tsv; rerun "
                                             r"with --format jsonl to use them"):
        build_index(shards, source, tmp_path / "idx", IndexParams("flat"), fmt="tsv", progress=False, lexical=None)
