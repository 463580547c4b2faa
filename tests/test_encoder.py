from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from fixtures_models import build_vocab, make_tiny_bert, texts_of_many_lengths
from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.model_loading import load_model

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


def test_a_vector_does_not_depend_on_what_is_encoded_with_it():
    """In bf16 a text's vector moved in its low bits with the padded length of its batch: a query searched with
    other queries, a subset of a file, or another --batch-size got another vector (search then evaluate --run
    differed from evaluate --index in the third decimal). minilm: the tiny BERT's vectors did not move."""
    texts = texts_of_many_lengths(60)
    encoder = Encoder(EncoderSettings.for_model("minilm"), device="cpu", dtype="bf16", batch_size=16)
    together = encoder.encode_queries(texts)
    alone = np.stack([encoder.encode_queries([text])[0] for text in texts[:20]])
    assert np.array_equal(alone, together[:20])
    assert np.array_equal(encoder.encode_queries(texts[::3]), together[::3])
    encoder.batch_size = 5
    assert np.array_equal(encoder.encode_queries(texts), together)


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
    assert encoder.truncation_report() == ["note: 1 of 3 queries was longer than 16 tokens and was cut "
                                           "(--query-max-length)"]  # it said "1 of 3 queries were"


def test_a_tokenizer_that_pads_on_the_left_gives_the_vectors_of_unpadded_texts(tmp_path):
    """A tokenizer_config.json with padding_side left (decoder-style tokenizers) shifted BERT's positions and put
    a pad where CLS pooling looks: a text's vector depended on the lengths of its batch mates."""
    import json

    folder = make_tiny_bert(tmp_path / "model")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    for pooling in ("cls", "mean"):
        encoder = Encoder(EncoderSettings(model=str(folder), pooling=pooling), device="cpu", dtype="fp32", batch_size=4)
        alone = np.concatenate([encoder.encode_queries([text]) for text in TEXTS])
        np.testing.assert_allclose(encoder.encode_queries(TEXTS), alone, atol=1e-5)


def _edit_json(path, **changes):
    import json

    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("damage, message", [
    (lambda folder: (folder / "config.json").write_text("[1, 2]"), "config.json: not a JSON object"),
    (lambda folder: (folder / "config.json").write_text("null"), "config.json: not a JSON object"),
    (lambda folder: (folder / "tokenizer_config.json").write_text("[]"), "tokenizer_config.json: not a JSON object"),
    (lambda folder: _edit_json(folder / "config.json", hidden_size="32"), "cannot load its tokenizer .*hidden_size"),
    (lambda folder: _edit_json(folder / "config.json", vocab_size=50), "weights have other shapes than its config"),
    (lambda folder: _edit_json(folder / "config.json", max_position_embeddings=8), "weights have other shapes"),
])
def test_config_files_of_the_wrong_shape_are_one_line_not_a_traceback(tmp_path, damage, message):
    """transformers raised a bare TypeError, AttributeError, StrictDataclassFieldValidationError or RuntimeError."""
    folder = make_tiny_bert(tmp_path / "model")
    damage(folder)
    with pytest.raises(RetrieverError, match=message):
        Encoder(EncoderSettings(model=str(folder), passage_max_length=8), device="cpu")


def test_an_encoder_decoder_model_is_refused_when_it_loads(tmp_path):
    """A T5 folder loaded as T5Model, whose forward wants decoder inputs: a ValueError traceback at the first batch."""
    from transformers import T5Config, T5Model

    folder = make_tiny_bert(tmp_path / "model")
    (folder / "model.safetensors").unlink()
    config = T5Config(vocab_size=len(build_vocab()), d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    T5Model(config).save_pretrained(folder)
    with pytest.raises(RetrieverError, match="a t5 encoder-decoder model; retriever encodes with encoder-only"):
        Encoder(EncoderSettings(model=str(folder)), device="cpu")


def test_the_default_max_length_fits_a_roberta_models_positions(tmp_path):
    """RoBERTa counts positions from pad_token_id + 1: with 40 position embeddings it takes 38 tokens, and the
    default length was 40, refused by the encoder as if the user had typed it ("--passage-max-length 40 ...")."""
    from transformers import RobertaConfig, RobertaModel

    folder = make_tiny_bert(tmp_path / "model")
    (folder / "model.safetensors").unlink()
    config = RobertaConfig(vocab_size=len(build_vocab()), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=40, pad_token_id=1)
    RobertaModel(config).save_pretrained(folder)
    encoder = Encoder(EncoderSettings.for_model(str(folder)), device="cpu", dtype="fp32")
    assert encoder.settings.passage_max_length == 38
    assert encoder.encode_queries(["cat " * 100]).shape == (1, 32)


def test_a_checkpoint_stored_in_fp16_loads_in_fp32(tmp_path):
    """transformers 5 keeps a checkpoint's stored dtype: a half-precision folder gave `retriever train` fp16
    weights to update with AdamW (updates below fp16's resolution are lost)."""
    from transformers import BertModel

    from retriever.model_loading import load_model

    folder = make_tiny_bert(tmp_path / "model")
    BertModel.from_pretrained(folder).half().save_pretrained(folder)
    model, _ = load_model(str(folder))
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}


