"""`retriever info` on folders whose manifest a person edited or damaged: a summary, never a traceback."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

import retriever.lexical
from retriever.cli import main
from retriever.encoder import Encoder, EncoderSettings
from retriever.indexing import IndexParams, encode_and_index
from retriever.lexical_part import add_lexical
from retriever.lexical_terms import CJK, _prepared_before_nfkc

# Entries search reads with defaults or never reads, so the manifest check lets them through (probe round 6).
EDITS = {
    "versions-not-an-object": lambda m: m.update(versions="x"),
    "tuning-without-its-recall": lambda m: m["index"].update(tuning={"parameter": "nprobe"}),
    "bm25-without-k1": lambda m: m["lexical"].pop("k1"),
    "bm25-k1-a-string": lambda m: m["lexical"].update(k1="0.9"),
    "fusion-without-alpha": lambda m: m.update(fusion={"method": "convex"}),
    "search-defaults-null": lambda m: m["index"].update(search_defaults=None),
}


@pytest.fixture(scope="module")
def sq8_index(tmp_path_factory, tiny_model_dir):
    folder = tmp_path_factory.mktemp("info")
    rows = [{"_id": f"d{i}", "text": f"passage {i} about topic {i % 3}"} for i in range(12)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(folder / "corpus.jsonl", folder / "idx", encoder, IndexParams("SQ8", target_recall=0.5),
                     progress=False)
    return folder / "idx"


def test_a_type_with_nothing_to_tune_says_so_not_none_equals_none(sq8_index):
    result = CliRunner().invoke(main, ["info", str(sq8_index)])
    assert result.exit_code == 0, result.output
    assert "tuned:    nothing to tune, recall@" in result.output and "None=None" not in result.output


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_info_on_an_edited_manifest_is_a_summary_not_a_traceback(sq8_index, tmp_path, edit):
    """Each was an AttributeError, TypeError or ValueError traceback, while `search` opened the folder."""
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(sq8_index, index)
    manifest = json.loads((index / "manifest.json").read_text())
    EDITS[edit](manifest)
    (index / "manifest.json").write_text(json.dumps(manifest))
    for flags in ([], ["--json"]):
        result = CliRunner().invoke(main, ["info", str(index), *flags])
        assert result.exit_code == 0 and result.exception is None, result.output


@pytest.mark.parametrize("fusion", ["rrf", {"method": "convex", "alpha": 2.0}])
def test_verify_fails_on_a_damaged_fusion_record_naming_the_repairs(sq8_index, tmp_path, fusion):
    """The summary said `fusion: DAMAGED` but --verify passed (exit 0), as it does not for a damaged BM25 part."""
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(sq8_index, index)
    manifest = json.loads((index / "manifest.json").read_text())
    (index / "manifest.json").write_text(json.dumps({**manifest, "fusion": fusion}))
    assert CliRunner().invoke(main, ["info", str(index)]).exit_code == 0
    result = CliRunner().invoke(main, ["info", str(index), "--verify"])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1, result.output
    assert f"{index / 'manifest.json'}: fusion" in errors[0]
    assert f"`retriever bm25 {index} --tune-fusion-on DATASET --split train`" in errors[0]
    assert f"`retriever bm25 {index} --drop-fusion`" in errors[0]


def test_verify_shows_its_progress_over_every_files_bytes(sq8_index):
    """--verify reads the whole folder (gigabytes for a large index) and said nothing until it was done."""
    from tqdm import tqdm

    manifest = json.loads((sq8_index / "manifest.json").read_text())
    total = sum(record["bytes"] for record in manifest["integrity"]["files"].values()) + sum(
        record["bytes"] for record in manifest["lexical"]["files"].values())
    result = CliRunner().invoke(main, ["info", str(sq8_index), "--verify"])
    assert result.exit_code == 0, result.output
    bar = [line for line in result.stderr.replace("\r", "\n").splitlines() if line.startswith("verify")]
    assert bar and f"/{tqdm.format_sizeof(total)} " in bar[-1] and "100%" in bar[-1], result.stderr
    assert "verified:" in result.stdout and "verify" not in result.stdout.replace("verified:", "")


@pytest.mark.parametrize("command", ["build", "index"])
@pytest.mark.parametrize("damage", ["hash", "missing"])
def test_verify_damage_names_the_command_that_built_the_index(sq8_index, tmp_path, command, damage):
    """The damage messages of an index built with `retriever index` said to rebuild it with `retriever build`, which
    encodes the corpus again (and needs the model), where `index` rebuilds it from the shards."""
    import shutil

    from retriever.indexing import build_index

    index = tmp_path / "idx"
    if command == "build":
        shutil.copytree(sq8_index, index)
    else:
        build_index(sq8_index.with_name("idx.shards"), sq8_index.parent / "corpus.jsonl", index, IndexParams("flat"),
                    progress=False, lexical=None)
    victim = index / "ids.parquet"
    if damage == "hash":
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0x01
        victim.write_bytes(bytes(data))
    else:
        victim.unlink()
    result = CliRunner().invoke(main, ["info", str(index), "--verify"])
    assert result.exit_code == 1 and f"{victim}: " in result.output, result.output
    assert f"the index folder is damaged; rebuild it with `retriever {command} ... --overwrite`" in result.output


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_info_json_keeps_its_keys_whatever_the_manifest_holds(sq8_index, tmp_path, edit):
    """`search_defaults: null` (allowed: no defaults) made `"search_defaults": {}`, so a script reading
    `["search_defaults"]["nprobe"]` failed on one index and not another; a missing value is null, its key stays."""
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(sq8_index, index)
    manifest = json.loads((index / "manifest.json").read_text())
    EDITS[edit](manifest)
    (index / "manifest.json").write_text(json.dumps(manifest))
    edited = json.loads(CliRunner().invoke(main, ["info", str(index), "--json"]).output)
    whole = json.loads(CliRunner().invoke(main, ["info", str(sq8_index), "--json"]).output)
    assert set(edited) == set(whole)
    for key in ("encoder", "search_defaults"):
        assert set(edited[key]) == set(whole[key]) == ({"nprobe", "ef_search"} if key == "search_defaults"
                                                       else set(whole["encoder"]))
    assert set(edited["tuning"]) == set(whole["tuning"])


def test_every_key_of_info_json_is_described_in_the_readme(sq8_index, tmp_path):
    """The `--json` summary is for scripts, so each of its keys is named where README describes `info`."""
    from pathlib import Path

    from retriever.info import index_summary

    index = tmp_path / "idx"
    __import__("shutil").copytree(sq8_index, index)
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["fusion"] = {"method": "convex", "alpha": 0.5, "depth": 100, "tuned": {"dataset": "d", "split": "s"}}
    (index / "manifest.json").write_text(json.dumps(manifest))
    summary = index_summary(index)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("`info --json` prints"):][:2500]
    keys = set(summary) | {key for value in summary.values() if isinstance(value, dict) for key in value}
    keys |= set(summary["fusion"]["tuned"])
    assert summary["bm25"] and summary["tuning"]  # their keys are among those checked
    assert sorted(key for key in keys if f"`{key}`" not in section) == []


def _split_before_cjk_pairs(index, target, cjk=None):
    """A copy of ``index`` as a build before CJK letter pairs (and NFKC and case folding) recorded it (its tokenizer
    without ``cjk``), or with ``cjk`` as recorded (``bigrams``: before Thai, Lao, Khmer and Myanmar pairs)."""
    from retriever.lexical_terms import record_before_folding

    shutil.copytree(index, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["lexical"]["tokenizer"] = {k: v for k, v in record_before_folding().items() if k != "cjk"}
    if cjk:
        manifest["lexical"]["tokenizer"]["cjk"] = cjk
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def test_a_part_split_before_cjk_pairs_is_current_unless_its_terms_hold_a_cjk_letter(sq8_index, tmp_path,
                                                                                      tiny_model_dir, monkeypatch):
    """Every folder built before CJK pairs said a rebuild would split it otherwise, an English one too, whose
    passages would get the very terms they have; one whose terms hold a CJK letter still says so, and one built
    before NFKC and case folding whose terms hold a ligature."""
    runner = CliRunner()
    said = "--overwrite` rebuilds it with the current splitting"
    english = _split_before_cjk_pairs(sq8_index, tmp_path / "english")
    assert json.loads(runner.invoke(main, ["info", str(english), "--json"]).output)["bm25"]["current_splitting"]
    assert said not in runner.invoke(main, ["info", str(english)]).output
    rows = [{"_id": "a", "text": "東京都に住む"}, {"_id": "b", "text": "a river in the city"}, {"_id": "c", "text": "ﬁnance"}]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tmp_path / "corpus.jsonl", tmp_path / "cjk", encoder, IndexParams("flat"), progress=False)
    cjk = _split_before_cjk_pairs(tmp_path / "cjk", tmp_path / "cjk-before")
    assert json.loads(runner.invoke(main, ["info", str(cjk), "--json"]).output)["bm25"]["current_splitting"] is False
    assert said in runner.invoke(main, ["info", str(cjk)]).output
    assert "Thai, Lao, Khmer or Myanmar run" in runner.invoke(main, ["info", str(cjk)]).output
    assert json.loads(runner.invoke(main, ["info", str(tmp_path / "cjk"), "--json"]).output)["bm25"][
        "current_splitting"]
    # recorded before Thai pairs only: its CJK terms are those a rebuild makes (they said a former way)
    before_thai = _split_before_cjk_pairs(tmp_path / "cjk", tmp_path / "cjk-before-thai", cjk="bigrams")
    assert json.loads(runner.invoke(main, ["info", str(before_thai), "--json"]).output)["bm25"]["current_splitting"]
    monkeypatch.setattr(retriever.lexical, "prepared", _prepared_before_nfkc)  # a part built before folding
    add_lexical(tmp_path / "cjk", overwrite=True, progress=False)
    before_folding = _split_before_cjk_pairs(tmp_path / "cjk", tmp_path / "before-folding", cjk=CJK)
    assert json.loads(runner.invoke(main, ["info", str(before_folding), "--json"]).output)["bm25"][
        "current_splitting"] is False


@pytest.mark.parametrize("damage", ["zeroed", "truncated"])
def test_an_unreadable_sorted_vocabulary_of_a_part_split_before_cjk_pairs_is_damage(sq8_index, tmp_path, damage):
    """It was reported as "words split a former way" (the terms could not be read, so a CJK letter was assumed),
    where the part is damaged and --mode bm25 cannot open it."""
    index = _split_before_cjk_pairs(sq8_index, tmp_path / "idx")
    manifest = json.loads((index / "manifest.json").read_text())
    vocabulary = index / manifest["lexical"]["directory"] / "vocab.sorted.arrow"
    size = vocabulary.stat().st_size
    vocabulary.write_bytes(b"\0" * size if damage == "zeroed" else vocabulary.read_bytes()[:size // 2])
    result = CliRunner().invoke(main, ["info", str(index)])
    assert result.exit_code == 0, result.output
    assert "split a former way" not in result.output
    line = next(line for line in result.output.splitlines() if "DAMAGED" in line)
    assert f"{vocabulary}: " in line and f"`retriever bm25 {index} --overwrite`" in line
    search = CliRunner().invoke(main, ["search", str(index), "honey", "--mode", "bm25", "--device", "cpu"])
    assert search.exit_code == 1 and f"`retriever bm25 {index} --overwrite`" in search.output, search.output


class _Listing:
    """What ``os.scandir`` returns, over entries listed already."""

    def __init__(self, entries: list) -> None:
        self._entries = iter(entries)

    def __enter__(self) -> "_Listing":
        return self

    def __exit__(self, *exception) -> None:
        return None

    def __iter__(self) -> "_Listing":
        return self

    def __next__(self):
        return next(self._entries)

    def close(self) -> None:
        pass


def test_the_size_of_a_folder_whose_old_part_is_deleted_while_it_is_counted_is_what_remains(sq8_index, tmp_path,
                                                                                          monkeypatch):
    """`bm25 --overwrite` (or a swap) deletes the old part's folder and files just after `info` listed them: the
    size counted what was left (a FileNotFoundError traceback from the walk, a narrow gap)."""
    import os

    from retriever.info import index_summary

    index = tmp_path / "idx"
    shutil.copytree(sq8_index, index)
    old_part, old_file = index / "bm25-0000dead", index / "tuning.ivfdata"
    old_part.mkdir()
    (old_part / "vocab.arrow").write_bytes(b"x" * 100)
    old_file.write_bytes(b"x" * 100)
    scandir = os.scandir

    def listed_then_deleted(path=".") -> _Listing:
        """The old file goes once its folder is listed, the old part's folder as the walk enters it."""
        if isinstance(path, int):  # rmtree's, by descriptor
            return scandir(path)
        if os.fspath(path) == os.fspath(old_part):
            shutil.rmtree(old_part)
        with scandir(path) as listing:
            entries = list(listing)
        if os.fspath(path) == os.fspath(index):
            old_file.unlink(missing_ok=True)
        return _Listing(entries)

    monkeypatch.setattr(os, "scandir", listed_then_deleted)
    size = index_summary(index)["bytes_on_disk"]
    monkeypatch.setattr(os, "scandir", scandir)
    assert not old_part.exists() and size == sum(path.stat().st_size for path in index.rglob("*") if path.is_file())


