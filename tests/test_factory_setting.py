"""The search setting read from a factory string is the one FAISS's own index of it takes."""
import faiss
import pytest

from retriever.factory_setting import factory_setting
from retriever.search_settings import taken_setting

# Every family FAISS's index_factory reads: wrappers, transforms, parenthesised quantizers, exact codes, graphs, IVFs.
SPECS = ["Flat", "HNSW32,Flat", "HNSW", "HNSW32_PQ8", "HNSW8_SQ8", "HNSW8,SQfp16", "IVF16,Flat", "IVF4k,PQ8",
         "IVF16,PQ8x4", "IVF16_HNSW8,Flat", "IVF16_NSG32,Flat", "IVF16(PQ2),Flat", "IVF16(IVF4,Flat),Flat",
         "PCA16,IVF4,Flat", "OPQ8_32,IVF16,PQ8", "PCAR16,L2norm,HNSW8,Flat", "RR32,Flat", "ITQ,Flat", "Pad64,IVF4,SQ8",
         "IVF16,Flat,IDMap", "IDMap2,HNSW8", "HNSW8,Flat,RFlat", "IVF16,PQ8,RFlat", "IVF16,Flat,Refine(HNSW8)",
         "HNSW8,Refine(IVF4,Flat)", "PCA16,IVF4_HNSW8,Flat,RFlat", "SQ8", "SQfp16", "PQ8", "PQ8x4fs", "NSG32,Flat",
         "NSG16", "RQ2x4", "LSQ2x4", "PRQ2x2x4", "RaBitQ", "IVF16,RaBitQ", "IVF16,PQ8x4fs", "IVF16,RQ2x4",
         "IVF16,FlatDedup", "MinMax,IVF16,Flat", "MinMaxFP16,HNSW8", "ZnLattice2x4_4"]


@pytest.mark.parametrize("spec", SPECS)
def test_the_setting_read_from_the_string_is_the_one_faiss_index_takes(spec):
    assert factory_setting(spec) == taken_setting(faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT))


@pytest.mark.parametrize("spec", ["NoSuchIndex", "", "PCA16", "IVF16", "IVF16(PQ2,Flat"])
def test_a_string_faiss_does_not_read_is_refused(spec):
    with pytest.raises(RuntimeError):
        faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT)
    with pytest.raises(ValueError, match="not a FAISS factory string"):
        factory_setting(spec)


def test_a_string_longer_than_a_build_takes_is_not_read():
    """A hand-edited manifest's factory of 18,000 characters took `info` 1.8 s to read (the square of its length)."""
    with pytest.raises(ValueError, match="a factory string of 18004 characters"):
        factory_setting("PCA16," * 3000 + "Flat")
