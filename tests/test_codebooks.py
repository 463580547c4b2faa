"""PQ codebooks trained on fewer vectors than FAISS advises: one note, not FAISS's warning per sub-quantiser."""
from __future__ import annotations

from retriever.indexing import IndexParams, build_index


def test_codebooks_trained_on_few_vectors_get_one_note_not_a_faiss_warning_each(tiny_flat_build, tmp_path, capfd):
    """`build --index-type ivfpq` of a corpus under 9,984 documents (SciFact's 5,183) printed FAISS's `WARNING
    clustering 5183 points to 256 centroids: please provide at least 9984 training points` once per sub-quantiser,
    48 identical lines at 384 dimensions; here 4 for the tiny BERT's 32."""
    build_index(tiny_flat_build.with_name("idx.shards"), tiny_flat_build.with_name("tiny-beir"), tmp_path / "idx",
                IndexParams("ivfpq"), progress=True, lexical=None)
    err = capfd.readouterr().err
    assert "WARNING clustering" not in err
    assert err.count("note: IVF1,PQ4x3's 4 PQ codebooks of 8 centroids are trained on 12 vectors, fewer than the 312 "
                     "(39 a centroid) FAISS advises;") == 1


def test_an_ondisk_build_of_one_list_has_no_faiss_warning(tiny_flat_build, tmp_path, capfd):
    """A corpus under 78 documents gets one IVF list, the sample's mean: FAISS warned `WARNING clustering 12 points to 1
    centroids: please provide at least 39 training points` amid an ivf-ondisk build."""
    build_index(tiny_flat_build.with_name("idx.shards"), tiny_flat_build.with_name("tiny-beir"), tmp_path / "idx",
                IndexParams("ivf-ondisk", parallel_parts=1), progress=False, lexical=None)
    assert "WARNING clustering" not in capfd.readouterr().err
