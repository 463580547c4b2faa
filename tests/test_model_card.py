"""The README.md model card names what a model was trained from, on, and evaluated on, as the run recorded it."""
from __future__ import annotations

from pathlib import Path

import pytest

from fixtures_corpora import write_jsonl
from retriever.training import TrainConfig, train
from retriever.training.dual_encoder import DualEncoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def settings(output: Path, model: Path, **data) -> TrainConfig:
    return TrainConfig(output=str(output), model=str(model), batch_size=2, max_steps=1, device="cpu", dtype="fp32",
                       progress=False, encoder={"passage_max_length": 16, "query_max_length": 8}, **data)


def test_a_trained_model_card_names_its_start_model_data_and_dev_set(tmp_path, tiny_model_dir, tiny_beir):
    """The card used to read keys no trainer writes: "Base model: `unknown`", "Training data: `null`"."""
    (tiny_beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td6\t1\nq2\td4\t1\n",
                                                    encoding="utf-8")
    negatives = write_jsonl(tmp_path / "mined.jsonl", [{"query_id": "q1", "negatives": ["d1"]}])
    output = tmp_path / "model"
    train(settings(output, tiny_model_dir, dataset=str(tiny_beir), negatives=str(negatives), dev_split="test",
                   train_group_size=2))
    card = (output / "README.md").read_text(encoding="utf-8")
    assert f"- Base model: `{tiny_model_dir.name}`\n" in card
    assert "- Training data: `tiny-beir` split `train`, hard negatives `mined.jsonl`\n" in card
    assert "In-batch and hard-negative contrastive training (`retriever train`): " in card
    assert "On `tiny-beir` split `test` (best step " in card


@pytest.mark.parametrize("group_size, mined", [(1, ["d1"]), (3, ["d6"])])
def test_a_card_says_when_the_hard_negatives_given_were_not_trained_on(tmp_path, tiny_model_dir, tiny_beir,
                                                                       group_size, mined):
    """`--negatives` with --train-group-size 1, or whose every id is judged relevant: stderr said they were not used,
    and the card said the model was trained with them."""
    (tiny_beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td6\t1\nq2\td4\t1\n",
                                                    encoding="utf-8")
    negatives = write_jsonl(tmp_path / "mined.jsonl", [{"query_id": "q1", "negatives": mined}])
    train(settings(tmp_path / "model", tiny_model_dir, dataset=str(tiny_beir), negatives=str(negatives),
                   train_group_size=group_size))
    card = (tmp_path / "model" / "README.md").read_text(encoding="utf-8")
    assert "- Training data: `tiny-beir` split `train`, hard negatives `mined.jsonl` given but none used " \
           "(train_group_size 1, or none usable), so in-batch negatives only\n" in card
    assert "In-batch-negative contrastive training" in card


def test_a_jsonl_trained_model_card_names_the_file_its_corpus_and_the_dev_dataset(tmp_path, tiny_model_dir,
                                                                                    tiny_beir):
    """The record as `train` writes it (`learning_settings` and the dev result, saved through DualEncoder.save)."""
    examples = write_jsonl(tmp_path / "pairs.jsonl", [{"query": "honey", "positives": ["d6"]}])
    config = settings(tmp_path / "model", tiny_model_dir, train_jsonl=str(examples), corpus=str(tiny_beir),
                      dev_dataset=str(tiny_beir), dev_split="dev").normalised()
    model = DualEncoder.from_pretrained(config.model, **config.encoder)
    folder = model.save(config.output, {**config.learning_settings(), "init_model_path": config.model, "steps": 1,
                                        "dev": {"best_step": 1, "scores": {"ndcg@10": 0.25}, "history": []}})
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f"- Base model: `{tiny_model_dir.name}`\n" in card
    assert "- Training data: `pairs.jsonl` (ids from corpus `tiny-beir`)\n" in card
    assert "On `tiny-beir` split `dev` (best step 1): ndcg@10 0.2500." in card
    assert str(tmp_path) not in card


def test_the_front_matter_is_yaml_the_hub_reads_and_an_empty_recipe_is_left_out():
    """The hub files a card by `library_name`/`pipeline_tag` and links `base_model`; a record without recipe keys
    printed "In-batch-negative contrastive training (`retriever train`): ." under a Recipe heading."""
    import yaml

    from retriever.model_card import model_card

    card = model_card({"pooling": "mean", "normalize": True, "query_max_length": 8, "passage_max_length": 16,
                       "training": {"model": "minilm"}})
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["library_name"] == "sentence-transformers" and front["pipeline_tag"] == "sentence-similarity"
    assert front["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and "retriever" in front["tags"]
    assert "## Recipe" not in card and "): ." not in card
    local = model_card({"pooling": "cls", "query_max_length": 8, "passage_max_length": 8,
                        "training": {"model": "models/condenser", "steps": 3}})
    assert "base_model" not in local and "(`retriever train`): steps 3." in local
