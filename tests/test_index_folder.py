import pytest

from retriever import __version__
from retriever.errors import RetrieverError
from retriever.corpus import ReadStats
from retriever.index_folder import MANIFEST_FILE, check_document_count, read_manifest, replace_manifest


def test_manifest_round_trip_and_errors_name_the_file(tmp_path):
    with pytest.raises(RetrieverError, match="not an index folder"):
        read_manifest(tmp_path)
    replace_manifest(tmp_path, {"format_version": 1})
    assert read_manifest(tmp_path) == {"format_version": 1}
    (tmp_path / MANIFEST_FILE).write_text('{"format_version": ', encoding="utf-8")
    with pytest.raises(RetrieverError, match=r"manifest\.json:1: malformed JSON .*; the index folder is damaged"):
        read_manifest(tmp_path)


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["index"].update(count="two"), "index.count is str 'two', not int"),
    (lambda m: m["index"].update(count=True), "index.count is bool 'True', not int"),
    (lambda m: m.update(integrity=[]), "integrity is list '[]', not dict"),
    (lambda m: m["index"].update(tuning=[1]), "index.tuning is list '[1]', not dict or null"),
    (lambda m: m["integrity"]["files"]["index.faiss"].pop("bytes"),
     "integrity.files['index.faiss'].bytes is NoneType 'None', not int"),
    (lambda m: m["index"]["search_defaults"].update(nprobe=0),
     "index.search_defaults.nprobe is int '0', not an integer from 1 to 2**31 - 1"),
    (lambda m: m["index"]["search_defaults"].update(nprobe=2**31),
     "index.search_defaults.nprobe is int '2147483648', not an integer from 1 to 2**31 - 1"),
    (lambda m: m["index"]["search_defaults"].update(ef_search=2.7),
     "index.search_defaults.ef_search is float '2.7', not int or null"),
    (lambda m: m["index"]["search_defaults"].update(nprobe=True),
     "index.search_defaults.nprobe is bool 'True', not int or null"),
    (lambda m: m.update(format_version="1"), "format_version is str '1', not int"),
    (lambda m: m["encoder"].update(dim="32"), "encoder.dim is str '32', not int"),
    (lambda m: m["encoder"].update(dtype=5), "encoder.dtype is int '5', not str"),
    (lambda m: m["encoder"].update(dtype="fp64"), "encoder.dtype is str 'fp64', not one of fp32, bf16, fp16"),
    (lambda m: (m["index"].update(dim=32), m["encoder"].update(dim=64)),
     "encoder.dim is int '64', not index.dim 32, the vectors' dimension"),
    (lambda m: m["encoder"].update(normalize="false"), "encoder.normalize is str 'false', not bool"),
    (lambda m: m["encoder"].update(query_max_length=True), "encoder.query_max_length is bool 'True', not int or null"),
    (lambda m: m["integrity"]["files"].update({"../../etc/passwd": {"bytes": 1, "sha256": "ab"}}),
     "integrity.files key is str '../../etc/passwd', not a path inside the index folder"),
])
def test_a_manifest_entry_of_the_wrong_type_is_one_line_naming_it(tmp_path, edit, message):
    import json

    manifest = {"encoder": {}, "corpus": {"documents": 2}, "lexical": None,
                "index": {"type": "flat", "count": 2, "tuning": None, "search_defaults": {}},
                "integrity": {"files": {"index.faiss": {"bytes": 10, "sha256": "ab"}}, "ids_sha256": "cd"}}
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert read_manifest(tmp_path)["index"]["count"] == 2
    edit(manifest)
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(RetrieverError) as raised:
        read_manifest(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / MANIFEST_FILE}: {message}; the index folder is damaged")