@pytest.mark.parametrize("text, said", [("[" * 100_000 + "]" * 100_000, "the file nests arrays or objects deeper than"),
                                        ('{"a": ' + "1" * 5000 + "}", "a number of 5000 digits, more than")])
def test_a_manifest_past_the_json_readers_limits_is_one_line(sq8_index, tmp_path, text, said):
    """A manifest (or any JSON file read whole: a part's record, inputs.json) nested 100,000 deep or holding a
    5000-digit number was a RecursionError or ValueError traceback; the corpus reader already said so in a line."""
    from retriever.errors import RetrieverError
    from retriever.info import index_summary

    index = tmp_path / "idx"
    shutil.copytree(sq8_index, index)
    (index / "manifest.json").write_text(text)
    with pytest.raises(RetrieverError, match=f"^{index / 'manifest.json'}: {said}"):
        index_summary(index)


@pytest.mark.parametrize("index_dir, said", [
    ("", "index_dir is empty .an unset variable.."), ("  ", "index_dir is empty"),
    (5, "index_dir must be the index folder's path .str or Path., not int 5"), (None, "not NoneType None"),
])
def test_library_info_of_no_folder_path_names_the_argument(sq8_index, monkeypatch, index_dir, said):
    """`index_summary("")` (an unset variable) summarised the working folder, an index here, and `verify_index("")`
    verified it; 5 or None was pathlib's TypeError naming no argument. Searcher refuses them alike."""
    from retriever.errors import RetrieverError
    from retriever.info import index_summary, verify_index

    monkeypatch.chdir(sq8_index)
    for call in (index_summary, verify_index):
        with pytest.raises(RetrieverError, match=said):
            call(index_dir)


