from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retriever.errors import RetrieverError
from retriever.indexing import DOCSTORE_FILE, INDEX_FILE, MANIFEST_FILE, IndexParams, encode_and_index
from retriever.lexical import LEXICAL_DIR, METHODS, LexicalParams, build_lexical
from retriever.lexical_index import LexicalIndex
from retriever.lexical_part import add_lexical
from retriever.lexical_terms import FORMER_PATTERN, record_before_folding

DOCS = [("a", "Bees", "Honey bees collect nectar from flowers."),
        ("b", "", "A volcano erupts hot lava."),
        ("c", "Glaciers", "The glacier moved slowly through the valley."),
        ("d", None, "Flowering plants and their pollinators.")]


@pytest.fixture()
def folder(tmp_path):
    pq.write_table(pa.table({"id": [d[0] for d in DOCS], "title": [d[1] for d in DOCS],
                             "text": [d[2] for d in DOCS]}), tmp_path / DOCSTORE_FILE)
    return tmp_path


def test_stemmed_stopworded_bm25_finds_the_right_rows(folder):
    record = build_lexical(folder / DOCSTORE_FILE, folder / LEXICAL_DIR, progress=False)
    assert record["documents"] == 4 and (record["k1"], record["b"]) == (0.9, 0.4)
    index = LexicalIndex(folder, record)
    scores, rows = index.search(["the flower", "volcanoes", "of the and"], k=3)
    assert rows[0].tolist()[:2] == [0, 3] or rows[0].tolist()[:2] == [3, 0]  # flower ~ flowers ~ flowering
    assert rows[1].tolist() == [1, -1, -1]  # documents sharing no term are left out
    assert rows[2].tolist() == [-1, -1, -1]  # only stopwords
    assert scores[1, 0] > 0


def test_without_stemming_plural_does_not_match(folder):
    params = LexicalParams(stemmer=None, stopwords=None)
    index = LexicalIndex(folder, build_lexical(folder / DOCSTORE_FILE, folder / LEXICAL_DIR, params, False))
    assert index.search(["volcanoes"], k=2)[1].tolist() == [[-1, -1]]


def test_unknown_stemmer_is_a_clear_error(folder):
    with pytest.raises(RetrieverError, match="no stemmer for 'klingon'"):
        build_lexical(folder / DOCSTORE_FILE, folder / LEXICAL_DIR, LexicalParams(stemmer="klingon"), False)


