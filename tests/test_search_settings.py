"""nprobe / efSearch on a FAISS index: per call, through wrappers, bounded, and refused where ignored."""
from __future__ import annotations

import faiss
import numpy as np
import pytest

from test_tuning import clustered
from retriever.errors import RetrieverError
from retriever.search_settings import (apply_search_params, bounded, check_mode_settings, check_settings_apply,
                                       search_parameters, search_with)


# 4-bit PQ codes (16 centroids a sub-quantizer, not 256): the wrappers are what is tested, and training 8-bit ones
# took most of this file's time.
@pytest.mark.parametrize("spec", ["IVF32,Flat", "OPQ4,IVF32,PQ4x4", "IVF32,PQ4x4,RFlat", "PCA8,HNSW8,Flat",
                                  "HNSW8,Flat"])
def test_per_call_settings_reach_through_wrappers_and_leave_the_index_alone(spec):
    vectors = clustered(2000)
    index = faiss.index_factory(16, spec, faiss.METRIC_INNER_PRODUCT)
    if spec.startswith("OPQ"):  # 5 rotation updates, not 50: the rotation's quality is not what is tested
        rotation = faiss.downcast_VectorTransform(faiss.downcast_index(index).chain.at(0))
        rotation.niter = rotation.niter_pq_0 = 5
    index.train(vectors)
    index.add(vectors)
    before = faiss.serialize_index(index)
    narrow, wide = search_with(index, vectors[:100], 10, 1, 16), search_with(index, vectors[:100], 10, 32, 512)
    assert faiss.serialize_index(index).tobytes() == before.tobytes()
    apply_search_params(index, 32, 512)  # the same settings put on the index give the same hits
    assert np.array_equal(index.search(vectors[:100], 10)[1], wide[1])
    assert not np.array_equal(narrow[1], wide[1])


def test_an_index_without_settings_takes_no_parameters():
    assert search_parameters(faiss.IndexFlatIP(16)) is None


@pytest.mark.parametrize("spec, setting", [("PCA8,HNSW8,Flat", "ef_search"), ("IVF16,Flat", "nprobe")])
def test_settings_past_what_faiss_takes_give_the_widest_search_not_a_traceback(spec, setting):
    """--ef-search 2**31 was an OverflowError traceback, 2**31 - 1 a std::bad_alloc (or gigabytes allocated),
    --nprobe 10**30 an OverflowError: past the graph's vectors or the lists, more changes no hit."""
    vectors = clustered(500)
    index = faiss.index_factory(16, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    widest = search_with(index, vectors[:20], 10, **{setting: 500 if setting == "ef_search" else 16})
    for huge in (2**31, 10**30):
        assert np.array_equal(search_with(index, vectors[:20], 10, **{setting: huge})[1], widest[1])
    apply_search_params(index, **{setting: 2**31})
    assert np.array_equal(index.search(vectors[:20], 10)[1], widest[1])
    with pytest.raises(RetrieverError, match=setting):
        search_with(index, vectors[:20], 10, **{setting: -3})


@pytest.mark.parametrize("spec, settings, message", [
    ("HNSW8,Flat", {"nprobe": 4}, "--nprobe applies to IVF indexes, and this index is HNSW: use --ef-search"),
    ("IVF16,Flat", {"ef_search": 64}, "--ef-search applies to HNSW indexes, and this index is IVF: use --nprobe"),
    ("Flat", {"nprobe": 4}, "this index is flat: it is exact and takes neither setting"),
    ("Flat", {"ef_search": 64}, "--ef-search applies to HNSW indexes, and this index is flat"),
])
def test_a_setting_the_index_would_ignore_is_refused(spec, settings, message):
    """They were ignored: the hits of the default search, exit 0, and the user thinking recall was traded."""
    index = faiss.index_factory(16, spec, faiss.METRIC_INNER_PRODUCT)
    with pytest.raises(RetrieverError, match=message):
        check_settings_apply(index, settings.get("nprobe"), settings.get("ef_search"))
    check_settings_apply(index, None, None)


@pytest.mark.parametrize("spec", ["IVF16,Flat", "OPQ4,IVF16,PQ4", "IVF16,PQ4,RFlat", "PCA8,HNSW8,Flat", "IDMap,HNSW8"])
def test_a_setting_the_index_uses_passes_through_wrappers(spec):
    index = faiss.index_factory(16, spec, faiss.METRIC_INNER_PRODUCT)
    setting = "ef_search" if "HNSW" in spec else "nprobe"
    check_settings_apply(index, *((8, None) if setting == "nprobe" else (None, 8)))


@pytest.mark.parametrize("value", ["2", float("nan"), float("inf"), None, 1.5, 0])
def test_a_search_setting_that_is_no_whole_number_is_one_line(value):
    """"2" was a ValueError from int(), nan a ValueError and inf an OverflowError, each a traceback."""
    with pytest.raises(RetrieverError, match=r"^nprobe must be a whole number of at least 1, not "):
        bounded(value, 10, "nprobe")
    assert bounded(np.int64(3), 10, "nprobe") == 3 and bounded(10**30, 10, "nprobe") == 10


@pytest.mark.parametrize("setting", ["nprobe", "ef_search"])
def test_a_mode_given_by_position_in_mode_bm25_is_named_before_the_bm25_refusal(setting):
    """Searcher(..., mode='bm25').search(queries, 5, 'hybrid') said '--nprobe sets how the dense index is searched
    ... drop --nprobe', of a setting the caller never meant to give: the bm25 refusal came before this one."""
    index = faiss.index_factory(16, "IVF16,Flat", faiss.METRIC_INNER_PRODUCT)
    given = {"nprobe": None, "ef_search": None, setting: "hybrid"}
    with pytest.raises(RetrieverError, match=rf"^{setting} must be a whole number of at least 1, not 'hybrid'; to "
                                             r"search in mode 'hybrid', pass it by name: mode='hybrid'$"):
        check_mode_settings(index, "bm25", **given)
    with pytest.raises(RetrieverError, match="--nprobe sets how the dense index is searched, and mode bm25"):
        check_mode_settings(index, "bm25", 4, None)


def test_a_mode_given_by_position_is_told_where_the_method_called_takes_a_mode(tiny_flat_build):
    """Each said 'pass it by name: mode='hybrid'', and run and search_vectors take no mode (a TypeError, when
    followed): run searches in the Searcher's mode, search_vectors in the dense index alone."""
    from retriever.searching import Searcher

    searcher = Searcher(tiny_flat_build, device="cpu", dtype="fp32", mode="bm25")
    wrong = r"^nprobe must be a whole number of at least 1, not 'hybrid'; "
    for call, where in [
            (lambda: searcher.search(["bee"], 2, "hybrid"),
             r"to search in mode 'hybrid', pass it by name: mode='hybrid'$"),
            (lambda: searcher.run(["q1"], ["bee"], 2, "hybrid"),
             r"run searches in the Searcher's mode: to search in mode 'hybrid', open it with Searcher\(index_dir, "
             r"mode='hybrid'\)$"),
            (lambda: searcher.search_vectors(np.zeros((1, searcher.index.d), np.float32), 2, "hybrid"),
             r"search_vectors searches the dense index alone and takes no mode$")]:
        with pytest.raises(RetrieverError, match=wrong + where):
            call()
