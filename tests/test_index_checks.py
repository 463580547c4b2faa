"""Indexes FAISS would refuse only after the corpus is encoded, refused once the dimension and corpus size are known."""
import numpy as np
import pytest

from retriever.errors import RetrieverError
from retriever.faiss_index import IndexParams, new_index
from retriever.index_checks import check_buildable, check_trainable


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


@pytest.mark.parametrize("spec, needed", [("IVF8(PQ2),Flat", 256), ("IVF4(PQ2x4),Flat", 16)])
def test_an_ivf_whose_quantizer_needs_more_points_than_its_lists_is_refused_before_encoding(spec, needed):
    """FAISS trains an IVF's quantizer on the list centroids: 'IVF8(PQ2),Flat' failed once the corpus was encoded
    (8 points for 256 codes), advising fewer lists and more training vectors, neither of which helps."""
    with pytest.raises(RetrieverError, match=rf"trains on its \d+ list centroids and needs at least {needed}; use at "
                                             rf"least {needed} lists"):
        check_buildable(IndexParams(spec), 32)
    nlist = spec.split("(")[0]
    with pytest.raises(RuntimeError, match="should be at least as large"):  # what FAISS does at training
        new_index(spec, 32, IndexParams(spec)).train(np.random.default_rng(0).standard_normal((600, 32), "float32"))
    check_buildable(IndexParams(spec.replace(nlist, f"IVF{needed}")), 32)  # enough lists


@pytest.mark.parametrize("spec", ["SQ8_direct", "IVF4,SQ8_direct_signed", "HNSW8_SQ8_direct"])
def test_a_scalar_quantizer_that_takes_values_as_codes_is_refused_before_encoding(spec):
    """SQ8_direct and SQ8_direct_signed store each value as the integer it rounds to: embeddings (fractions) were all
    stored as zeros (a flat one scored every passage 0), recall@10 0.001, with exit 0."""
    vectors = np.random.default_rng(0).standard_normal((300, 32)).astype("float32")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = new_index(spec, 32, IndexParams())
    index.train(vectors)
    index.add(vectors)
    assert (index.search(vectors[:20], 1)[1][:, 0] == np.arange(20)).mean() < 0.5  # a vector rarely finds itself
    with pytest.raises(RetrieverError, match=r"SQ8_direct(_signed)? stores each value as the whole number it rounds "
                                             "to.*use SQ8"):
        check_buildable(IndexParams(spec), 32)
    check_buildable(IndexParams(spec.replace("_direct_signed", "").replace("_direct", "")), 32)


@pytest.mark.parametrize("spec, defaults, said", [
    ("HNSW8,Flat", {"nprobe": 5}, "give ef_search instead"), ("SQ8", {"ef_search": 64}, "exact"),
    ("IVF4_HNSW8,Flat", {"ef_search": 64}, "give nprobe instead"), ("PCA16,IVF4,Flat", {"ef_search": 64}, "nprobe"),
])
def test_a_search_default_a_factory_string_does_not_use_is_refused_before_encoding(spec, defaults, said):
    """A factory string's search setting is known once FAISS builds it: an nprobe default on 'HNSW8,Flat' was
    recorded and never used (the efSearch of an IVF's HNSW quantizer is not the one a search sets)."""
    with pytest.raises(RetrieverError, match=rf"^search_defaults\['{list(defaults)[0]}'\] applies to .*{said}"):
        check_buildable(IndexParams(spec, search_defaults=defaults), 32)
    check_buildable(IndexParams("PCA16,IVF4,Flat", search_defaults={"nprobe": 2}), 32)


def test_a_train_size_for_a_factory_string_that_trains_nothing_is_refused_before_encoding():
    """IndexParams("HNSW8,Flat", train_size=10) was built with the setting unused, as `--train-size` is refused."""
    with pytest.raises(RetrieverError, match=r"^--train-size is used only by .*'HNSW8,Flat', which trains nothing"):
        check_buildable(IndexParams("HNSW8,Flat", train_size=10), 32)
    check_buildable(IndexParams("IVF4,Flat", train_size=10), 32)


