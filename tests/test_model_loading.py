"""Loading a model folder's tokenizer: what the user is told when it cannot be read, and nothing else on stderr."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from fixtures_models import make_tiny_bert
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.model_loading import load_tokenizer


@pytest.mark.skipif(importlib.util.find_spec("sentencepiece") is not None, reason="sentencepiece is installed")
@pytest.mark.parametrize("model_file, tokenizer_class", [("sentencepiece.bpe.model", "XLMRobertaTokenizer"),
                                                         ("spiece.model", "T5Tokenizer")])
def test_a_sentencepiece_tokenizer_without_its_package_says_to_install_it(tmp_path, capfd, caplog, model_file,
                                                                           tokenizer_class):
    """transformers fell back to tiktoken and failed asking to `pip install tiktoken`, after five lines of log, and
    the folder was called damaged."""
    folder = make_tiny_bert(tmp_path / "model")
    (folder / "tokenizer.json").unlink()
    (folder / model_file).write_bytes(b"\x0a\x05\x0a\x01a\x15\x00\x00\x00\x00")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": tokenizer_class}))
    capfd.readouterr()
    with pytest.raises(RetrieverError, match=f"{model_file}: a SentencePiece tokenizer .* pip install sentencepiece"):
        load_tokenizer(str(folder))
    assert capfd.readouterr().err == "" and caplog.text == ""  # transformers' log goes to caplog under pytest


def test_a_model_max_length_below_the_tokenizer_probe_warns_of_nothing(tmp_path, capfd, caplog):
    """sentence-transformers 6 saves max_seq_length as the tokenizer's model_max_length; below the 42 tokens of the
    tokenizer probe, every load printed `Token indices sequence length is longer than the specified maximum ...
    will result in indexing errors`, though every text is cut to the max length."""
    folder = make_tiny_bert(tmp_path / "model")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 16}))
    capfd.readouterr()
    encoder = Encoder(EncoderSettings(model=str(folder)), device="cpu", dtype="fp32")
    encoder.encode_queries(["the cat " * 40])
    assert encoder.settings.passage_max_length == 16 and capfd.readouterr().err == ""
    assert "indexing errors" not in caplog.text  # transformers' log goes to caplog under pytest



@pytest.mark.parametrize("protocol", [4, 5])
def test_weights_saved_with_a_pickle_protocol_the_safe_loader_cannot_read_say_so(tmp_path, capfd, protocol):
    """Such a file is harmless but torch's weights_only loader refuses it: the message said "damaged or holds code",
    after torch's two-line note on the protocol."""
    import torch
    from safetensors.torch import load_file

    folder = make_tiny_bert(tmp_path / "model")
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin", pickle_protocol=protocol)
    with pytest.raises(RetrieverError, match=rf"pytorch_model.bin: saved with pickle protocol {protocol}, which "
                                             r"torch's safe loader .* pickle_protocol=2\)$"):
        Encoder(EncoderSettings.for_model(str(folder)))
    assert "Detected pickle protocol" not in capfd.readouterr().err


def test_a_hostile_protocol_4_weights_file_is_not_run(tmp_path):
    import pickle

    from fixtures_training import _WritesMarker

    folder, marker = make_tiny_bert(tmp_path / "model"), tmp_path / "PWNED"
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_WritesMarker(marker), protocol=4))
    with pytest.raises(RetrieverError, match=r"saved with pickle protocol 4, .*\(it could run code\)"):
        Encoder(EncoderSettings.for_model(str(folder)))
    assert not marker.exists()


def test_weights_saved_with_pickle_protocol_3_load_without_a_note(tmp_path):
    """torch warned of the protocol on every load of such a folder (two lines before each command's output)."""
    import warnings

    import torch
    from safetensors.torch import load_file

    folder = make_tiny_bert(tmp_path / "model")
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin", pickle_protocol=3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert Encoder(EncoderSettings.for_model(str(folder))).dim == 32
    assert not [w for w in seen if "pickle protocol" in str(w.message)]


def _tokenizer_config(folder, **entries):
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **entries}))
    return folder


@pytest.mark.parametrize("side", ["padding_side", "truncation_side"])
def test_a_sentence_transformers_folder_padding_or_cutting_on_the_left_is_refused(tmp_path, side):
    """sentence-transformers pads (moving a BERT's positions) or cuts on the left as the tokenizer says; retriever
    pads and cuts on the right, so its vectors differed from SentenceTransformer(folder)'s, exit 0."""
    folder = _tokenizer_config(make_tiny_bert(tmp_path / "st"), **{side: "left"})
    (folder / "modules.json").write_text("[]")
    with pytest.raises(RetrieverError, match=rf"tokenizer_config.json: {side} 'left': sentence-transformers "):
        load_tokenizer(str(folder))


def test_a_tokenizer_cutting_on_the_left_still_encodes_the_head_of_a_text(tmp_path):
    """retriever hands the tokenizer the head of a long text; cutting that on the left encoded its middle."""
    folder = make_tiny_bert(tmp_path / "model")
    text = ["the cat sat by the fire " + "and the dog ran to the river " * 80]
    right = Encoder(EncoderSettings(model=str(folder), passage_max_length=16), device="cpu").encode_queries(text)
    _tokenizer_config(folder, truncation_side="left")
    left = Encoder(EncoderSettings(model=str(folder), passage_max_length=16), device="cpu").encode_queries(text)
    np.testing.assert_array_equal(left, right)


def test_weights_of_other_objects_than_tensors_are_refused_in_torchs_reason_not_its_advice(tmp_path):
    """The message held the first line of torch's refusal: a half sentence in terminal bold ("you have two options,
    do those steps only if you trust the source"), its options cut off and its reason left out."""
    import torch
    from safetensors.torch import load_file

    folder = make_tiny_bert(tmp_path / "model", layers=1)
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save({key: value.numpy() for key, value in state.items()}, folder / "pytorch_model.bin")
    with pytest.raises(RetrieverError, match=r"cannot be loaded as plain tensors \(Weights only load failed: "
                                             r"Unsupported global: GLOBAL numpy.*by default\); it is damaged") as refused:
        Encoder(EncoderSettings.for_model(str(folder)))
    assert "\x1b" not in str(refused.value) and "options" not in str(refused.value)
