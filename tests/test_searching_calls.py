"""Library calls on a Searcher that a CLI flag or a server check never makes: each is a one-line RetrieverError,
never a silent wrong result or a traceback from FAISS or numpy."""
from __future__ import annotations

import copy
import pickle

import faiss
import numpy as np
import pytest

from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.indexing import IndexParams, encode_and_index
from retriever import searching
from retriever.query_vectors import query_vectors
from retriever.searching import Searcher
from fixtures_corpora import TINY_DOCS, write_jsonl


@pytest.fixture(scope="module")
def searcher(tiny_model_dir, tmp_path_factory) -> Searcher:
    root = tmp_path_factory.mktemp("calls")
    corpus = write_jsonl(root / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(corpus, root / "idx", encoder, IndexParams("flat"), progress=False)
    return Searcher(root / "idx", device="cpu", dtype="fp32")


def test_a_query_id_given_twice_in_a_run_is_refused_not_merged(searcher):
    # The second query's hits replaced the first's under the one id, silently.
    with pytest.raises(RetrieverError, match=r"query id 'q1' is given twice \(queries 1 and 3 of 3\)"):
        searcher.run(["q1", "q2", "q1"], ["honey bee", "lava", "ice"], k=2)
    assert list(searcher.run(["q1", "q2"], ["honey bee", "lava"], k=2)) == ["q1", "q2"]


@pytest.mark.parametrize("spec, setting", [("IVF4,Flat", "nprobe"), ("HNSW8,Flat", "ef_search")])
def test_a_search_setting_of_0_is_refused_not_read_as_the_default(searcher, spec, setting):
    # FAISS's search parameters read 0 as "the index's own value": nprobe=0 searched with the default, exit 0.
    vectors = np.random.default_rng(0).standard_normal((200, 32)).astype(np.float32)
    index = faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors[:12])
    swapped = copy.copy(searcher)
    swapped.index = index
    for value in (0, -1):
        with pytest.raises(RetrieverError, match=f"{setting} must be a whole number of at least 1, not {value}"):
            swapped.search(["honey bee"], k=2, **{setting: value})
        with pytest.raises(RetrieverError, match=f"{setting} must be a whole number of at least 1, not {value}"):
            swapped.search_vectors(vectors[:1], 2, **{setting: value})
    assert len(swapped.search(["honey bee"], k=2, **{setting: 1})[0]) == 2


WRONG_CALLS = [
    ("vectors-of-another-width", lambda s: s.search_vectors(np.zeros((1, 31), np.float32), 2),
     r"query vectors must be rows of 32 numbers \(the index's dimension\), not an array of shape \(1, 31\)"),
    ("one-vector-not-in-a-row", lambda s: s.search_vectors(np.zeros(32, np.float32), 2),
     r"not an array of shape \(32,\)"),
    ("nan-vectors", lambda s: s.search_vectors(np.full((1, 32), np.nan, np.float32), 2), "hold NaN or infinity"),
    # None in an object array became NaN and was called an fp16 overflow; text, a ragged list, complex numbers and
    # dates were a ValueError traceback, or made numbers ("0.5" read, the imaginary part dropped, days since 1970)
    ("none-in-vectors", lambda s: s.search_vectors(np.array([[None] * 32], dtype=object), 2),
     r"^query vectors must hold numbers, not None \(row 0, column 0\)$"),
    ("text-in-vectors", lambda s: s.search_vectors([["0.5"] * 32], 2), r"^query vectors must hold numbers, not str "),
    ("ragged-vectors", lambda s: s.search_vectors([[0.5] * 32, [0.5]], 2),
     r"^query vectors must be rows of 32 numbers .*, not rows of 32 and 1 numbers$"),
    ("complex-vectors", lambda s: s.search_vectors(np.ones((1, 32), complex), 2),
     r"^query vectors must hold real numbers, not complex128"),
    # past float32's range: made infinity (with numpy's RuntimeWarning) and called an fp16 overflow
    ("vectors-beyond-float32", lambda s: s.search_vectors(np.full((1, 32), 1e39), 2),
     r"^query vectors hold 1e\+39 \(row 0, column 0\), beyond float32's range, which FAISS searches in$"),
    ("vectors-list-to-rank", lambda s: s.rank(["cat"], 2, vectors=[[None] * 32]), r"not None \(row 0, column 0\)"),
    ("fewer-vectors-than-queries", lambda s: s.rank(["a", "b"], 2, vectors=np.zeros((1, 32), np.float32)),
     "1 query vectors for 2 queries"),
    ("no-queries-k-0", lambda s: s.search([], k=0), "k must be a whole number of at least 1, not 0"),
    ("no-queries-unknown-mode", lambda s: s.search([], mode="Dense"), "unknown mode 'Dense'"),
    ("run-batch-size-0", lambda s: s.run(["q1"], ["cat"], k=2, batch_size=0),
     "batch_size must be a whole number of at least 1, not 0"),
    ("run-batch-size-fraction", lambda s: s.run(["q1", "q2"], ["cat", "dog"], k=2, batch_size=1.5),
     "batch_size must be a whole number of at least 1, not 1.5"),
    # a TypeError ('int' object is not callable) after the first batch was searched; an AttributeError (no 'extend')
    ("run-progress-not-callable", lambda s: s.run(["q1"], ["cat"], k=2, progress=5),
     r"^progress must be a function called with each batch's query count, not int 5$"),
    ("run-unknown-found-not-a-list", lambda s: s.run(["q1"], ["cat"], k=2, unknown_found="x"),
     r"^unknown_found must be a list \(each query's unknown-word flag is appended\), not str 'x'$"),
    ("rank-unknown-found-not-a-list", lambda s: s.rank(["cat"], 2, unknown_found=()),
     r"^unknown_found must be a list"),
    # a mode given by position lands in nprobe: on a flat index "--nprobe applies to IVF indexes …; drop --nprobe"
    ("mode-by-position", lambda s: s.search(["cat"], 3, "hybrid"),
     r"^nprobe must be a whole number of at least 1, not 'hybrid'; to search in mode 'hybrid', pass it by name: "
     r"mode='hybrid'$"),
    ("nprobe-of-text-on-a-flat-index", lambda s: s.run(["q1"], ["cat"], 2, "5"),
     r"^nprobe must be a whole number of at least 1, not '5'$"),
]


