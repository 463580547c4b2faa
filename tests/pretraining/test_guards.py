"""Inputs that used to crash pre-training or let it train nothing (probe round 6): a tokenizer larger than the
model's embeddings, a corpus the tokenizer only knows as [UNK], a coCondenser corpus with one span document, and a
huge line, which is now tokenized in bounded pieces with the same tokens."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from fixtures_models import make_tiny_bert
from pretraining.configs import short_config
from retriever.errors import RetrieverError
from retriever.model_loading import load_tokenizer
from retriever.pretraining import pretrain
from retriever.pretraining import masking
from retriever.pretraining.condenser import load_condenser
from retriever.pretraining.masking import TokenizedCorpus, text_pieces

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def corpus_of(path, texts) -> str:
    path.write_text("".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n" for i, text in enumerate(texts)),
                    encoding="utf-8")
    return str(path)


def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused_before_training(tiny_model_dir, tiny_beir, tmp_path):
    """It died of `IndexError: index out of range in self` in the embedding at the first batch."""
    folder = tmp_path / "small-vocab"
    load_tokenizer(str(tiny_model_dir)).save_pretrained(folder)
    BertModel(BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(folder)
    with pytest.raises(RetrieverError, match=r"its tokenizer has token ids up to \d+ but the model embeds only 60 "
                                             "tokens"):
        pretrain(short_config(tiny_beir, tmp_path / "out", folder), log=print)
    assert not (tmp_path / "out" / "config.json").exists()


def test_a_max_length_past_the_models_positions_says_the_most_it_takes(tiny_model_dir, tiny_beir, tmp_path):
    """`--max-length 513` on a 512-position BERT said only that it "exceeds the model's 512 positions": no model
    named, no length to pass, where train's --passage-max-length refusal gives both."""
    config = dataclasses.replace(short_config(tiny_beir, tmp_path / "out", tiny_model_dir), max_length=513)
    with pytest.raises(RetrieverError, match=rf"^--max-length 513 is more than the 512 positions {tiny_model_dir} can "
                                             "take; pass at most 512$"):
        pretrain(config, log=print)
    assert not (tmp_path / "out" / "config.json").exists()


def test_a_corpus_the_tokenizer_only_knows_as_unk_is_refused(tiny_model_dir, tmp_path):
    """Every token was [UNK], nothing was masked: loss 0.000 -> 0.000, a model written and exit 0."""
    corpus = corpus_of(tmp_path / "c.jsonl", ["日本語 中文 한국어 ελληνικά"] * 12)
    with pytest.raises(RetrieverError, match="every token of the corpus is \\[UNK\\] or another special token"):
        pretrain(short_config(corpus, tmp_path / "out", tiny_model_dir), log=print)
    assert not (tmp_path / "out" / "config.json").exists()


def test_a_corpus_mostly_of_unk_trains_with_a_warning(tiny_model_dir, tmp_path):
    corpus = corpus_of(tmp_path / "c.jsonl", ["日本語 中文 한국어 the cat sat on the mat"] * 12)
    lines = []
    result = pretrain(short_config(corpus, tmp_path / "out", tiny_model_dir), log=lines.append)
    assert result.steps == 2 and all(entry["loss"] > 0 for entry in result.history)
    assert any(line.startswith("warning: ") and "of the corpus's tokens are [UNK]" in line for line in lines), lines


def test_cocondenser_with_one_span_document_is_refused(tiny_model_dir, tmp_path):
    """Each step's span softmax held only the sibling: span loss 0.0 at every step, exit 0."""
    corpus = corpus_of(tmp_path / "c.jsonl", ["the cat sat on the old mat by the fire and a dog ran to the river",
                                              "cat"])
    with pytest.raises(RetrieverError, match="--cocondenser needs at least 2 documents long enough for two spans"):
        pretrain(short_config(corpus, tmp_path / "out", tiny_model_dir, cocondenser=True), log=print)


@pytest.mark.parametrize("short, said", [(["cat dog", "", "sun moon star"], "3 of 5 documents are too short for two "
                                                  "spans of 4 tokens and are left out"),
                                         (["cat dog"], "1 of 3 documents is too short for two spans of 4 tokens and "
                                                       "is left out")])
