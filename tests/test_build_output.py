"""The output folder of a build: what is there is replaced only when it is ours and holds nothing the build reads."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, build_index, encode_and_index


@pytest.mark.parametrize("inside", ["corpus", "shards"])
def test_an_index_holding_the_builds_own_input_is_not_replaced(tiny_beir, tiny_model_dir, tmp_path, inside):
    """A corpus copied into the index folder (to ship them together), or shards encoded into it, then
    `build`/`index --overwrite` of that folder: the old folder was deleted whole once the new one was in place,
    and the corpus or shards the new index records with it (exit 0)."""
    index = tmp_path / "idx"
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, index, encoder, progress=False, lexical=None)
    corpus, shards = tiny_beir / "corpus.jsonl", tmp_path / "idx.shards"
    if inside == "corpus":
        corpus = Path(shutil.copy(corpus, index / "corpus.jsonl"))
    else:
        shards = Path(shutil.move(shards, index / "shards"))
    with pytest.raises(RetrieverError, match=rf"^{index}: holds the {inside} this build reads \(.*\), which replacing "
                                             rf"the folder would delete; move it out of {index} first, or choose "
                                             "another --output$"):
        build_index(shards, corpus, index, overwrite=True, progress=False, lexical=None)
    assert (index / ("corpus.jsonl" if inside == "corpus" else "shards")).exists()
    if inside == "corpus":  # `build`: refused before encoding
        with pytest.raises(RetrieverError, match="holds the corpus this build reads"):
            encode_and_index(corpus, index, encoder, overwrite=True, progress=False, lexical=None)
        assert corpus.is_file()


def test_an_index_holding_the_model_of_its_shards_is_not_replaced(tiny_beir, tiny_model_dir, tmp_path):
    """A model folder kept inside the index folder (`--model idx/model`): `build`/`index --overwrite` deleted it with
    the old folder, and the new index named a model that was gone."""
    from retriever.corpus_encoding import encode_corpus

    index = tmp_path / "idx"
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, index, encoder, progress=False, lexical=None)
    inside = Encoder(EncoderSettings(model=str(shutil.copytree(tiny_model_dir, index / "model"))), device="cpu",
                     dtype="fp32")
    with pytest.raises(RetrieverError, match=rf"^{index}: holds the model this build reads"):
        encode_and_index(tiny_beir, index, inside, overwrite=True, progress=False, lexical=None)
    encode_corpus(tiny_beir, tmp_path / "shards", inside, progress=False)
    with pytest.raises(RetrieverError, match=rf"^{index}: holds the model this build reads"):
        build_index(tmp_path / "shards", tiny_beir, index, overwrite=True, progress=False, lexical=None)
    assert (index / "model" / "config.json").is_file()


def test_an_index_folder_given_as_the_shards_names_the_shards_it_was_built_from(tiny_beir, tiny_model_dir, tmp_path):
    """`retriever index IDX` (an index folder where encode's shards belong) said it 'holds no embedding shards; run
    `retriever encode` first', though `build` kept the shards the index was made from in IDX.shards."""
    from click.testing import CliRunner

    from retriever.cli import main

    index = tmp_path / "idx"
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, index, encoder, progress=False, lexical=None)
    command = ["index", str(index), "--corpus", str(tiny_beir), "-o", str(tmp_path / "new"), "--index-type", "hnsw"]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 1 and "run `retriever encode` first" not in result.output, result.output
    assert f"{index}: an index folder, not a folder of embedding shards" in result.output
    assert f"`retriever index {index}.shards --corpus CORPUS --output INDEX`" in result.output
    shutil.rmtree(f"{index}.shards")
    with pytest.raises(RetrieverError, match=rf"no shards of it are kept beside it \({index}.shards\)"):
        build_index(index, tiny_beir, tmp_path / "new", progress=False, lexical=None)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("kind", ["shards", "parts"])
def test_a_build_whose_shards_or_parts_folder_is_an_index_folder_says_so(tiny_beir, tiny_model_dir, tmp_path, kind):
    """An index built with `-o idx.shards`, then `build -o idx`: encode said to 'encode into a folder of its own, e.g.
    idx.shards.shards', which `build` has no flag for (ivf-ondisk: idx.parts was 'not the parts folder ... (it holds
    bm25, docstore.arrow, ...)')."""
    from retriever.index_folder import MANIFEST_FILE

    output, beside = tmp_path / "idx", tmp_path / f"idx.{kind}"
    beside.mkdir()
    (beside / MANIFEST_FILE).write_text("{}")
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    params = IndexParams("ivf-ondisk" if kind == "parts" else "flat")
    with pytest.raises(RetrieverError, match=rf"^{beside}: is an index folder, where the build of {output} keeps its "
                                             rf"{kind}; choose another --output, or move that index away$"):
        encode_and_index(tiny_beir, output, encoder, params, progress=False, lexical=None)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([tiny_beir.name, beside.name])


def test_another_type_built_beside_an_unfinished_ondisk_builds_parts_says_they_stay(tmp_path, capsys):
    """A flat build of an output whose ivf-ondisk build was stopped left OUTPUT.parts (the quantizer and every part:
    gigabytes) behind without a word; it is kept, since rerunning that build resumes from it, and said so."""
    from retriever.build_output import check_output
    from retriever.files import write_json
    from retriever.partwork import INPUT_KEYS

    parts = tmp_path / "idx.parts"
    parts.mkdir()
    write_json(parts / "inputs.json", {key: None for key in INPUT_KEYS})
    (parts / "part-00000.faiss").write_bytes(b"x" * 3000)
    check_output(tmp_path / "idx", overwrite=False)
    err = capsys.readouterr().err
    assert err.startswith(f"note: {parts}: the parts of an unfinished ivf-ondisk build of {tmp_path / 'idx'} (4 KiB)")
    assert "rerun that build to resume it, or remove the folder" in err and err.count("\n") == 1
    check_output(tmp_path / "idx", overwrite=False, ondisk=True)  # the ivf-ondisk build resumes from them quietly
    assert capsys.readouterr().err == "" and (parts / "part-00000.faiss").is_file()


def test_an_index_holding_files_it_does_not_record_is_not_replaced(tiny_flat_build, tmp_path):
    """A run written into the index folder (`search IDX --queries Q -o IDX/run.trec`) or a user's notes there, then
    `build`/`index --overwrite` of it: the folder was replaced whole and they were deleted, exit 0. What a killed
    writer left (a hidden temporary) is the index's own and goes with it."""
    index = Path(shutil.copytree(tiny_flat_build, tmp_path / "idx"))
    (index / "run.trec").write_text("q1 Q0 d1 1 0.5 retriever\n")
    (index / ".index.faiss.tmp-999999999").write_bytes(b"")
    rebuild = dict(shards_dir=tiny_flat_build.with_name("idx.shards"), corpus=tiny_flat_build.with_name("tiny-beir"),
                   output=index, overwrite=True, progress=False, lexical=None)
    with pytest.raises(RetrieverError, match=rf"^{index}: holds run.trec, which the index does not record and "
                                             rf"replacing the folder would delete; move it out of {index} first, or "
                                             "choose another --output$"):
        build_index(**rebuild)
    assert (index / "run.trec").is_file()
    (index / "run.trec").unlink()
    build_index(**rebuild)
    assert sorted(entry.name for entry in index.iterdir()) == ["docstore.parquet", "ids.parquet", "index.faiss",
                                                                "manifest.json"]