@pytest.mark.parametrize("call, message", [case[1:] for case in WRONG_CALLS], ids=[case[0] for case in WRONG_CALLS])
def test_wrong_library_calls_are_one_line(searcher, call, message):
    # AssertionError from FAISS, ValueError, IndexError, TypeError; NaN vectors found no hits; k=0, an unknown mode
    # and batch_size 0 were accepted.
    with pytest.raises(RetrieverError, match=message):
        call(searcher)
    assert searcher.search([], k=3) == []


def test_query_vectors_are_checked_once_per_search_the_encoders_too(searcher, monkeypatch):
    """``rank`` checked a caller's vectors, then ``search_vectors`` checked them again at every ``tie_cut`` round;
    the encoder's are checked once too, so an fp16 overflow's NaN is still refused before FAISS sees it."""
    checked = []
    monkeypatch.setattr(searching, "query_vectors",
                        lambda vectors, dim: checked.append(len(vectors)) or query_vectors(vectors, dim))
    tied = np.zeros((2, 32), np.float32)  # every document scores 0: the tie at the cut is searched again, deeper
    searcher.rank(["a", "b"], 2, "dense", vectors=tied, keep_unknown=True, unknown=[False, False])
    searcher.search(["honey bee"], k=2)
    assert checked == [2, 1]

    def overflowed(texts, unknown, cut_at, **settings):
        unknown.extend([False] * len(texts))
        return np.full((len(texts), 32), np.nan, np.float32)

    monkeypatch.setattr(searcher.encoder, "encode_queries", overflowed)
    with pytest.raises(RetrieverError, match="query vectors hold NaN or infinity; an encoder in fp16 may overflow"):
        searcher.search(["honey bee"], k=2)


def test_wrong_searcher_arguments_are_named(searcher):
    # An unknown setting was reported as "a different encoder ... (index: None)"; a list of fusion settings was a
    # TypeError and a string was read letter by letter ("unknown fusion setting 'a'").
    with pytest.raises(RetrieverError, match="unknown encoder setting 'poolin'; the settings are pooling, normalize"):
        Searcher(searcher.index_dir, device="cpu", poolin="cls")
    for overrides in (["alpha"], "alpha"):
        with pytest.raises(RetrieverError, match="fusion_overrides must be a dict such as {'alpha': 0.3}, not"):
            Searcher(searcher.index_dir, device="cpu", fusion_overrides=overrides)