def test_documents_too_short_for_two_spans_are_counted_and_said(tiny_model_dir, tmp_path, short, said):
    """--cocondenser trains only on documents of two spans: the others were left out without a word (the log named
    only the documents kept), so a corpus of mostly short texts trained on a few. One was said as "1 of 3
    documents are too short"."""
    long = "the cat sat on the old mat by the fire and a dog ran to the river"
    corpus = corpus_of(tmp_path / "c.jsonl", [long, short[0], long, *short[1:]])
    lines: list[str] = []
    pretrain(short_config(corpus, tmp_path / "out", tiny_model_dir, cocondenser=True, max_steps=1, warmup_ratio=0),
             log=lines.append)
    assert f"{corpus}: {said} of --cocondenser pre-training (empty ones included)" in lines, lines


class CountingTokenizer:
    """The tokenizer, noting how many characters each call hands it."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.calls = tokenizer, []

    def __call__(self, texts, **kwargs):
        self.calls.append(sum(map(len, texts)))
        return self.tokenizer(texts, **kwargs)


def test_a_huge_line_is_tokenized_in_bounded_pieces_with_the_same_tokens(tiny_model_dir, tmp_path):
    """A 20 MB line went to the tokenizer whole: 3.9 GB peak and 81 s, for 20 MB of int32 ids."""
    tokenizer = load_tokenizer(str(tiny_model_dir))
    sentence = "the cat sat on the old mat by the fire "
    repeats = 2 * masking.TOKENIZE_CHARS // len(sentence)
    corpus = corpus_of(tmp_path / "c.jsonl", [sentence * repeats, "a dog ran", ""])
    counting = CountingTokenizer(tokenizer)
    tokens = TokenizedCorpus.read(corpus, counting)
    assert max(counting.calls) < masking.TOKENIZE_CHARS + masking.PIECE_CHARS, counting.calls
    one = tokenizer(sentence, add_special_tokens=False)["input_ids"]
    short = len(tokenizer("a dog ran", add_special_tokens=False)["input_ids"])
    assert tokens.offsets.tolist() == [0, len(one) * repeats, len(one) * repeats + short, len(one) * repeats + short]
    assert tokens.ids[:len(one) * repeats].tolist() == one * repeats and tokens.ids.dtype.name == "int32"


@pytest.mark.parametrize("text, limit, expected", [("", 4, [""]), ("abc", 4, ["abc"]),
                                                   ("ab cd ef gh", 4, ["ab ", "cd ", "ef ", "gh"]),
                                                   ("a\nbc\tde", 3, ["a\n", "bc\t", "de"]),
                                                   ("abcdefghij", 4, ["abcd", "efgh", "ij"])])
def test_text_pieces_cut_after_whitespace_and_lose_nothing(text, limit, expected):
    assert text_pieces(text, limit) == expected


def test_output_inside_the_start_models_folder_is_refused(tiny_beir, tmp_path):
    """A finished run's own weights joined the start model's fingerprint: its rerun was refused as 'the start model
    changed'; the start model folder itself as output is refused before any work too."""
    model = make_tiny_bert(tmp_path / "model", layers=2)
    for output in (model / "condenser", model):
        with pytest.raises(RetrieverError, match="is inside the start model's folder"):
            pretrain(short_config(tiny_beir, output, model), log=print)
    assert not (model / "condenser").exists()


@pytest.mark.parametrize("steps", [{"max_steps": 3}, {"epochs": 1, "max_steps": None}])
def test_freezing_the_backbone_for_every_step_is_said(tiny_beir, tiny_model_dir, tmp_path, steps):
    """The backbone, all that fine-tuning keeps, came out bit-identical to the start model without a word."""
    lines = []
    pretrain(short_config(tiny_beir, tmp_path / "out", tiny_model_dir, freeze_backbone_steps=1000, **steps), log=lines.append)
    assert any(line.startswith("warning: --freeze-backbone-steps 1000 covers all ") and "comes out unchanged" in line
               for line in lines), lines
    lines.clear()
    pretrain(short_config(tiny_beir, tmp_path / "thawed", tiny_model_dir, freeze_backbone_steps=1, max_steps=2),
             log=lines.append)
    assert not any("--freeze-backbone-steps" in line for line in lines), lines


