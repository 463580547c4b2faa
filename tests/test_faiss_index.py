import faiss
import pytest

from retriever.errors import RetrieverError
from retriever.faiss_index import IndexParams, default_nlist, default_pq_m, factory_string, new_index


def test_ivf_defaults_are_sane():
    assert default_nlist(1_000_000) == 4000
    assert default_nlist(100) == 2
    assert default_pq_m(384) == 48 and 768 % default_pq_m(768) == 0


def test_refined_index_rescores_k_factor_candidates_and_keeps_it_on_disk(tmp_path):
    index = new_index("IVF4,PQ2x4,RFlat", 8, IndexParams(refine_k_factor=30))
    faiss.write_index(index, str(tmp_path / "i.faiss"))
    assert faiss.downcast_index(faiss.read_index(str(tmp_path / "i.faiss"))).k_factor == 30


@pytest.mark.parametrize("index_type, expected", [
    ("flat", "Flat"), ("hnsw", "HNSW32,Flat"), ("ivfpq", "IVF4000,PQ48"), ("ivf-ondisk", "IVF4000,SQ8"),
    ("IVF10,Flat", "IVF10,Flat"),
])
def test_index_types_become_factory_strings(index_type, expected):
    assert factory_string(IndexParams(index_type), 384, 1_000_000) == expected


def test_pq_m_must_divide_the_dimension():
    with pytest.raises(RetrieverError, match="must divide"):
        factory_string(IndexParams("ivfpq", pq_m=5), 384, 1_000_000)


@pytest.mark.parametrize("spec", ["IDMap,Flat", "IDMap2,HNSW32,Flat", "IDMap,IVF4,Flat"])
def test_idmap_factories_are_refused_when_the_settings_are_made(spec):
    """The tool numbers the vectors itself: FAISS would refuse `add` only after the whole corpus is encoded."""
    with pytest.raises(RetrieverError, match="IDMap indexes are not supported"):
        IndexParams(spec)