def test_a_model_that_needs_its_own_code_is_refused_without_a_prompt(tmp_path, monkeypatch):
    """transformers asked "Do you wish to run the custom code? [y/N]" on a terminal (15 s, then ran the folder's
    modeling file on a "y"); retriever never runs a model folder's code."""
    import json

    folder = make_tiny_bert(tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "xmodel",
                                                    "auto_map": {"AutoConfig": "modeling_x.XConfig",
                                                                 "AutoModel": "modeling_x.XModel"}}))
    (folder / "modeling_x.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
    monkeypatch.setattr("builtins.input", lambda *args: "y")  # a user who answers yes at the prompt
    with pytest.raises(RetrieverError, match="needs its own Python code .* which retriever never runs"):
        Encoder(EncoderSettings(model=str(folder)), device="cpu")
    assert not (tmp_path / "ran").exists()


def test_a_tokenizer_of_another_model_is_refused_before_any_text(tmp_path):
    """Token ids past the embedding table raised `IndexError: index out of range in self` at the first text
    holding one, in the middle of an encode."""
    from transformers import BertTokenizerFast

    folder = make_tiny_bert(tmp_path / "model")
    for path in folder.glob("tokenizer*"):
        path.unlink()
    vocab = build_vocab() + [f"word{i}" for i in range(50)]
    BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}).save_pretrained(folder)
    with pytest.raises(RetrieverError, match=f"token ids up to {len(vocab) - 1} but the model embeds only "
                                             f"{len(build_vocab())} tokens"):
        Encoder(EncoderSettings(model=str(folder)), device="cpu")


def test_an_unreachable_hub_fails_at_once_not_after_a_minute_of_retries(tmp_path):
    """With the hub unreachable (no network) and the id not cached, transformers retried for ~50 s before the same
    error. Run in a process of its own: the offline switch conftest.py sets is read once, at import."""
    import os
    import subprocess
    import sys
    import time

    env = {key: value for key, value in os.environ.items() if key != "HF_HUB_OFFLINE"}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT="http://127.0.0.1:9")  # nothing listens on port 9
    code = ("from retriever.encoder import Encoder, EncoderSettings\n"
            "Encoder(EncoderSettings(model='some-org/not-a-real-model'), device='cpu')")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "nor reachable on the Hugging Face hub" in result.stderr and "pass the folder" in result.stderr
    assert time.monotonic() - started < 25, "the hub was retried"


def test_loading_a_pretraining_folder_prints_no_load_report_and_missing_weights_in_one_line(tmp_path, capfd):
    """A pre-trained folder's MLM head printed transformers' 10-line LOAD REPORT, in terminal bold, on every
    search; weights the checkpoint lacks (initialised at random) must still be said."""
    from safetensors.torch import load_file, save_file
    from transformers import BertConfig, BertForMaskedLM

    folder = make_tiny_bert(tmp_path / "mlm")
    config = BertConfig.from_pretrained(folder)
    BertForMaskedLM(config).save_pretrained(folder)
    capfd.readouterr()
    load_model(str(folder))
    assert capfd.readouterr().err == ""
    weights = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in weights.items() if "layer.1.output" not in k}, folder / "model.safetensors",
              metadata={"format": "pt"})
    load_model(str(folder))
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "lacks 4 weights, initialised at random: encoder.layer.1.output" in lines[0], lines


