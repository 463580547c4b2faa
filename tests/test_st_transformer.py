"""A sentence-transformers Transformer module's config: read where sentence-transformers reads it, and options
retriever does not apply refused by name. Each case below gave other vectors than ``SentenceTransformer(folder)``
with exit 0."""
from __future__ import annotations

import json

import pytest

from fixtures_models import make_tiny_bert, sentence_transformers_modules
from retriever.encoder import EncoderSettings
from retriever.errors import RetrieverError
from test_st_folders import assert_same_vectors, saved_by_sentence_transformers

sentence_transformers = pytest.importorskip("sentence_transformers")  # in the `test` extra
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def edited(folder, **entries):
    config = json.loads((folder / "sentence_bert_config.json").read_text())
    (folder / "sentence_bert_config.json").write_text(json.dumps({**config, **entries}))
    return folder


@pytest.mark.parametrize("entries, message", [
    ({"processor_kwargs": {"model_max_length": 12}}, r"its processor_kwargs \(model_max_length\) change how"),
    ({"tokenizer_args": {"do_lower_case": False}}, r"its tokenizer_args \(do_lower_case\) change how"),
    ({"config_kwargs": {"num_hidden_layers": 2}}, r"its config_kwargs \(num_hidden_layers\) change how"),
    ({"model_kwargs": {"dtype": "float16"}}, r"its model_kwargs \(dtype\) change how"),
    ({"processing_kwargs": {"text": {"truncation": False}}}, r"its processing_kwargs \(text\) change how"),
    ({"transformer_task": "fill-mask", "modality_config": None}, r"transformer_task 'fill-mask': sentence-transformers "
                                                                 r"takes another output"),
    ({"query_length": 32}, r"query_length 32 is a multi-vector setting"),
    ({"tokenizer_name_or_path": "bert-base-cased"}, r"tokenizer_name_or_path 'bert-base-cased': sentence-transformers "
                                                    r"loads the tokenizer from there"),
])
def test_transformer_options_retriever_does_not_apply_are_refused(tmp_path, tiny_model_dir, entries, message):
    folder = saved_by_sentence_transformers(tmp_path, tiny_model_dir, "mean", False, {})
    if entries.get("modality_config", 1) is None:  # as an older version wrote it: the task's default output
        entries = {key: value for key, value in entries.items() if key != "modality_config"}
        config = json.loads((folder / "sentence_bert_config.json").read_text())
        config.pop("modality_config", None)
        config.pop("module_output_name", None)
        (folder / "sentence_bert_config.json").write_text(json.dumps(config))
    edited(folder, **entries)
    with pytest.raises(RetrieverError, match=r"sentence_bert_config.json: " + message):
        EncoderSettings.for_model(str(folder))


def test_a_legacy_config_file_name_is_read(tmp_path, tiny_model_dir):
    """sentence-transformers reads sentence_roberta_config.json (and other names older versions wrote) when there is
    no sentence_bert_config.json; retriever read only the latter and cut texts at the tokenizer's length."""
    folder = edited(saved_by_sentence_transformers(tmp_path, tiny_model_dir, "mean", False, {}), max_seq_length=10)
    (folder / "sentence_bert_config.json").rename(folder / "sentence_roberta_config.json")
    assert EncoderSettings.for_model(str(folder)).passage_max_length == 10
    assert_same_vectors(folder)


def test_a_max_seq_length_past_512_saved_in_the_tokenizer_is_kept(tmp_path):
    """sentence-transformers ≥ 6 saves max_seq_length as the tokenizer's model_max_length; retriever took that for a
    plain tokenizer's and capped it at 512, cutting texts sentence-transformers reads to 600 tokens."""
    models = sentence_transformers_modules()
    from transformers import BertConfig, BertModel

    base = make_tiny_bert(tmp_path / "bert")
    config = json.loads((base / "config.json").read_text())
    BertModel(BertConfig(**{**config, "max_position_embeddings": 1024})).save_pretrained(base)
    modules = [models.Transformer(str(base), max_seq_length=600), models.Pooling(32, pooling_mode="mean")]
    sentence_transformers.SentenceTransformer(modules=modules, device="cpu").save(str(tmp_path / "st"))
    assert EncoderSettings.for_model(str(tmp_path / "st")).passage_max_length == 600
    assert_same_vectors(tmp_path / "st", ["a cat", "a river city " * 250])
