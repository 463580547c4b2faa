from __future__ import annotations

from retriever.corpus import iter_documents, read_queries
from retriever.demo import demo_dataset, run_demo
from retriever.runs import read_qrels


def test_demo_collection_ships_inside_the_package():
    dataset = demo_dataset()
    documents = list(iter_documents(dataset.corpus_path))
    queries = read_queries(dataset.queries_path)
    qrels = read_qrels(dataset.qrels_path("test"))
    assert len(documents) >= 200 and len(queries) >= 40
    ids = {d.id for d in documents}
    assert set(qrels) == {q.id for q in queries}
    assert all(doc in ids for judged in qrels.values() for doc in judged)


def test_demo_builds_searches_and_scores(tmp_path):
    result = run_demo(tmp_path / "demo", progress=False)
    assert (tmp_path / "demo" / "manifest.json").is_file()
    assert len(result.examples) == 3 and all(len(hits) == 5 for _, hits in result.examples)
    assert result.report.evaluation.mean["recall@10"] > 0.8  # minilm finds paraphrased answers


def test_demo_into_the_working_folder_opens_the_index_it_built(tmp_path, tiny_beir, tiny_model_dir, monkeypatch,
                                                             one_torch_thread):
    """`retriever demo -o .` in an empty folder: the build swaps a new folder in at the working folder's path,
    and the demo then opened `.`, the old, deleted folder (`.: not an index folder`, exit 1, index built)."""
    import retriever.demo as demo
    from retriever.corpus import BeirDataset

    monkeypatch.setattr(demo, "demo_dataset", lambda: BeirDataset.open(tiny_beir))
    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    result = demo.run_demo(".", model=str(tiny_model_dir), progress=False)
    assert (tmp_path / "empty" / "manifest.json").is_file()
    assert result.report.evaluation.num_queries == 4 and len(result.examples) == 3


def test_demo_into_a_users_folder_is_refused_before_loading_naming_no_flag_it_lacks(tmp_path, monkeypatch):
    """The refusal said `--overwrite replaces only index folders`, a flag `retriever demo` does not have, and came
    after the model loaded."""
    import pytest

    import retriever.demo as demo
    from retriever.errors import RetrieverError

    monkeypatch.setattr(demo, "Encoder", lambda *a, **k: pytest.fail("the model was loaded"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    for output in (tmp_path / "mine", tmp_path / "mine" / "notes.txt"):
        with pytest.raises(RetrieverError, match="the demo replaces only an index folder") as refused:
            demo.run_demo(output, progress=False)
        assert "--overwrite" not in str(refused.value)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"


def test_demo_over_an_index_of_another_corpus_is_refused_before_loading(tmp_path, tiny_beir, tiny_model_dir,
                                                                         monkeypatch):
    """`retriever demo -o indexes/scifact` replaced the user's index of another corpus by the demo's (the refusal
    covered only folders that are not indexes), though its message says it replaces one it built before."""
    import pytest

    import retriever.demo as demo
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.errors import RetrieverError
    from retriever.indexing import IndexParams, encode_and_index

    index = tmp_path / "scifact"
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir / "corpus.jsonl", index, encoder, IndexParams("flat"), progress=False)
    manifest = (index / "manifest.json").read_bytes()
    monkeypatch.setattr(demo, "Encoder", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(RetrieverError) as refused:
        demo.run_demo(index, progress=False)
    assert str(refused.value) == (
        f"{index}: an index of another corpus (tiny-beir/corpus.jsonl), not the demo's; the demo replaces only an index of the "
        "demo collection (one it built before) or an empty folder: choose another --output, or remove it")
    assert (index / "manifest.json").read_bytes() == manifest


def test_the_demo_over_its_own_index_hashes_the_corpus_once(tmp_path, tiny_beir, tiny_model_dir, monkeypatch):
    """The demo hashed its corpus to check the folder's old index was its own, then again when evaluating the index
    it had just built from it (besides the build's own hash, which the manifest records)."""
    import retriever.demo as demo
    import retriever.evaluation as evaluation
    from retriever.corpus import BeirDataset
    from retriever.integrity import file_sha256

    monkeypatch.setattr(demo, "demo_dataset", lambda: BeirDataset.open(tiny_beir))
    demo.run_demo(tmp_path / "demo", model=str(tiny_model_dir), device="cpu", progress=False)
    hashed = []
    for module in (demo, evaluation):  # the corpus checks (the build's own hash is index_folder's)
        for name in ("file_sha256", "remembered_sha256"):
            monkeypatch.setattr(module, name, lambda path, *a, **k: hashed.append(path) or file_sha256(path),
                                raising=False)
    result = demo.run_demo(tmp_path / "demo", model=str(tiny_model_dir), device="cpu", progress=False)
    assert hashed == [tiny_beir / "corpus.jsonl"] and result.report.evaluation.num_queries == 4


def test_a_bad_k_is_refused_before_the_demo_builds(tmp_path, tiny_model_dir):
    """run_demo(k=0) built and evaluated the whole index, then the search refused k."""
    import pytest

    from retriever.errors import RetrieverError

    with pytest.raises(RetrieverError, match="k must be a whole number of at least 1, not 0"):
        run_demo(tmp_path / "demo", model=str(tiny_model_dir), k=0, progress=False)
    assert not (tmp_path / "demo").exists() and not (tmp_path / "demo.shards").exists()


def test_an_output_that_is_no_path_is_one_error():
    """run_demo(output=None) died of pathlib's TypeError naming no argument."""
    import pytest

    from retriever.errors import RetrieverError

    with pytest.raises(RetrieverError, match="^output must be the index folder's path .str or Path., not NoneType None$"):
        run_demo(None, progress=False)
