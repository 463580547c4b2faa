from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from fixtures_indexes import bm25_hits, with_lexical_record
from fixtures_system import nothing_created_in

from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import MANIFEST_FILE, IndexParams, encode_and_index
from retriever.lexical import LexicalParams
from retriever.lexical_part import add_lexical
from retriever.searching import Searcher


@pytest.mark.parametrize("killed_at", ["before the manifest", "after the manifest"])
def test_a_kill_during_bm25_overwrite_leaves_one_matching_pair(index, killed_at):
    """`bm25/` was replaced in place and the manifest written after: a kill in between left the new files under
    the old record (same sizes when only k1 changes), searched silently with the old settings."""
    before = bm25_hits(index)
    patched = "replace_manifest" if killed_at == "before the manifest" else "shutil.rmtree"
    code = textwrap.dedent(f"""
        import os, shutil, sys
        import retriever.index_folder as folder, retriever.lexical_part as part
        from retriever.lexical import LexicalParams
        if {patched!r} == "replace_manifest":
            folder.replace_manifest = lambda *args, **kwargs: os._exit(9)
        else:
            part.shutil = type("S", (), {{"rmtree": staticmethod(lambda *args, **kwargs: os._exit(9))}})
        part.add_lexical(sys.argv[1], LexicalParams(k1=3.0, b=0.9), overwrite=True, progress=False)
    """)
    assert subprocess.run([sys.executable, "-c", code, str(index)]).returncode == 9
    k1 = json.loads((index / MANIFEST_FILE).read_text())["lexical"]["k1"]
    assert k1 == (0.9 if killed_at == "before the manifest" else 3.0)
    after = bm25_hits(index)
    assert (after == before) == (killed_at == "before the manifest")
    record = add_lexical(index, LexicalParams(k1=3.0, b=0.9), overwrite=True, progress=False)  # the rerun tidies up
    parts = sorted(path.name for path in index.iterdir() if path.name.startswith(("bm25", ".bm25")))
    assert parts == [record["directory"]] and bm25_hits(index) != before


def test_a_fusion_tuned_with_the_bm25_index_an_overwrite_replaces_by_other_settings_is_dropped(index, capsys):
    """The manifest kept the tuned fusion, its BM25 nDCG and its claim of being tuned, for a BM25 index scoring
    otherwise; `info` showed it and hybrid searches used it. A rebuild with the same settings (a repair) keeps it."""
    from retriever.index_folder import read_manifest, replace_manifest

    tuned = {"method": "convex", "rrf_k": 60.0, "alpha": 0.3, "depth": 1000,
             "tuned": {"dataset": "tiny-beir", "split": "train", "queries": 4, "bm25": 0.9}}
    replace_manifest(index, {**read_manifest(index), "fusion": tuned})
    add_lexical(index, overwrite=True, progress=False)
    assert read_manifest(index)["fusion"] == tuned
    add_lexical(index, LexicalParams(k1=2.0), overwrite=True, progress=False)
    assert "fusion" not in read_manifest(index)
    note = capsys.readouterr().err
    assert "tuned on tiny-beir train" in note and "k1 0.9 -> 2.0" in note
    assert f"retriever bm25 {index} --tune-fusion-on" in note


def test_a_fusion_dropped_for_another_tokenizer_names_it_in_words(index, capsys):
    """A part rebuilt by a retriever that cuts text into words otherwise drops the fusion tuned on the old one; the
    note printed both tokenizer records as Python dicts (regex patterns, lists of code points) in one line."""
    from retriever.index_folder import read_manifest, replace_manifest
    from retriever.lexical_terms import FORMER_PATTERN

    manifest = read_manifest(index)
    older = {**manifest["lexical"], "tokenizer": {"pattern": FORMER_PATTERN, "unicode": "NFC", "lowercase": True}}
    fusion = {"method": "convex", "rrf_k": 60.0, "alpha": 0.3, "depth": 1000}
    replace_manifest(index, {**manifest, "lexical": older, "fusion": fusion})
    add_lexical(index, overwrite=True, progress=False)
    note = capsys.readouterr().err
    assert "fusion" not in read_manifest(index) and "(tokenizer: text is cut into words otherwise)" in note
    assert "{" not in note and "pattern" not in note


def test_bm25_settings_given_as_a_dict_are_named(index):
    """`add_lexical(IDX, {"k1": 1.0})` was an AttributeError traceback ('dict' object has no attribute 'check')."""
    from retriever.errors import RetrieverError

    with pytest.raises(RetrieverError, match=r"params must be LexicalParams, e.g. LexicalParams\(k1=1.2\), not dict"):
        add_lexical(index, {"k1": 1.0}, overwrite=True, progress=False)