@pytest.mark.parametrize("arguments, said", [
    ({"device": None}, "unknown device None; use auto, cpu, cuda or cuda:N"),
    ({"model": 5}, "model must be the path of the model folder .* not int 5"),
    ({"model": b"/models/m"}, "model must be the path of the model folder"),
    ({"encoders": 5}, "encoders must be a SharedEncoders, or None, not int 5"),
    ({"encoders": {}}, "encoders must be a SharedEncoders"),
])
def test_a_searchers_device_model_or_encoders_of_the_wrong_kind_is_named(searcher, arguments, said):
    """A TypeError from torch (`device() received an invalid combination of arguments`) or an AttributeError
    (`'int' object has no attribute 'strip'`, `... 'get'`) named no argument."""
    with pytest.raises(RetrieverError, match=said):
        Searcher(searcher.index_dir, **{"device": "cpu", **arguments})


def test_a_searcher_refuses_pickling_in_one_line_and_copies_shallowly(searcher):
    # FAISS's "self.cobj cannot be converted to a Python object for pickling" named nothing a user knows.
    for attempt in (pickle.dumps, copy.deepcopy):
        with pytest.raises(RetrieverError, match=r"a Searcher cannot be pickled or deep-copied; open Searcher\("):
            attempt(searcher)
    shallow = copy.copy(searcher)
    assert shallow.index is searcher.index
    assert [h.id for h in shallow.search(["honey bee"], k=2)[0]] == [h.id for h in searcher.search(["honey bee"],
                                                                                                    k=2)[0]]


def test_a_searchers_model_may_be_a_path(searcher, tiny_model_dir):
    """`Searcher(IDX, model=Path(...))` was refused (the model must be a string), though IDX may be a Path."""
    moved = Searcher(searcher.index_dir, device="cpu", dtype="fp32", model=tiny_model_dir)
    assert moved.encoder.settings.model == str(tiny_model_dir)


@pytest.mark.parametrize("blank", ["", "   ", "\u200b\n", "\ufffd"])
def test_a_blank_query_is_refused_by_search_and_kept_by_run(searcher, blank):
    """`Searcher.search([""])` returned k arbitrary hits (the encoding of [CLS][SEP]); the CLI's QUERY and the
    server refuse it. A run keeps every query id, so `run` still searches it."""
    with pytest.raises(RetrieverError, match=r"query 2 of 2 is empty \(nothing but whitespace or invisible"):
        searcher.search(["honey bee", blank], k=2)
    assert list(searcher.run(["q1", "q2"], ["honey bee", blank], k=2)) == ["q1", "q2"]


@pytest.mark.parametrize("index_dir", [None, 5, b"/tmp/idx"])
def test_a_searcher_given_no_folder_path_names_the_argument(index_dir):
    """A TypeError from pathlib (`expected str, bytes or os.PathLike object, not NoneType`) named no argument."""
    with pytest.raises(RetrieverError, match="index_dir must be the index folder's path .str or Path., not"):
        Searcher(index_dir)


@pytest.mark.parametrize("spec, setting", [("HNSW8,Flat", "ef_search"), ("IVF2,Flat", "nprobe")])
def test_a_dense_search_setting_in_bm25_mode_is_refused_not_ignored(searcher, spec, setting):
    """`search --mode bm25 --ef-search 64` (and `evaluate --index`) searched BM25 alone with the value unused, exit 0,
    on an index that takes it (probe round 13); dense and hybrid modes use it."""
    vectors = searcher.index.reconstruct_n(0, searcher.index.ntotal)
    approximate = copy.copy(searcher)
    approximate.index = faiss.index_factory(vectors.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
    approximate.index.train(vectors)
    approximate.index.add(vectors)
    approximate.mode, flag = "bm25", "--" + setting.replace("_", "-")
    for call in (lambda: approximate.search(["honey bee"], k=2, **{setting: 4}),
                 lambda: approximate.run(["q1"], ["honey bee"], k=2, **{setting: 4})):
        with pytest.raises(RetrieverError, match=f"{flag} sets how the dense index is searched, and mode bm25"):
            call()
    for mode in ("dense", "hybrid"):
        assert approximate.search(["honey bee"], k=2, mode=mode, **{setting: 4})[0]


@pytest.mark.parametrize("ids, message", [
    (["q 1"], r"query id 1 of 1: id 'q 1' holds whitespace"), (["q1", ""], r"query id 2 of 2: empty id"),
    ([1.5, 2], r"query id 1\.5 is float, not a string or an integer"),
    ("q1", r"query ids must be a list of strings, not str")])
def test_query_ids_no_run_file_could_hold_are_refused_before_the_search(searcher, ids, message):
    """`Searcher.run(["q 1"], …)` searched, and the run writers then refused the id (probe round 13); an int id is
    its decimal text, as the run writers take it (`test_texts.py`)."""
    with pytest.raises(RetrieverError, match=message):
        searcher.run(ids, ["honey bee"] * len(ids), k=2)