def test_a_config_building_fewer_layers_than_the_weights_hold_is_said_in_one_line(tmp_path, capfd):
    """config.json saying 1 layer over weights of 2 (num_hidden_layers lowered, another model's config.json): the
    second layer was dropped without a word, and encode, train and pretrain ran a model cut to half its depth."""
    folder = make_tiny_bert(tmp_path / "model", layers=2)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    capfd.readouterr()
    Encoder(EncoderSettings(model=str(folder), pooling="cls"), device="cpu")
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "its weights hold 2 layers and config.json builds 1" in lines[0], lines
    assert "16 weights (encoder.layer.1." in lines[0] and "set num_hidden_layers to 2" in lines[0]


def test_a_checkpoint_without_pooler_weights_encodes_alike_on_every_load(tmp_path):
    """BertModel adds a pooler the checkpoint lacked (a coCondenser MLM folder) with random weights on each load;
    they joined the weights' fingerprint, so `build` made an index its own `search` refused as another model's."""
    from retriever.encoder import recorded_encoder

    folder = make_tiny_bert(tmp_path / "model", with_pooler=False)
    first = Encoder(EncoderSettings(model=str(folder), pooling="cls"), device="cpu", dtype="fp32")
    again = recorded_encoder(first.metadata(), "the index was built", tmp_path, device="cpu", dtype="fp32",
                             model=str(folder))
    assert again.weights_sha256 == first.weights_sha256
    np.testing.assert_array_equal(again.encode_queries(TEXTS), first.encode_queries(TEXTS))


def test_an_encoder_refuses_weights_drawn_at_random_where_training_only_warns(tmp_path, capfd):
    """Weights saved under other names (a wrapper's `encoder_q.` prefix) were all drawn at random with a warning:
    `build` wrote an index of noise, exit 0, that its search then refused as made by another model."""
    from safetensors.torch import load_file, save_file

    folder = make_tiny_bert(tmp_path / "model")
    weights = load_file(folder / "model.safetensors")
    save_file({f"encoder_q.{k}": v for k, v in weights.items()}, folder / "model.safetensors",
              metadata={"format": "pt"})
    with pytest.raises(RetrieverError, match=r"lacks \d+ of the model's weights .* drawn at random on every load"):
        Encoder(EncoderSettings(model=str(folder), pooling="cls"), device="cpu")
    assert "warning" not in capfd.readouterr().err  # one line: the error alone
    load_model(str(folder))  # training learns them: a warning only
    assert "initialised at random" in capfd.readouterr().err


def test_trailing_whitespace_past_the_query_max_length_is_no_cut(tiny_model_dir):
    """A text longer than the characters read counted as cut though only whitespace was left unread."""
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir), query_max_length=8), device="cpu", dtype="fp32")
    cut_at: list = []
    encoder.encode_queries(["honey bee" + " " * 1100, "honey bee" + " " * 70, "bee " * 3 + " " * 2000 + "honey",
                            "bee " * 20], cut_at=cut_at)
    assert cut_at == [None, None, 8, 8]


def test_special_token_text_in_a_query_is_read_as_text_not_as_that_token(tiny_model_dir):
    """"[MASK]" in a query was encoded as the [MASK] token (and "[SEP] [CLS]" as two control tokens)."""
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    unknown: list = []
    vectors = encoder.encode_queries(["[MASK]", "[SEP] [CLS]", "[mask]"], unknown=unknown)
    assert unknown == [False, False, False]
    np.testing.assert_allclose(vectors[0], vectors[2], atol=1e-6)  # lower-cased text, as "[mask]" is read


def test_encoding_queries_leaves_the_passage_tokenizers_state_as_it_was(tiny_model_dir):
    """Queries read "[SEP]" as text by switching the fast tokenizer's backend; on the one tokenizer passages use, a
    passage batch tokenized at the same time on another thread could be read with the queries' switch (and
    truncation length)."""
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir), query_max_length=8), device="cpu", dtype="fp32")
    backend = encoder.tokenizer.backend_tokenizer
    encoder.encode_passages([Document("d1", "the cat [SEP] sat")])
    before = (backend.encode_special_tokens, backend.truncation)
    encoder.encode_queries(["the [SEP] cat", "[MASK]"])
    assert (backend.encode_special_tokens, backend.truncation) == before
    assert backend.encode_special_tokens is False