@pytest.mark.parametrize("fusion", ["rrf", {"method": "convex", "alpha": 2.0}, {"method": "convex", "alpha": "0.5"},
                                    {"method": "mean"}, {"depth": True}])
def test_a_damaged_fusion_record_fails_only_hybrid_and_names_the_repairs(index, fusion):
    """Checked with the whole manifest, it failed dense and bm25 search and `info` too, saying to rebuild the whole
    index (a full re-encode) with `retriever build --overwrite`; only hybrid reads it, and retuning or dropping it
    mends it."""
    from retriever.errors import IndexDamaged
    from retriever.index_folder import read_manifest, replace_manifest
    from retriever.info import index_summary

    replace_manifest(index, {**read_manifest(index), "fusion": fusion})
    searcher = Searcher(index, device="cpu")
    assert searcher.search(["honey bee"], k=2)[0] and searcher.search(["honey bee"], k=2, mode="bm25")[0]
    assert searcher.modes() == ["dense", "bm25"]
    repairs = (rf"fusion.*; tune it again with `retriever bm25 {index} --tune-fusion-on DATASET --split train`, or "
               rf"drop it \(hybrid then uses RRF k=60\) with `retriever bm25 {index} --drop-fusion`, "
               r"or search hybrid with --fusion rrf --rrf-k K or --alpha A, which need no record$")
    with pytest.raises(IndexDamaged, match=repairs):
        searcher.search(["honey bee"], k=2, mode="hybrid")
    for given in ({"method": "rrf", "rrf_k": 60}, {"alpha": 0.5}):  # all hybrid reads of the record but its depth
        assert Searcher(index, device="cpu", mode="hybrid", fusion_overrides=given).search(["honey bee"], k=2)[0]
    assert "--tune-fusion-on" in index_summary(index)["fusion"]["damage"]
    add_lexical(index, overwrite=True, progress=False)
    assert "fusion" not in read_manifest(index)
    assert Searcher(index, device="cpu", mode="hybrid").search(["honey bee"], k=2)[0]


def test_a_disk_filling_while_bm25_overwrite_writes_is_not_called_damage(index, monkeypatch):
    """bm25s's np.save on a full disk (numpy's short-write OSError, no errno) was reported as the doc store
    being damaged, with advice to rebuild the whole index; the old part stays searched."""
    before = bm25_hits(index)
    entries = sorted(p.name for p in index.iterdir())

    def fails(*_, **__):
        raise OSError("84305 requested and 4064 written")

    monkeypatch.setattr("bm25s.BM25.save", fails)
    with pytest.raises(RetrieverError) as caught:
        add_lexical(index, LexicalParams(k1=1.2), overwrite=True, progress=False)
    assert str(caught.value).startswith(f"no space left on the device writing {index}"), caught.value
    assert "damaged" not in str(caught.value) and "free some space" in str(caught.value)
    assert sorted(p.name for p in index.iterdir()) == entries and bm25_hits(index) == before


def test_a_failure_building_bm25_is_not_called_damage_to_the_doc_store(index, monkeypatch):
    """Any error of the build (an np.float32 k1 in bm25s's JSON, a bug) was reported as 'docstore.parquet: cannot
    be read (...); the index folder is damaged; rebuild it with retriever build --overwrite'. Failing reads of the
    doc store still are."""
    before, entries = bm25_hits(index), sorted(p.name for p in index.iterdir())

    def fails(*_, **__):
        raise ValueError("boom")

    monkeypatch.setattr("retriever.lexical.build_bm25s", fails)
    with pytest.raises(ValueError, match="^boom$"):
        add_lexical(index, LexicalParams(k1=1.2), overwrite=True, progress=False)
    monkeypatch.undo()

    def unreadable(_docstore):
        yield "the first text"
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("retriever.lexical.document_texts", unreadable)
    with pytest.raises(RetrieverError, match=r"docstore.parquet: cannot be read \(.*Input/output error\); the index "
                                             r"folder is damaged"):
        add_lexical(index, LexicalParams(k1=1.2), overwrite=True, progress=False)
    assert sorted(p.name for p in index.iterdir()) == entries and bm25_hits(index) == before


def _flat_index_with(tiny_beir, tiny_model_dir, index, text: str):
    """A flat index, with its BM25 part, of the tiny BEIR corpus whose first passage ends with ``text``."""
    corpus = tiny_beir / "corpus.jsonl"
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    rows[0]["text"] += text
    corpus.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, index, encoder, IndexParams("flat"), progress=False)
    return index