def test_a_corpus_that_is_a_pipe_is_refused_by_name(tiny_model_dir, tmp_path):
    """`pretrain <(cat corpus.jsonl)` resolved the pipe to /proc/PID/fd/pipe:[N] and said "no such file or folder"."""
    read, write = os.pipe()
    try:
        with pytest.raises(RetrieverError, match=f"/dev/fd/{read}: is a pipe or a device, not a file"):
            pretrain(short_config(f"/dev/fd/{read}", tmp_path / "out", tiny_model_dir, corpus_format="jsonl"), log=print)
    finally:
        os.close(read)
        os.close(write)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("payload", [torch.zeros(3), [1, 2], {"c_head.zz": torch.zeros(2)}, {"c_head.0.x": 1}])
def test_a_model_pt_that_is_not_a_head_is_one_error(tmp_path, payload):
    """A warm start whose model.pt held a tensor, a list or unnumbered c_head keys died of an AttributeError."""
    model = make_tiny_bert(tmp_path / "model", layers=2)
    torch.save(payload, model / "model.pt")
    with pytest.raises(RetrieverError, match="model.pt: not a Condenser head \\(a dict of c_head.N.\\* tensors"):
        load_condenser(str(model))


@pytest.mark.parametrize("pickle_protocol, payload, said", [
    (4, {"c_head.0.x": torch.zeros(2)}, "saved with pickle protocol 4, which torch's safe loader"),
    (2, {"c_head.0.x": np.zeros(2)}, r"not plain tensors \(UnpicklingError: Weights only load failed: Unsupported "
                                     r"global: GLOBAL numpy"),
    (None, b"PK\x03\x04 not a zip", r"not plain tensors \("),
])
def test_a_model_pt_the_safe_loader_refuses_is_one_line_without_unsafe_advice(tmp_path, capfd, pickle_protocol,
                                                                              payload, said):
    """torch's refusal came whole: lines of terminal-bold text advising `weights_only=False` (running the file's
    code), and a UserWarning on stderr for protocol 4."""
    model = make_tiny_bert(tmp_path / "model", layers=2)
    if pickle_protocol is None:  # a damaged file
        (model / "model.pt").write_bytes(payload)
    else:
        torch.save(payload, model / "model.pt", pickle_protocol=pickle_protocol)
    with pytest.raises(RetrieverError, match=f"model.pt: cannot read the Condenser head: .*{said}") as refused:
        load_condenser(str(model))
    assert "\n" not in str(refused.value) and "weights_only` set to `False" not in str(refused.value)
    assert "\x1b" not in str(refused.value) and "pickle protocol" not in capfd.readouterr().err


def test_documents_with_empty_text_are_counted_and_said(tiny_model_dir, tmp_path):
    """`encode` says how many documents had empty text; pre-training passed over them without a word, so a corpus
    whose texts were mostly empty trained on the rest as if nothing were missing."""
    corpus = corpus_of(tmp_path / "c.jsonl", ["the cat sat on the old mat by the fire", "", "a dog ran", "  "])
    lines: list[str] = []
    pretrain(short_config(corpus, tmp_path / "out", tiny_model_dir, max_steps=1, warmup_ratio=0), log=lines.append)
    assert f"{corpus}: 4 documents; 2 with empty text (e.g. d1, d3)" in lines, lines


EMPTY_CORPUS = "corpus is empty (an unset variable?): give a path to a corpus file or BEIR folder"


@pytest.mark.parametrize("corpus, said", [("", EMPTY_CORPUS), (" ", EMPTY_CORPUS),
                                          (None, "corpus must be a path to a corpus file or BEIR folder, not NoneType "
                                                 "None")])
def test_an_empty_or_missing_corpus_path_is_refused(tiny_beir, tiny_model_dir, tmp_path, monkeypatch, corpus, said):
    """PretrainConfig(corpus="") (an unset variable) pre-trained on whatever the working folder held, as Path("") is
    ".", and corpus=None was read as a file named 'None' in the working folder."""
    monkeypatch.chdir(tiny_beir)  # a BEIR folder: "" trained on it
    settings = short_config(tiny_beir, tmp_path / "out", tiny_model_dir, max_steps=1)
    with pytest.raises(RetrieverError) as caught:
        pretrain(dataclasses.replace(settings, corpus=corpus), log=print)
    assert str(caught.value) == said
    assert not (tmp_path / "out").exists()