def test_an_ef_construction_for_an_ivfs_hnsw_quantizer_is_refused_before_encoding():
    """`--ef-construction 50 --index-type 'IVF4_HNSW8,Flat'` passed the check (the string holds 'HNSW') and was never
    set: only an index's own graph takes it, and the manifest recorded no efConstruction."""
    with pytest.raises(RetrieverError, match=r"^--ef-construction is used only by an index with an HNSW graph of its "
                                             r"own, not by --index-type 'IVF4_HNSW8,Flat'"):
        check_buildable(IndexParams("IVF4_HNSW8,Flat", ef_construction=50), 32)
    check_buildable(IndexParams("PCA16,HNSW8,Flat", ef_construction=50), 32)


@pytest.mark.parametrize("spec, instead", [("MinMax,IVF4,Flat", "IVF4,Flat"), ("MinMaxFP16,Flat", "Flat"),
                                           ("L2norm,MinMax,SQfp16", "L2norm,SQfp16")])
def test_a_minmax_wrapper_which_cannot_add_vectors_is_refused_before_encoding(spec, instead):
    """`build --index-type 'MinMax,IVF16,Flat'` encoded the corpus, wrote the doc store and BM25 part, then failed at
    the first add: 'FAISS cannot add vectors to …: Error in virtual void faiss::IndexRowwiseMinMaxBase::add … add not
    implemented for this type of index'."""
    with pytest.raises(RetrieverError, match=rf"^--index-type '{spec}': FAISS's MinMax wrapper cannot add vectors "
                                             rf"\(it is filled from codes only\); drop the MinMax part, e\.g\. "
                                             rf"'{instead}'$"):
        check_buildable(IndexParams(spec), 32)
    with pytest.raises(RuntimeError, match="add not implemented"):  # what FAISS does at the first add
        new_index(spec, 32, IndexParams(spec)).add(np.zeros((1, 32), "float32"))
    check_buildable(IndexParams(instead), 32)


@pytest.mark.parametrize("params", [IndexParams("ivf-ondisk", train_size=1), IndexParams("SQ8", train_size=1),
                                    IndexParams("IVF1,SQ4", train_size=1), IndexParams("HNSW8_SQ8", train_size=1)])
def test_a_scalar_quantizer_trained_on_one_vector_of_many_is_refused_before_encoding(params):
    """Its range is that vector's alone, so every other vector got the same code: `index --index-type ivf-ondisk
    --train-size 1` on 50 passages built with exit 0 an index whose recall@10 was 0.256 (2 vectors: 0.834)."""
    with pytest.raises(RetrieverError, match=r"trains on at least 2 vectors, and --train-size is 1 \(a scalar "
                                             r"quantizer, which takes each dimension's range from them: one vector "
                                             r"gives every vector the same code\)"):
        check_trainable(params, 32, 50)
    check_trainable(IndexParams(params.index_type, train_size=2), 32, 50)
    check_trainable(IndexParams(params.index_type, train_size=1), 32, 1)  # the only vector: its own range holds it


@pytest.mark.parametrize("params, count, advice", [
    (IndexParams("ivf-ondisk", train_size=1), 50,
     "use --train-size 2 or more, --ondisk-codes fp16 (which trains nothing), or a flat index"),
    (IndexParams("SQ8", train_size=1), 50, "use --train-size 2 or more, SQfp16 codes (which train nothing), or a "
                                           "flat index"),
    (IndexParams("PCA16,Flat"), 10, "use a PCA to fewer dimensions (a smaller number after 'PCA' or 'ITQ' in "
                                    "--index-type) or a flat index"),
    (IndexParams("PCA16,Flat", train_size=10), 50, "use --train-size 16 or more, a PCA to fewer dimensions (a smaller "
                                                   "number after 'PCA' or 'ITQ' in --index-type), or a flat index"),
    (IndexParams("ivfpq", train_size=10), 5000, "use --train-size 256 or more or a flat index"),
    (IndexParams("ivfpq"), 1, "use a flat index"),  # its codes' bits are sized to the corpus: 1 bit, 2 centroids
])
def test_a_refusal_to_train_names_the_fixes_for_what_is_short(params, count, advice):
    """The advice was the same for every refusal ("fewer lists (--nlist), codes of fewer bits or a smaller PCA, a
    larger --train-size, or a flat index"): for a scalar quantizer trained on 1 vector, whose fix is --train-size 2 (or
    codes that train nothing), and for a corpus smaller than the need, where a larger --train-size changes nothing."""
    with pytest.raises(RetrieverError) as refused:
        check_trainable(params, 32, count)
    assert str(refused.value).endswith(f": {advice}"), refused.value