def _split_before_cjk_pairs(index, fusion: dict) -> None:
    """The manifest a build made before CJK letter pairs (and NFKC and case folding) were recorded (``tokenizer``
    without ``cjk``)."""
    from retriever.index_folder import read_manifest, replace_manifest
    from retriever.lexical_terms import record_before_folding

    manifest = read_manifest(index)
    tokenizer = {k: v for k, v in record_before_folding().items() if k != "cjk"}
    replace_manifest(index, {**manifest, "lexical": {**manifest["lexical"], "tokenizer": tokenizer}, "fusion": fusion})


def test_a_fusion_tuned_on_a_part_split_before_cjk_pairs_is_kept_where_no_passage_holds_a_cjk_letter(index, capsys):
    """An English corpus gets the very terms it had, yet `bm25 --overwrite` dropped the tuned fusion because the
    tokenizer record gained ``cjk``."""
    from retriever.index_folder import read_manifest

    fusion = {"method": "convex", "rrf_k": 60.0, "alpha": 0.3, "depth": 1000}
    _split_before_cjk_pairs(index, fusion)
    add_lexical(index, overwrite=True, progress=False)
    assert read_manifest(index)["fusion"] == fusion and "dropped" not in capsys.readouterr().err
    _split_before_cjk_pairs(index, fusion)  # not with stopwords holding CJK letters: a pair may have been dropped
    add_lexical(index, LexicalParams(stopwords="chinese"), overwrite=True, progress=False)
    assert "fusion" not in read_manifest(index)


def test_a_fusion_tuned_on_a_part_split_before_cjk_pairs_is_dropped_where_a_passage_holds_one(tiny_beir, tmp_path,
                                                                                               tiny_model_dir, capsys):
    """A letter standing alone (木) was no term and is one now: the part's scores change, the fusion goes."""
    from retriever.index_folder import read_manifest

    index = _flat_index_with(tiny_beir, tiny_model_dir, tmp_path / "lone", " (the character 木)")
    _split_before_cjk_pairs(index, {"method": "rrf", "rrf_k": 20.0, "alpha": 0.5, "depth": 1000})
    add_lexical(index, overwrite=True, progress=False)
    assert "fusion" not in read_manifest(index) and "(tokenizer: text is cut" in capsys.readouterr().err


def test_a_fusion_tuned_on_a_part_split_before_folding_is_dropped_where_a_passage_holds_a_ligature(
        tiny_beir, tmp_path, tiny_model_dir, capsys, monkeypatch):
    """'ﬁnance' was a term of its own and is 'finance' now: the part's scores change, the fusion goes (its terms
    are the old part's, built here as a version before NFKC and case folding built it)."""
    import retriever.lexical
    from retriever.index_folder import read_manifest
    from retriever.lexical_terms import _prepared_before_nfkc

    index = _flat_index_with(tiny_beir, tiny_model_dir, tmp_path / "ligature", " (a ﬁnance report)")
    with monkeypatch.context() as before_folding:
        before_folding.setattr(retriever.lexical, "prepared", _prepared_before_nfkc)
        add_lexical(index, overwrite=True, progress=False)
    fusion = {"method": "rrf", "rrf_k": 20.0, "alpha": 0.5, "depth": 1000}
    _split_before_cjk_pairs(index, fusion)
    shutil.copytree(index, tmp_path / "copy")
    add_lexical(index, overwrite=True, progress=False)
    assert "fusion" not in read_manifest(index) and "(tokenizer: text is cut" in capsys.readouterr().err
    (next((tmp_path / "copy").glob("bm25*")) / "vocab.sorted.arrow").unlink()  # its terms unknown: dropped too
    add_lexical(tmp_path / "copy", overwrite=True, progress=False)
    assert "fusion" not in read_manifest(tmp_path / "copy")


def test_a_fusion_on_a_cjk_part_split_before_thai_pairs_is_kept_where_no_passage_holds_a_thai_letter(
        tiny_beir, tmp_path, tiny_model_dir, capsys):
    """Thai, Lao, Khmer and Myanmar cluster pairs change no term of a corpus without those letters, CJK ones
    included (their pairs were recorded already as ``cjk: bigrams``): the tuned fusion stays."""
    from retriever.index_folder import read_manifest, replace_manifest
    from retriever.lexical_terms import record_before_folding

    index = _flat_index_with(tiny_beir, tiny_model_dir, tmp_path / "cjk", " 東京都に住む")
    fusion = {"method": "rrf", "rrf_k": 20.0, "alpha": 0.5, "depth": 1000}
    manifest = read_manifest(index)
    tokenizer = {**record_before_folding(), "cjk": "bigrams"}
    replace_manifest(index, {**manifest, "lexical": {**manifest["lexical"], "tokenizer": tokenizer}, "fusion": fusion})
    add_lexical(index, overwrite=True, progress=False)
    assert read_manifest(index)["fusion"] == fusion and "dropped" not in capsys.readouterr().err