def test_a_shard_folder_opened_as_an_index_says_to_index_it(tmp_path):
    """`info`/`search` on `encode`'s output (or NAME.shards of a build stopped before indexing) said to build
    one with `retriever build`, which encodes the corpus again: `retriever index` is the step missing."""
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "embeddings-w000of001-00000.parquet").write_bytes(b"")
    (shards / "_done-w000of001.json").write_text("{}")  # a finished encoding; an unfinished one: test_folder_kinds
    with pytest.raises(RetrieverError) as caught:
        read_manifest(shards)
    assert str(caught.value) == (f"{shards}: a folder of embedding shards, not an index folder (no manifest.json); "
                                 f"index it with `retriever index {shards} --corpus CORPUS --output INDEX`")


def test_a_manifest_of_another_format_version_is_refused_naming_the_version_that_built_it(tmp_path):
    """format_version was written and never read: a folder of format 2 (a newer retriever's layout, or an edit)
    was summarised and searched as format 1, exit 0."""
    replace_manifest(tmp_path, {"format_version": 2, "versions": {"retriever": "9.0.0"}})
    with pytest.raises(RetrieverError) as caught:
        read_manifest(tmp_path)
    assert str(caught.value) == (f"{tmp_path / MANIFEST_FILE}: format_version is 2, and retriever {__version__} reads "
                                 "format 1 "
                                 "only; open it with the retriever that built it (9.0.0) or rebuild it with "
                                 "`retriever build ... --overwrite`")


def test_a_corpus_of_one_document_against_other_shards_is_said_in_the_singular(tmp_path):
    """It said "holds 1 documents but the shards ... hold 2"."""
    with pytest.raises(RetrieverError, match=r"c.jsonl: holds 1 document but the shards in .* hold 2;"):
        check_document_count(ReadStats(records=1), 2, tmp_path / "c.jsonl", tmp_path / "shards")


def test_a_damaged_manifest_of_an_index_built_by_index_says_to_rebuild_with_index(tmp_path):
    """Its damage said `retriever build ... --overwrite` (re-encoding the corpus with the model) though the manifest
    says `retriever index` built it from shards, as a damaged file of the same folder already said."""
    replace_manifest(tmp_path, {"built_by": "index", "index": {"count": "two"}})
    with pytest.raises(RetrieverError, match=r"index\.count is str 'two', not int; the index folder is damaged; "
                                             r"rebuild it with `retriever index \.\.\. --overwrite`$"):
        read_manifest(tmp_path)
    replace_manifest(tmp_path, {"built_by": "index", "format_version": 2})
    with pytest.raises(RetrieverError, match=r"rebuild it with `retriever index \.\.\. --overwrite`$"):
        read_manifest(tmp_path)


def test_an_encoder_setting_added_by_hand_is_refused_by_info_and_every_reader(tiny_flat_build, tmp_path):
    """`info` showed a manifest with an unknown encoder key (or encoder.dim "32") as sound, and a bm25 search or
    `evaluate` read it; only a dense search refused the key, naming the folder, not the file. A key in a newer
    retriever's record still leaves bm25 search alone (it needs no encoder), but `info` says it."""
    import json
    import shutil

    from retriever.info import index_summary
    from retriever.searching import Searcher

    index = shutil.copytree(tiny_flat_build, tmp_path / "index")
    manifest = json.loads((index / MANIFEST_FILE).read_text())
    manifest["encoder"]["query_instruction"] = "Represent the query: "
    (index / MANIFEST_FILE).write_text(json.dumps(manifest))
    said = (rf"^{index / MANIFEST_FILE}: the encoder record holds 'query_instruction', a setting retriever "
            rf"{__version__} does not know and never writes \(a hand edit\?\); remove it, or rebuild the index$")
    for reader in (index_summary, lambda folder: Searcher(folder, device="cpu", mode="bm25")):
        with pytest.raises(RetrieverError, match=said):
            reader(index)
    manifest["versions"]["retriever"] = "9.1.0"
    (index / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(RetrieverError, match=rf"^{index / MANIFEST_FILE}: the encoder record holds "
                                             r"'query_instruction', .* \(written by retriever 9\.1\.0\)"):
        index_summary(index)
    assert Searcher(index, device="cpu", mode="bm25").search(["honey bee"], k=1)
