"""When a Searcher loads its model: BM25 search needs none, so a bm25 default loads it only for a dense or hybrid
search, once, however many threads ask."""
from __future__ import annotations

import json
import shutil
import threading
import time

import pytest
from click.testing import CliRunner

from retriever.cli import main
from retriever.errors import RetrieverError
from retriever.searching import Searcher


@pytest.fixture()
def moved_model(tiny_flat_build, tiny_model_dir, tmp_path):
    """tiny_flat_build's copy (and its dataset) recording a model folder that moved away."""
    index = shutil.copytree(tiny_flat_build, tmp_path / "idx")
    shutil.copytree(tiny_flat_build.parent / "tiny-beir", tmp_path / "beir")
    manifest = json.loads((index / "manifest.json").read_text())
    moved = shutil.copytree(tiny_model_dir, tmp_path / "model")
    manifest["encoder"].update(model=str(moved), model_path="../model")
    (index / "manifest.json").write_text(json.dumps(manifest))
    moved.rename(tmp_path / "model-moved")
    return index


def test_a_bm25_search_needs_no_model(moved_model, tmp_path):
    """`search --mode bm25` and `evaluate --mode bm25` loaded the model they never use: with it moved away they
    failed ("its model was recorded at ../model ..."), and with it there they waited for it to load."""
    searcher = Searcher(moved_model, device="cpu", mode="bm25")
    assert [hit.id for hit in searcher.search(["honey flower"], k=1)[0]] == ["d6"] and searcher.loaded_encoder is None
    with pytest.raises(RetrieverError, match=r"its model was recorded at \.\./model \(relative to it\), which is not"):
        searcher.search(["honey flower"], k=1, mode="dense")
    with pytest.raises(RetrieverError, match=r"its model was recorded at \.\./model"):
        Searcher(moved_model, device="cpu", mode="hybrid")  # dense and hybrid defaults say so on opening, as before
    found = CliRunner().invoke(main, ["search", str(moved_model), "honey flower", "--mode", "bm25", "-k", "1"])
    assert found.exit_code == 0 and "d6" in found.output, found.output
    run = CliRunner().invoke(main, ["search", str(moved_model), "--queries", str(tmp_path / "beir" / "queries.jsonl"),
                                    "--mode", "bm25", "-o", str(tmp_path / "run.trec")])
    assert run.exit_code == 0 and (tmp_path / "run.trec").read_text().startswith("q1 Q0 d6 1 "), run.output
    scored = CliRunner().invoke(main, ["evaluate", "--index", str(moved_model), "--dataset", str(tmp_path / "beir"),
                                       "--split", "test", "--mode", "bm25"])
    assert scored.exit_code == 0 and "ndcg@10" in scored.output, scored.output


def test_threads_first_asking_for_the_model_load_it_once(tiny_flat_build, monkeypatch):
    """A served index searched in bm25 by default loads its model on the first dense request; requests arriving
    together must share one load, not load a copy each."""
    import retriever.encoder as encoder

    loads, started = [], threading.Barrier(4)

    def slow_load(*args, **kwargs):
        loads.append(1)
        time.sleep(0.05)  # the others ask meanwhile
        return real_load(*args, **kwargs)

    real_load, searcher = encoder.recorded_encoder, Searcher(tiny_flat_build, device="cpu", mode="bm25")
    monkeypatch.setattr(encoder, "recorded_encoder", slow_load)
    encoders = []
    threads = [threading.Thread(target=lambda: (started.wait(), encoders.append(searcher.encoder))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loads) == 1 and len(encoders) == 4 and all(e is searcher.loaded_encoder for e in encoders)
    assert len(searcher.search(["honey flower"], k=2, mode="dense")[0]) == 2 and len(loads) == 1


@pytest.mark.parametrize("arguments, said", [
    ({"device": None}, "unknown device None; use auto, cpu, cuda or cuda:N"),
    ({"dtype": "fp8"}, "unknown dtype 'fp8'"),
    ({"batch_size": 0}, "batch size must be a whole number of at least 1, not 0"),
    ({"model": 5}, "model must be the path of the model folder .* not int 5"),
    ({"encoders": 5}, "encoders must be a SharedEncoders, or None, not int 5"),
])
def test_a_bm25_searchers_encoder_arguments_are_checked_on_opening(tiny_flat_build, arguments, said):
    """Loading the model on first use must not leave a wrong argument to fail the first dense search."""
    with pytest.raises(RetrieverError, match=said):
        Searcher(tiny_flat_build, mode="bm25", **{"device": "cpu", **arguments})
