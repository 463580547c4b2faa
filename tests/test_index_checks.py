"""Indexes FAISS would refuse only after the corpus is encoded, refused once the dimension and corpus size are known."""
import numpy as np
import pytest

from retriever.errors import RetrieverError
from retriever.faiss_index import IndexParams, new_index
from retriever.index_checks import check_trainable, training_needs


@pytest.mark.parametrize("spec", [
    "IVF4,Flat", "IVF4,PQ4x4", "PQ4x4", "OPQ4,Flat", "OPQ4_16,IVF4,PQ4x4", "PCA16,Flat", "PCAR16,IVF4,Flat",
    "ITQ16,Flat", "HNSW8,PQ4x4", "IVF4,Flat,Refine(PQ8x4)", "IVF4,PQ4x4,RFlat", "IVF4_HNSW8,Flat", "RQ1x4",
    "IVF4,RQ2x4", "PRQ2x2x4", "IVF4,LSQ2x4", "PQ4x4fs"])
def test_training_needs_are_what_faiss_refuses_below(spec):
    """The fewest training vectors is where FAISS starts to train: one fewer fails (it failed only after the corpus
    was encoded, since only IVF lists and an IVF's or a bare index's PQ codes were counted: OPQ, PCA, HNSW over PQ
    and residual quantizers passed the check)."""
    dim, params = 32, IndexParams(spec)
    needed = max(training_needs(new_index(spec, dim, params)))[0]
    vectors = np.random.default_rng(0).standard_normal((needed, dim)).astype("float32")
    new_index(spec, dim, params).train(vectors)
    with pytest.raises(RuntimeError):
        new_index(spec, dim, params).train(vectors[:-1])
    check_trainable(params, dim, needed)
    with pytest.raises(RetrieverError, match=f"trains on at least {needed} vectors, and the corpus has {needed - 1} "):
        check_trainable(params, dim, needed - 1)


def test_a_corpus_of_one_document_too_few_to_train_is_counted_in_the_singular():
    """`build one.jsonl --index-type ivfpq` on a one-passage corpus ("the corpus has 1 documents")."""
    with pytest.raises(RetrieverError, match=r"trains on at least 2 vectors, and the corpus has 1 document \("):
        check_trainable(IndexParams("ivfpq"), 32, 1)


@pytest.mark.parametrize("spec", ["flat", "hnsw", "Flat", "HNSW8,Flat", "SQ8", "HNSW8,SQ8", "LSQ2x4", "RR16,Flat"])
def test_an_index_that_trains_on_one_vector_passes_the_check(spec):
    check_trainable(IndexParams(spec), 32, 1)


@pytest.mark.parametrize("index_type", ["ivfpq", "ivf-ondisk"])
@pytest.mark.parametrize("nlist", [2**31 - 1, 3_000_000_000])
def test_more_lists_than_vectors_is_refused_without_making_the_lists(index_type, nlist):
    """`--nlist 2147483647` on 1200 vectors allocated its lists to count what training needs: `out of memory
    (std::bad_alloc); free some memory`, and past 2**31 FAISS's `C++ exception stoi` ("use … a valid FAISS factory
    string"), where fewer lists said what was wrong."""
    with pytest.raises(RetrieverError, match=f"trains on at least {nlist} vectors, and the corpus has 1200 documents "
                                             rf"\({nlist} IVF lists\): use fewer lists \(--nlist\)"):
        check_trainable(IndexParams(index_type, nlist=nlist), 32, 1200)