def test_the_key_verify_adds_to_info_json_is_described_in_the_readme(sq8_index):
    """`info --verify --json` printed a `verified_files` key that README, which lists the keys for scripts, did not
    name."""
    from pathlib import Path

    result = CliRunner().invoke(main, ["info", str(sq8_index), "--verify", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("`info --json` prints"):][:2500]
    assert summary["verified_files"] > 0 and [key for key in summary if f"`{key}`" not in section] == []


def test_info_shows_only_the_search_defaults_the_index_type_uses(sq8_index, tmp_path):
    """A manifest built before IndexParams refused them holds an nprobe for an HNSW or flat index: `info` showed
    `search: nprobe=5`, a setting no search uses."""
    index = tmp_path / "idx"
    shutil.copytree(sq8_index, index)
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["index"]["search_defaults"] = {"nprobe": 5, "ef_search": 64}
    (index / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["info", str(index)])
    assert "search:   no settings" in result.output, result.output
    assert json.loads(CliRunner().invoke(main, ["info", str(index), "--json"]).output)["search_defaults"] == {
        "nprobe": None, "ef_search": None}
    from retriever.info import used_search_defaults

    stale = {"nprobe": 5, "ef_search": 128}
    assert used_search_defaults(stale, "HNSW8,Flat") == {"nprobe": None, "ef_search": 128}
    assert used_search_defaults(stale, "IVF4_HNSW8,Flat") == {"nprobe": 5, "ef_search": None}
    assert used_search_defaults(stale, "NoSuchIndex") == stale  # a damaged record: shown as it is
    assert used_search_defaults(stale, None) == stale


def test_info_learns_the_search_setting_an_exotic_factory_string_takes_without_building_it(sq8_index, tmp_path,
                                                                                          monkeypatch):
    """`info` made an empty index of the recorded factory string to learn which setting it takes: for
    'IVF1048576_HNSW32,PQ96x16' that held a million lists and 16-bit codebooks (257 MB at 384 dimensions)."""
    import faiss

    from retriever.info import index_summary

    index = tmp_path / "idx"
    shutil.copytree(sq8_index, index)
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["index"].update(factory="IVF1048576_HNSW32,PQ96x16", search_defaults={"nprobe": 16, "ef_search": 64})
    (index / "manifest.json").write_text(json.dumps(manifest))

    def no_index(*_):
        raise AssertionError("info built a FAISS index")

    monkeypatch.setattr(faiss, "index_factory", no_index)
    assert index_summary(index)["search_defaults"] == {"nprobe": 16, "ef_search": None}