def test_adding_bm25_to_a_built_index_does_not_encode(tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    from retriever.encoder import Encoder, EncoderSettings

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    index = tmp_path / "idx"
    encode_and_index(tiny_beir, index, encoder, IndexParams("flat"), progress=False, lexical=None)
    assert not (index / LEXICAL_DIR).exists() and json.loads((index / MANIFEST_FILE).read_text())["lexical"] is None
    faiss_bytes = (index / INDEX_FILE).read_bytes()

    def no_encoding(*args, **kwargs):
        raise AssertionError("adding BM25 must not encode")

    monkeypatch.setattr(Encoder, "encode_passages", no_encoding)
    monkeypatch.setattr(Encoder, "__init__", no_encoding)
    record = add_lexical(index, progress=False)
    assert record["documents"] == 12 and (index / LEXICAL_DIR).is_dir()
    assert json.loads((index / MANIFEST_FILE).read_text())["lexical"] == record
    assert (index / INDEX_FILE).read_bytes() == faiss_bytes
    assert [p.name for p in index.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(RetrieverError, match="already has a BM25 index; pass --overwrite"):
        add_lexical(index, progress=False)
    assert add_lexical(index, LexicalParams(k1=1.2), overwrite=True, progress=False)["k1"] == 1.2


def test_queries_find_terms_in_the_mapped_vocabulary_or_in_an_older_folders_json(folder):
    record = build_lexical(folder / DOCSTORE_FILE, folder / LEXICAL_DIR, progress=False)
    mapped = LexicalIndex(folder, record)
    assert mapped._terms is not None and not mapped.model.vocab_dict  # nothing loaded whole
    (folder / LEXICAL_DIR / "vocab.sorted.arrow").unlink()  # as a folder built before it
    loaded = LexicalIndex(folder, record)
    assert loaded.model.vocab_dict
    queries = ["the flower", "volcanoes erupt", "glaciers and bees", "unknownterm", "of the and"]
    for query in queries:
        terms = mapped.tokenize(query)
        assert mapped.term_counts(terms) == loaded.term_counts(terms)
    assert [r.tolist() for r in mapped.search(queries, k=3)[1]] == [r.tolist() for r in loaded.search(queries, k=3)[1]]


@pytest.mark.parametrize("damage", ["missing", "one-byte-flipped", "bm25-part-broken"])
def test_bm25_is_built_only_from_the_index_folders_own_doc_store(tiny_beir, tiny_model_dir, tmp_path, damage):
    """`retriever bm25` checks the folder as opening it for search does, and hashes the doc store it reads."""
    from retriever.encoder import Encoder, EncoderSettings

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    index = tmp_path / "idx"
    encode_and_index(tiny_beir, index, encoder, IndexParams("flat"), progress=False)
    docstore = index / DOCSTORE_FILE
    if damage == "missing":
        docstore.unlink()
    elif damage == "one-byte-flipped":
        data = bytearray(docstore.read_bytes())
        data[len(data) // 2] ^= 0xFF
        docstore.write_bytes(bytes(data))
    else:  # the part being rebuilt may be damaged: it is what --overwrite replaces
        (index / LEXICAL_DIR / "vocab.index.json").write_text("garbage")
        assert add_lexical(index, overwrite=True, progress=False)["documents"] == 12
        return
    expected = "missing" if damage == "missing" else r"its content is not the one the index was built with \(.*\)"
    with pytest.raises(RetrieverError, match=f"docstore.parquet: {expected}; the index folder is damaged"):
        add_lexical(index, overwrite=True, progress=False)
    assert [p.name for p in index.iterdir() if p.name.startswith(".")] == []


def test_bm25_settings_are_checked_without_building(folder):
    for params, expected in [(LexicalParams(stemmer="klingon"), "no stemmer for 'klingon'"),
                             (LexicalParams(stopwords="xx"), "--bm25-stopwords 'xx'"),
                             (LexicalParams(method="bm99"), "unknown BM25 method 'bm99'")]:
        with pytest.raises(RetrieverError, match=expected):
            params.check()
    LexicalParams(stemmer=None, stopwords=None).check()


@pytest.mark.parametrize("params, expected", [
    (LexicalParams(k1=float("nan")), "--bm25-k1 must be a number from 0 to 1e6, not nan"),
    (LexicalParams(k1=float("inf")), "--bm25-k1 must be a number from 0 to 1e6, not inf"),
    (LexicalParams(k1=-3), "--bm25-k1 must be a number from 0 to 1e6, not -3"),
    (LexicalParams(b=float("nan")), r"--bm25-b must be a finite number within \[0, 1\], not nan"),
    (LexicalParams(b=5), r"--bm25-b must be a finite number within \[0, 1\], not 5"),
    (LexicalParams(k1="1.2"), "--bm25-k1 must be a number from 0 to 1e6, not '1.2'"),  # a TypeError traceback
    (LexicalParams(k1=True), "--bm25-k1 must be a number from 0 to 1e6, not True"),
    (LexicalParams(k1=1e300), "--bm25-k1 must be a number from 0 to 1e6, not 1e[+]300"),  # every score 0: no hits
    (LexicalParams(b=None), r"--bm25-b must be a finite number within \[0, 1\], not None"),
    # a list, tuple or True built a part the next opening called damaged ("lexical.stopwords is list"); 5 a TypeError
    (LexicalParams(stopwords=["the", "lava"]), r"--bm25-stopwords must be the name of a stopword list or None, "
                                               r"not \['the', 'lava'\]"),
    (LexicalParams(stopwords=True), "--bm25-stopwords must be the name of a stopword list or None, not True"),
    (LexicalParams(stopwords=5), "--bm25-stopwords must be the name of a stopword list or None, not 5"),
    (LexicalParams(stemmer=("english",)), r"--bm25-stemmer must be the name of a stemmer or None, not \('english',\)")])
def test_bm25_k1_and_b_must_be_finite_and_in_range(params, expected):
    with pytest.raises(RetrieverError, match=f"^{expected}$"):
        params.check()
    LexicalParams(k1=0, b=0).check()
    LexicalParams(k1=3, b=1).check()
    LexicalParams(k1=1e6).check()


@pytest.mark.parametrize("method", ["lucene", "bm25l", "atire"])
def test_the_largest_k1_taken_still_ranks_by_term_counts(folder, method):
    """Past it, scores left float32's range: Lucene's all became 0 (no hits at 1e300), BM25L's inf (at 1e308)."""
    record = build_lexical(folder / DOCSTORE_FILE, folder / LEXICAL_DIR, LexicalParams(k1=1e6, method=method),
                           progress=False)
    scores, rows = LexicalIndex(folder, record).search(["honey flowers"], k=4)
    assert rows[0].tolist()[:2] == [0, 3] and np.isfinite(scores[0, :2]).all() and scores[0, 0] > scores[0, 1] > 0


@pytest.mark.parametrize("method", METHODS)
def test_k1_0_scores_as_the_smallest_k1_above_it_in_every_method(folder, method):
    """At k1 0 (the smallest --bm25-k1 taken) a term a passage holds counts once whatever its count, the limit of
    ever smaller k1: BM25+ divided 0 by 0 for the terms a passage lacks, so every score was NaN and no query found
    anything."""
    def ranked(k1: float):
        record = build_lexical(folder / DOCSTORE_FILE, folder / f"bm25-{k1}", LexicalParams(k1=k1, method=method),
                               progress=False)
        return LexicalIndex(folder, {**record, "directory": f"bm25-{k1}"}).search(["honey flowers", "volcanoes"], k=4)

    (scores, rows), (near_scores, near_rows) = ranked(0), ranked(1e-9)
    assert rows.tolist() == near_rows.tolist() and rows[1, 0] == 1, (scores, rows)
    assert np.allclose(scores[rows >= 0], near_scores[near_rows >= 0], rtol=1e-5)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_bm25_plus_part_built_at_k1_0_before_the_fix_is_refused_naming_its_rebuild(folder, monkeypatch):
    """Such a part holds NaN scores only: searched, it found nothing and said no passage shared a term."""
    from retriever import lexical_build
    from retriever.errors import IndexDamaged

    params = LexicalParams(k1=0, method="bm25+", stemmer=None)
    with monkeypatch.context() as before:  # bm25s's tf component at tf 0, as the build took it
        before.setattr(lexical_build, "_absent_tfc", lambda model, length: lexical_build._tfc(model, 0, length, length))
        record = build_lexical(folder / DOCSTORE_FILE, folder / LEXICAL_DIR, params, progress=False)
    with pytest.raises(IndexDamaged, match=rf"^{re.escape(str(folder))}: its BM25 part scores every passage NaN .*"
                                           r"`retriever bm25 .* --overwrite --bm25-method bm25\+ --bm25-k1 0 "
                                           r"--bm25-b 0.4 --bm25-stemmer none --bm25-stopwords en` \(no re-enc"):
        LexicalIndex(folder, record)
    record = build_lexical(folder / DOCSTORE_FILE, folder / LEXICAL_DIR, params, progress=False)
    assert LexicalIndex(folder, record).search(["volcano"], k=1)[1].tolist() == [[1]]


@pytest.mark.parametrize("name", ["English", "EN", "ru,en", "xx"])
def test_unknown_stopwords_list_the_lists_bm25s_ships(name):
    with pytest.raises(RetrieverError) as caught:
        LexicalParams(stopwords=name).check()
    message = str(caught.value)
    assert message.startswith(f"--bm25-stopwords {name!r} is not a stopword list; use one of chinese, danish, ")
    assert "german" in message and "russian" in message and message.endswith(" (lower case) or none")
    assert "\n" not in message and "Please input a list" not in message
    for accepted in ("en", "english", "ru", "german", "en_plus"):
        LexicalParams(stopwords=accepted).check()


def test_cli_refuses_nan_k1_and_leaves_the_bm25_part_alone(tiny_beir, tiny_model_dir, tmp_path):
    from click.testing import CliRunner

    from retriever.cli import main

    index = tmp_path / "idx"
    runner = CliRunner()
    result = runner.invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                  "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    before = {p.relative_to(index): p.read_bytes() for p in index.rglob("*") if p.is_file()}
    for flag in ("--bm25-k1", "--bm25-b"):
        result = runner.invoke(main, ["bm25", str(index), "--overwrite", flag, "nan"])
        assert result.exit_code == 2, result.output  # a usage error, as any bad flag value
        assert len(result.output.splitlines()) == 1 and f"'{flag}': 'nan' is not a finite number" in result.output
    assert {p.relative_to(index): p.read_bytes() for p in index.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("method", ["bm25l", "bm25+"])
def test_methods_scoring_absent_terms_still_return_only_documents_sharing_a_term(folder, method):
    """bm25l and bm25+ give every document a score for the terms it lacks: a search returned all of them, tied
    after the one match, where the README (and every other method) leaves out documents sharing no term."""
    params = LexicalParams(method=method)
    index = LexicalIndex(folder, build_lexical(folder / DOCSTORE_FILE, folder / LEXICAL_DIR, params, False))
    scores, rows = index.search(["volcanoes", "the flower"], k=4)
    assert rows[0].tolist() == [1, -1, -1, -1]
    assert sorted(rows[1].tolist()[:2]) == [0, 3] and rows[1].tolist()[2:] == [-1, -1]
    assert np.array_equal(scores[0, :1], index.scores(*index.term_counts(index.tokenize("volcanoes")))[[1]])


def test_a_word_matches_whether_its_accents_are_composed_or_not(tmp_path):
    """'é' as one code point (NFC) or as 'e' and a combining accent (NFD) looks the same: the NFD document was
    split into 're' and 'sume', so an NFC query for 'résumé' found only the NFC document, and 'sume' found the
    NFD one. A folder recorded before the normalisation keeps tokenising its queries as its documents were."""
    import unicodedata

    text = "Résumé tips for a café"
    pq.write_table(pa.table({"id": ["nfd", "nfc", "other"], "title": ["", "", ""],
                             "text": [unicodedata.normalize("NFD", text), unicodedata.normalize("NFC", text),
                                      "nothing alike here"]}), tmp_path / DOCSTORE_FILE)
    record = build_lexical(tmp_path / DOCSTORE_FILE, tmp_path / LEXICAL_DIR, progress=False)
    index = LexicalIndex(tmp_path, record)
    for form in ("NFC", "NFD"):
        scores, rows = index.search([unicodedata.normalize(form, "résumé café")], k=3)
        assert sorted(rows[0].tolist()[:2]) == [0, 1] and rows[0, 2] == -1 and scores[0, 0] == scores[0, 1]
    assert index.search(["sume"], k=3)[1].tolist() == [[-1, -1, -1]]
    assert record["tokenizer"]["unicode"] == "NFKC"
    older = {**record, "tokenizer": {"pattern": FORMER_PATTERN, "lowercase": True}}
    nfd_cafe = unicodedata.normalize("NFD", "café")
    assert index.tokenize(nfd_cafe) == index.tokenize("café") == ["café"]
    assert LexicalIndex(tmp_path, older).tokenize(nfd_cafe) == ["cafe"]  # split as before, as its documents were


def test_fullwidth_letters_and_ligatures_match_the_plain_letters_both_ways(tmp_path):
    """BM25 kept compatibility forms as terms of their own: 'finance' missed a passage writing 'ﬁnance' (a PDF's
    ligature), 'ＢＭ２５' one writing 'BM25', and 'Straße' one writing 'STRASSE'. A folder recorded before the
    folding keeps tokenising its queries as its passages were."""
    texts = ["ＢＭ２５ scoring of ﬁnance news", "STRASSE maps and BM25 finance", "nothing alike here"]
    pq.write_table(pa.table({"id": ["compat", "plain", "other"], "title": [""] * 3, "text": texts}),
                   tmp_path / DOCSTORE_FILE)
    record = build_lexical(tmp_path / DOCSTORE_FILE, tmp_path / LEXICAL_DIR, progress=False)
    index = LexicalIndex(tmp_path, record)
    for query in ("finance", "ﬁnance", "bm25", "ＢＭ２５"):
        assert sorted(index.search([query], k=3)[1][0].tolist()[:2]) == [0, 1], query
    assert index.search(["Straße"], k=3)[1].tolist() == [[1, -1, -1]]
    assert record["tokenizer"]["unicode"] == "NFKC" and record["tokenizer"]["casefold"]
    older = LexicalIndex(tmp_path, {**record, "tokenizer": record_before_folding()})
    assert older.tokenize("ＢＭ２５ Straße") == ["ｂｍ２５", "straße"] and index.tokenize("ＢＭ２５") == ["bm25"]


WORDS_WITH_MARKS = [("hi", "हिन्दी भाषा", "भाषा"), ("bn", "বাংলা ভাষা", "বাংলা"), ("ta", "தமிழ் மொழி", "தமிழ்"),
                    ("th", "กินข้าว แล้ว", "กินข้าว"), ("shy", "co\u00adoperation between teams", "cooperation"),
                    ("zwnj", "می\u200cخواهم", "میخواهم"), ("tr", "İSTANBUL is big", "istanbul")]


def test_words_holding_combining_marks_or_invisible_joiners_are_one_term(tmp_path):
    """Python's \\w leaves out combining marks, so every Devanagari or Bengali vowel sign split a word into single
    letters, which were dropped: a Hindi passage had no term at all and no Hindi query found anything; Thai and
    Tamil words fell into fragments. A soft hyphen (a hyphenation point) or a zero-width joiner inside a word split
    it too, and Turkish İ lowercased to i and a combining dot, so 'istanbul' never found 'İSTANBUL'."""
    pq.write_table(pa.table({"id": [d[0] for d in WORDS_WITH_MARKS], "title": [""] * len(WORDS_WITH_MARKS),
                             "text": [d[1] for d in WORDS_WITH_MARKS]}), tmp_path / DOCSTORE_FILE)
    index = LexicalIndex(tmp_path, build_lexical(tmp_path / DOCSTORE_FILE, tmp_path / LEXICAL_DIR, progress=False))
    scores, rows = index.search([query for _, _, query in WORDS_WITH_MARKS], k=2)
    assert rows[:, 0].tolist() == list(range(len(WORDS_WITH_MARKS))) and (rows[:, 1] == -1).all()
    assert index.tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"] and index.tokenize("h₂o₂ km²") == ["h2o2", "km2"]
    assert index.search(["खाना"], k=2)[1].tolist() == [[-1, -1]]  # a Hindi word no passage holds


def test_numpy_float32_settings_are_written_as_python_floats(folder):
    """np.float32 k1/b broke bm25s's params JSON mid-build, reported as the doc store being damaged."""
    params = LexicalParams(k1=np.float32(1.5), b=np.float32(0.5))
    record = build_lexical(folder / DOCSTORE_FILE, folder / LEXICAL_DIR, params, progress=False)
    assert (record["k1"], record["b"]) == (1.5, 0.5) and type(record["k1"]) is float
    json.dumps(record)


def test_a_chinese_or_japanese_query_finds_passages_holding_part_of_its_run(tmp_path):
    """A run of Han or kana letters was one term: '東京' found nothing in '東京都に住む'. A folder recorded before
    keeps its queries split as its documents were."""
    texts = ["東京都に住む", "京都の寺", "ソウルは韓国の首都"]
    pq.write_table(pa.table({"id": ["a", "b", "c"], "title": [""] * 3, "text": texts}), tmp_path / DOCSTORE_FILE)
    record = build_lexical(tmp_path / DOCSTORE_FILE, tmp_path / LEXICAL_DIR, progress=False)
    index = LexicalIndex(tmp_path, record)
    assert index.search(["東京"], k=3)[1].tolist() == [[0, -1, -1]]
    assert sorted(index.search(["京都"], k=3)[1][0].tolist()[:2]) == [0, 1]
    assert index.search(["韓国"], k=3)[1].tolist() == [[2, -1, -1]]
    older = {**record, "tokenizer": {k: v for k, v in record_before_folding().items() if k != "cjk"}}
    assert LexicalIndex(tmp_path, older).tokenize("東京都") == ["東京都"]


def test_a_thai_word_finds_the_sentence_holding_it(tmp_path):
    """Thai has no spaces between words: a sentence was one term, so 'แมว' (cat) found nothing."""
    texts = ["แมวนอนบนเสื่อ", "หมาวิ่งในสวน", "ฉันชอบกินข้าว"]
    pq.write_table(pa.table({"id": ["a", "b", "c"], "title": [""] * 3, "text": texts}), tmp_path / DOCSTORE_FILE)
    record = build_lexical(tmp_path / DOCSTORE_FILE, tmp_path / LEXICAL_DIR, progress=False)
    index = LexicalIndex(tmp_path, record)
    assert index.search(["แมว"], k=3)[1].tolist() == [[0, -1, -1]]
    assert index.search(["สวน"], k=3)[1][0, 0] == 1  # first: a passage sharing one pair of it (วน) comes after
    older = {**record, "tokenizer": {**record_before_folding(), "cjk": "bigrams"}}
    assert LexicalIndex(tmp_path, older).tokenize("แมวนอน 東京") == ["แมวนอน", "東京"]


@pytest.mark.parametrize("method, zero_weight", [("lucene", False), ("robertson", True), ("atire", False)])
def test_a_passage_sharing_only_terms_of_weight_zero_is_not_returned(tmp_path, method, zero_weight):
    """What the README says of the methods: robertson weighs a term in half the documents or more 0 (bm25s clamps
    its IDF at 0, no negative weight), atire one in every document; a passage sharing only those scores 0 and is
    left out, though it shares a term. Fails if bm25s starts giving such terms a weight."""
    texts = ["apple banana", "apple cherry", "kiwi melon", "fig pear"]  # apple in half of them
    pq.write_table(pa.table({"id": ["a", "b", "c", "d"], "title": [""] * 4, "text": texts}), tmp_path / DOCSTORE_FILE)
    params = LexicalParams(method=method, stemmer=None, stopwords=None)
    index = LexicalIndex(tmp_path, build_lexical(tmp_path / DOCSTORE_FILE, tmp_path / LEXICAL_DIR, params, False))
    rows = index.search(["apple", "apple kiwi"], k=4)[1].tolist()
    assert rows[0] == ([-1] * 4 if zero_weight else [0, 1, -1, -1])
    assert rows[1][0] == 2 and sorted(rows[1][1:]) == ([-1] * 3 if zero_weight else [-1, 0, 1])
    if method == "atire":  # a term in every document weighs 0 there
        every = tmp_path / "every"
        every.mkdir()
        pq.write_table(pa.table({"id": ["a", "b"], "title": [""] * 2, "text": texts[:2]}), every / DOCSTORE_FILE)
        index = LexicalIndex(every, build_lexical(every / DOCSTORE_FILE, every / LEXICAL_DIR, params, False))
        assert index.search(["apple"], k=2)[1].tolist() == [[-1, -1]]


def test_checking_a_bm25_record_imports_neither_bm25s_nor_scipy(tiny_beir, tiny_model_dir, tmp_path):
    """`info`, and every command reading a manifest, checks the BM25 record's settings: bm25s imports scipy."""
    import subprocess
    import sys

    from retriever.encoder import Encoder, EncoderSettings

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    folder = tmp_path / "idx"
    encode_and_index(tiny_beir, folder, encoder, IndexParams("flat"), progress=False, lexical=LexicalParams())

    script = ("import sys\nfrom retriever.cli import main\nsys.argv = ['retriever', 'info', sys.argv[1]]\n"
              "try:\n    main()\nexcept SystemExit as end:\n    assert not end.code, end.code\n"
              "print(sorted(name for name in ('bm25s', 'scipy') if name in sys.modules), file=sys.stderr)")
    ran = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and "bm25: " in ran.stdout, ran.stderr
    assert ran.stderr.splitlines()[-1] == "[]"


def test_the_stopword_lists_known_without_bm25s_are_those_its_tokenizer_takes():
    import bm25s.stopwords
    from bm25s.tokenization import _infer_stopwords

    from retriever.lexical_names import STOPWORD_LIST_OF as _STOPWORD_LIST_OF

    shipped = {name.removeprefix("STOPWORDS_") for name in dir(bm25s.stopwords) if name.startswith("STOPWORDS_")}
    assert set(_STOPWORD_LIST_OF.values()) == shipped
    for name, constant in _STOPWORD_LIST_OF.items():
        assert _infer_stopwords(name) is getattr(bm25s.stopwords, f"STOPWORDS_{constant}")
