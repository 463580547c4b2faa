"""Reading a model folder's sentence-transformers files: read once per load, and refused where edited to disagree
with retriever.json."""
from __future__ import annotations

import json
import re

import pytest

from retriever.encoder import EncoderSettings
from retriever.training.dual_encoder import DualEncoder


@pytest.mark.parametrize("edit, named", [
    (lambda f: _edit_json(f / "config_sentence_transformers.json", lambda c: c["prompts"].update(query="search: ")),
     "query_prefix 'q: ' in retriever.json, 'search: '"),
    (lambda f: _edit_json(f / "1_Pooling" / "config.json", lambda c: c.update(pooling_mode_cls_token=True,
                                                                               pooling_mode_mean_tokens=False)),
     "pooling 'mean' in retriever.json, 'cls'"),
    (lambda f: _edit_json(f / "modules.json", lambda m: m.pop()), "normalize True in retriever.json, False"),
    (lambda f: _edit_json(f / "sentence_bert_config.json", lambda c: c.update(max_seq_length=16)),
     "passage_max_length 32 in retriever.json, 16"),
])
def test_sentence_transformers_files_edited_to_disagree_with_retriever_json_are_refused(tmp_path, tiny_model_dir,
                                                                                       edit, named):
    """A folder re-saved by sentence-transformers with another prompt (or pooling, or without Normalize) was encoded
    with retriever.json's stale settings: other vectors than SentenceTransformer(folder)'s, exit 0."""
    from retriever.errors import RetrieverError

    model = DualEncoder.from_pretrained(str(tiny_model_dir), pooling="mean", normalize=True, query_prefix="q: ",
                                        passage_prefix="p: ", query_max_length=32, passage_max_length=32)
    folder = model.save(tmp_path / "model", training={"init_model": "tiny"})
    EncoderSettings.for_model(str(folder))
    edit(folder)
    with pytest.raises(RetrieverError, match=re.escape(named)):
        EncoderSettings.for_model(str(folder))
    overrides = {"query_prefix": "search: ", "pooling": "cls", "normalize": False, "passage_max_length": 16}
    name = next(key for key in overrides if key in named)
    assert getattr(EncoderSettings.for_model(str(folder), **{name: overrides[name]}), name) == overrides[name]


def _edit_json(path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


def test_config_sentence_transformers_json_is_read_once_per_load(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """It was read three times for one folder's settings (CrossEncoder, SparseEncoder, prompts), and once more when
    training started from it."""
    from pathlib import Path

    from test_st_folders import PROMPTS, saved_by_sentence_transformers

    folder = saved_by_sentence_transformers(tmp_path, tiny_model_dir, "mean", True, PROMPTS)
    reads = []
    read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda path: (reads.append(path.name), read_bytes(path))[1])
    settings = EncoderSettings.for_model(str(folder))
    assert (reads.count("config_sentence_transformers.json"), settings.query_prefix) == (1, "query: ")
    reads.clear()
    DualEncoder.from_pretrained(str(folder))
    assert reads.count("config_sentence_transformers.json") == 1


@pytest.mark.parametrize("edit, named", [
    (lambda f: _edit_json(f / "modules.json", lambda m: m.pop()), "normalize True in retriever.json, False"),
    (lambda f: _edit_json(f / "1_Pooling" / "config.json", lambda c: c.update(pooling_mode_cls_token=True,
                                                                               pooling_mode_mean_tokens=False)),
     "pooling 'mean' in retriever.json, 'cls'"),
    (lambda f: _edit_json(f / "query" / "sentence_bert_config.json", lambda c: c.update(max_seq_length=8)),
     "query_max_length 20 in retriever.json, 8"),
    (lambda f: _edit_json(f / "sentence_bert_config.json", lambda c: c.update(max_seq_length=16)),
     "passage_max_length 28 in retriever.json, 16"),
])
def test_untied_towers_sentence_transformers_files_edited_to_disagree_are_refused(tmp_path, tiny_model_dir, edit,
                                                                                  named):
    """Only a shared tower's modules were compared: an untied folder's Router edited to drop Normalize, pool
    otherwise or cut at another length was encoded with retriever.json's settings, other vectors than
    SentenceTransformer(folder)'s, exit 0."""
    from retriever.errors import RetrieverError

    model = DualEncoder.from_pretrained(str(tiny_model_dir), towers="untied", pooling="mean", normalize=True,
                                        query_max_length=20, passage_max_length=28)
    folder = model.save(tmp_path / "model", training={"init_model": "tiny"})
    EncoderSettings.for_model(str(folder))
    edit(folder)
    with pytest.raises(RetrieverError, match=re.escape(named)):
        EncoderSettings.for_model(str(folder))


def test_a_pooler_dense_trained_apart_from_the_pooler_is_refused(tmp_path, tiny_model_dir):
    """`pooler` pooling is written as a Dense holding the pooler's weights; trained further by sentence-transformers
    (which leaves the transformer's own pooler as it was) and saved in place, retriever.json still said `pooler`
    and retriever applied the stale pooler: other vectors than SentenceTransformer(folder)'s, exit 0."""
    from safetensors.torch import load_file, save_file

    from retriever.errors import RetrieverError

    model = DualEncoder.from_pretrained(str(tiny_model_dir), pooling="pooler", normalize=False)
    folder = model.save(tmp_path / "model", training={"init_model": "tiny"})
    EncoderSettings.for_model(str(folder))
    weights = load_file(str(folder / "2_Dense" / "model.safetensors"))
    save_file({**weights, "linear.weight": weights["linear.weight"] * 1.5}, str(folder / "2_Dense" / "model.safetensors"))
    with pytest.raises(RetrieverError, match=r"its Dense is not BERT's pooler, as retriever writes one: its weights "
                                             r"are not the transformer's pooler's"):
        EncoderSettings.for_model(str(folder))


@pytest.mark.parametrize("towers", ["shared", "untied"])
def test_a_pooling_edited_to_leave_the_prompts_out_is_refused(tmp_path, tiny_model_dir, towers):
    """include_prompt false (sentence-transformers pools the text's tokens alone) in a folder whose retriever.json
    has prefixes was not compared: retriever pooled the prefix's tokens too, other vectors, exit 0."""
    from retriever.errors import RetrieverError

    model = DualEncoder.from_pretrained(str(tiny_model_dir), towers=towers, pooling="mean", query_prefix="q: ")
    folder = model.save(tmp_path / "model", training={"init_model": "tiny"})
    _edit_json(folder / "1_Pooling" / "config.json", lambda c: c.update(include_prompt=False))
    with pytest.raises(RetrieverError, match=r"model: its pooling leaves its prompts out \(include_prompt false\), "
                                             r"edited since retriever.json was written"):
        EncoderSettings.for_model(str(folder))
