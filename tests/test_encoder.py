from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from conftest import make_tiny_bert
from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError

TEXTS = ["a cat", "the dog ran to the river with a ball and then back to the old city", "tea", "honey bee flower"]


def reference_mean(model_dir, texts, max_length=64):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    rows = []
    with torch.no_grad():
        for text in texts:  # one at a time: no padding at all
            batch = tokenizer([text], return_tensors="pt", truncation=True, max_length=max_length)
            rows.append(model(**batch).last_hidden_state.mean(dim=1)[0])
    return torch.nn.functional.normalize(torch.stack(rows), dim=-1).numpy()


def test_length_sorted_batches_return_input_order(tiny_model_dir):
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32", batch_size=2)
    got = encoder.encode_queries(TEXTS)
    np.testing.assert_allclose(got, reference_mean(tiny_model_dir, TEXTS), atol=1e-5)


def test_bf16_close_to_fp32(tiny_model_dir):
    settings = EncoderSettings(model=str(tiny_model_dir))
    fp32 = Encoder(settings, device="cpu", dtype="fp32").encode_queries(TEXTS)
    bf16 = Encoder(settings, device="cpu", dtype="bf16").encode_queries(TEXTS)
    assert (fp32 * bf16).sum(axis=1).min() > 0.99


def test_normalisation_prefix_and_max_length(tiny_model_dir):
    plain = Encoder(EncoderSettings(model=str(tiny_model_dir), normalize=False, pooling="cls"),
                    device="cpu", dtype="fp32")
    vectors = plain.encode_queries(TEXTS)
    assert not np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    prefixed = Encoder(EncoderSettings(model=str(tiny_model_dir), query_prefix="what "), device="cpu", dtype="fp32")
    np.testing.assert_allclose(prefixed.encode_queries(["a cat"]), reference_mean(tiny_model_dir, ["what a cat"]),
                               atol=1e-5)
    short = Encoder(EncoderSettings(model=str(tiny_model_dir), passage_max_length=4), device="cpu", dtype="fp32")
    long_doc = Document("x", TEXTS[1])
    np.testing.assert_allclose(short.encode_passages([long_doc]),
                               reference_mean(tiny_model_dir, [TEXTS[1]], max_length=4), atol=1e-5)


def test_pooler_refused_when_checkpoint_has_none(tmp_path):
    folder = make_tiny_bert(tmp_path / "nopooler", with_pooler=False)
    with pytest.raises(RetrieverError, match="pooler"):
        Encoder(EncoderSettings(model=str(folder), pooling="pooler"), device="cpu")
    Encoder(EncoderSettings(model=str(folder), pooling="cls"), device="cpu")  # other poolings are fine


def test_minilm_alias_loads():
    encoder = Encoder(EncoderSettings.for_model("minilm"), device="cpu")
    assert encoder.dim == 384
    vector = encoder.encode_queries(["hello world"])
    assert vector.shape == (1, 384) and abs(np.linalg.norm(vector) - 1) < 1e-4


def test_unreachable_hub_id_says_how_to_pass_a_folder():
    from huggingface_hub import constants
    assert constants.HF_HUB_OFFLINE, "conftest.py must make the hub offline before huggingface_hub is imported"
    with pytest.raises(RetrieverError, match="pass the folder"):
        Encoder(EncoderSettings(model="some-org/not-a-real-model"), device="cpu")


def test_a_folder_without_tokenizer_files_is_refused_not_read_as_all_unknown(tmp_path):
    folder = make_tiny_bert(tmp_path / "model")
    for path in folder.glob("tokenizer*"):
        path.unlink()
    (folder / "vocab.txt").unlink(missing_ok=True)
    (folder / "special_tokens_map.json").unlink(missing_ok=True)
    with pytest.raises(RetrieverError, match="the tokenizer has no vocabulary, only its special tokens"):
        Encoder(EncoderSettings(model=str(folder)), device="cpu")


@pytest.mark.parametrize("damage, part", [
    (lambda folder: (folder / "config.json").write_text("{not json"), "cannot load its tokenizer"),
    (lambda folder: (folder / "model.safetensors").unlink(), "cannot load its config or weights"),
])
def test_a_damaged_local_folder_is_named_as_such_not_blamed_on_the_hub(tmp_path, damage, part):
    folder = make_tiny_bert(tmp_path / "model")
    damage(folder)
    with pytest.raises(RetrieverError, match=f"{part} .*the model folder is damaged or incomplete") as raised:
        Encoder(EncoderSettings(model=str(folder)), device="cpu")
    assert "hub" not in str(raised.value)


def test_a_text_read_only_up_to_the_bound_is_counted_as_cut(tiny_model_dir):
    from retriever.texts import MAX_CHARS_PER_TOKEN

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir), passage_max_length=16), device="cpu", dtype="fp32")
    encoder.encode_queries(["x" * (MAX_CHARS_PER_TOKEN * 16 + 10), "cat", "x" * 500])
    assert encoder.truncation_report() == ["note: 1 of 3 queries were longer than 16 tokens and were cut "
                                           "(--query-max-length)"]
