from __future__ import annotations

import json
import shutil

import pytest

from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.fusion import FusionParams
from retriever.fusion_tuning import fusion_grid, tune_and_record
from retriever.indexing import MANIFEST_FILE, encode_and_index
from retriever.searching import Searcher


@pytest.fixture()
def index_and_dataset(tiny_beir, tiny_model_dir, tmp_path):
    shutil.copy(tiny_beir / "qrels" / "test.tsv", tiny_beir / "qrels" / "train.tsv")
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, progress=False)
    return tmp_path / "idx", tiny_beir


def test_grid_starts_with_the_untuned_default():
    grid = fusion_grid(1000)
    assert grid[0] == FusionParams() and {p.method for p in grid} == {"rrf", "convex"}
    assert [p.alpha for p in grid if p.method == "convex"][::10] == [0.0, 0.5, 1.0]


def test_tuning_records_the_best_fusion_which_search_then_uses(index_and_dataset):
    index, dataset = index_and_dataset
    record = tune_and_record(index, dataset, "train", device="cpu", dtype="fp32", progress=False)
    tuned = record["tuned"]
    assert tuned["split"] == "train" and tuned["queries"] == 4 and tuned["metric"] == "ndcg@10"
    assert tuned["score"] == max(row["ndcg@10"] for row in tuned["grid"]) >= tuned["untuned_rrf"]
    assert json.loads((index / MANIFEST_FILE).read_text())["fusion"] == record
    searcher = Searcher(index, device="cpu", dtype="fp32")
    assert searcher.fusion == FusionParams.from_record(record)
    assert Searcher(index, device="cpu", fusion_overrides={"method": "rrf"}).fusion.method == "rrf"


def test_tuning_on_the_test_split_is_refused(index_and_dataset):
    index, dataset = index_and_dataset
    with pytest.raises(RetrieverError, match="--split test: tuning the fusion on the split you report"):
        tune_and_record(index, dataset, "test", device="cpu")
    assert "fusion" not in json.loads((index / MANIFEST_FILE).read_text())