def test_bm25_into_an_index_folder_that_cannot_be_written_is_refused_before_tokenising(index, monkeypatch):
    """A read-only index folder (permission bits, which root ignores, are simulated) failed with a PermissionError
    traceback once every passage had been tokenised."""
    import retriever.lexical_part as part

    nothing_created_in(index, monkeypatch)
    monkeypatch.setattr(part, "build_lexical", lambda *args, **kwargs: pytest.fail("tokenised first"))
    before = (index / MANIFEST_FILE).read_text()
    with pytest.raises(RetrieverError, match=rf"^{re.escape(str(index))}: the BM25 part cannot be written into it "
                                             r"\(nothing can be created in .*Permission denied"):
        add_lexical(index, LexicalParams(k1=1.5), overwrite=True, progress=False)
    assert (index / MANIFEST_FILE).read_text() == before


def test_a_rebuild_naming_the_same_stopword_list_otherwise_keeps_the_tuned_fusion(index, capsys):
    """`en` and `english` (or `no`, which the command line now refuses, and `norwegian`) are one list: a repair
    rebuild naming it the other way dropped the tuned fusion as tuned for other stopwords ("en -> english")."""
    _rebuilt_naming_it_otherwise(index, capsys, "stopwords", "en", "english", "norwegian")


@pytest.mark.parametrize("recorded, given", [("en", "english"), ("english", "eng"), ("eng", "en")])
def test_a_rebuild_naming_the_same_stemmer_otherwise_keeps_the_tuned_fusion(index, capsys, recorded, given):
    """`en`, `eng` and `english` are one Snowball stemmer: a rebuild naming it otherwise than the manifest recorded it
    dropped the tuned fusion ("stemmer en -> english"). A manifest recording the other name (an older one, which
    recorded the flag as given) still searches."""
    _rebuilt_naming_it_otherwise(index, capsys, "stemmer", recorded, given, "porter")


def _rebuilt_naming_it_otherwise(index, capsys, field: str, recorded: str, given: str, other: str) -> None:
    """A tuned fusion is kept by a rebuild naming the recorded setting ``given`` instead, and dropped by ``other``."""
    from retriever.index_folder import read_manifest, replace_manifest

    tuned = {"method": "rrf", "rrf_k": 30.0, "alpha": 0.5, "depth": 1000,
             "tuned": {"dataset": "tiny-beir", "split": "train", "queries": 4, "bm25": 0.9}}
    replace_manifest(index, {**read_manifest(index), "fusion": tuned})
    with_lexical_record(index, **{field: recorded})  # as an older version recorded the flag: as given
    hits = bm25_hits(index)
    add_lexical(index, LexicalParams(**{field: given}), overwrite=True, progress=False)
    assert read_manifest(index)["fusion"] == tuned and "dropped" not in capsys.readouterr().err
    assert bm25_hits(index) == hits
    add_lexical(index, LexicalParams(**{field: other}), overwrite=True, progress=False)
    assert f"{field} {getattr(LexicalParams(**{field: given}), field)} -> {other}" in capsys.readouterr().err


def test_bm25_through_a_link_is_refused_while_a_run_through_the_folder_holds_it(index, tmp_path):
    """The lock was named after the path given: `bm25 LINK --overwrite` beside `bm25 FOLDER --overwrite` (or a
    tuning) both ran, each deleting the other's uncommitted part, as two runs did before the lock."""
    from retriever.fusion_tuning import drop_fusion
    from retriever.folders import exclusive_build, named_output

    link = tmp_path / "link"
    link.symlink_to(index, target_is_directory=True)
    before = (index / MANIFEST_FILE).read_bytes()
    with exclusive_build(named_output(index), elsewhere=""):
        for run in (lambda: add_lexical(link, overwrite=True, progress=False), lambda: drop_fusion(link)):
            with pytest.raises(RetrieverError, match=r"another build of it is running \(pid \d+\)"):
                run()
    assert (index / MANIFEST_FILE).read_bytes() == before
    with exclusive_build(named_output(link), elsewhere=""):  # a run through the link still holds it against another
        with pytest.raises(RetrieverError, match=r"another build of it is running"):
            add_lexical(link, overwrite=True, progress=False)


def test_bm25_given_a_relative_path_takes_its_lock_once(index, monkeypatch):
    """The link check (above) took the folder's lock twice when named once relatively and once absolutely, and
    refused every `bm25 INDEX` run as "another build of it is running" (its own pid)."""
    monkeypatch.chdir(index.parent)
    assert add_lexical(index.name, overwrite=True, progress=False)["documents"] > 0
