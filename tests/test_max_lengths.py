"""Max lengths against the model: its positions above, its tokenizer's special tokens below."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures_models import make_tiny_bert
from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.training.dual_encoder import DualEncoder

CLS, SEP = ({"SpecialToken": {"id": token, "type_id": 0}} for token in ("[CLS]", "[SEP]"))
SEQUENCE = {"Sequence": {"id": "A", "type_id": 0}}


def with_specials(folder: Path, single: list[dict]) -> Path:
    """A tiny BERT whose tokenizer wraps a text in ``single`` (tokenizers' template), read as tokenizer.json says."""
    make_tiny_bert(folder, layers=1)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["post_processor"]["single"] = single
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


def test_a_cls_only_tokenizer_takes_a_max_length_of_two(tmp_path):
    """A fixed floor of 3 assumed [CLS] and [SEP]; a tokenizer that adds [CLS] alone leaves a text a token at 2."""
    folder = with_specials(tmp_path / "cls-only", [CLS, SEQUENCE])
    encoder = Encoder(EncoderSettings(model=str(folder), passage_max_length=2), device="cpu", dtype="fp32")
    vectors = encoder.encode_queries(["cat", "dog"])  # the query length follows the passage length
    assert encoder.tokenizer.num_special_tokens_to_add() == 1 and not (vectors[0] == vectors[1]).all()


@pytest.mark.parametrize("flag, value", [("passage_max_length", 3), ("query_max_length", 3)])
def test_a_length_the_tokenizers_own_tokens_fill_is_refused_when_it_loads(tmp_path, flag, value):
    """A tokenizer adding three special tokens filled a max length of 3 with them ([CLS] [CLS] [SEP]), so every
    text encoded to one vector, exit 0; refused in one line, for `train` too, before the weights load."""
    folder = with_specials(tmp_path / "three", [CLS, CLS, SEQUENCE, SEP])
    message = (rf"^{flag} \(--{flag.replace('_', '-')}\): 3 is less than 4, the fewest tokens that leave a text one "
               r"of its own next to the 3 special tokens the model's tokenizer adds \(\[CLS\] \[CLS\] \[SEP\]\)")
    with pytest.raises(RetrieverError, match=message):
        Encoder(EncoderSettings(model=str(folder), **{flag: value}), device="cpu")
    with pytest.raises(RetrieverError, match=message):
        DualEncoder.from_pretrained(str(folder), **{flag: value})
    assert Encoder(EncoderSettings(model=str(folder), **{flag: 4}), device="cpu").settings.model == str(folder)


def test_a_bert_tokenizer_keeps_its_floor_of_three(tiny_model_dir):
    with pytest.raises(RetrieverError, match=r"2 is less than 3, .* 2 special tokens .* \(\[CLS\] \[SEP\]\)"):
        Encoder(EncoderSettings(model=str(tiny_model_dir), query_max_length=2), device="cpu")


@pytest.mark.parametrize("role", ["query", "passage"])
def test_a_length_a_prefix_fills_is_refused_when_the_tokenizer_loads(tiny_model_dir, role):
    """A prefix takes room too: --query-max-length 8 with --query-prefix "query: " (6 tokens of the tiny vocabulary)
    and [CLS] [SEP] left a query no token of its own, so every query encoded to one vector, without a word."""
    prefix, length, flag = f"{role}: ", f"{role}_max_length", f"--{role}-max-length"
    taken = len(Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu").tokenizer.tokenize(prefix))
    floor = taken + 3
    settings = {f"{role}_prefix": prefix, length: floor - 1}
    message = (rf"^{length} \({flag}\): {floor - 1} is less than {floor}, the fewest tokens that leave a text one of "
               rf"its own after the {taken} tokens of --{role}-prefix '{role}: ' and the 2 special tokens the model's "
               r"tokenizer adds \(\[CLS\] \[SEP\]\); pass at least")
    with pytest.raises(RetrieverError, match=message):
        Encoder(EncoderSettings(model=str(tiny_model_dir), **settings), device="cpu")
    with pytest.raises(RetrieverError, match=message):
        DualEncoder.from_pretrained(str(tiny_model_dir), **settings)
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir), **{**settings, length: floor}), device="cpu",
                      dtype="fp32")
    vectors = encoder.encode_queries(["cat", "dog"]) if role == "query" else encoder.encode_passages(
        [Document("d1", "cat"), Document("d2", "dog")])
    assert not (vectors[0] == vectors[1]).all()


PREFIXES = ["query: ", "passage: ", "query:", "Represent this sentence for searching relevant passages: ", "query",
            "abcq", "xqzj", "search_query"]
TEXTS = ["querying", "ing", "uick brown fox", "\u0301abc", "Ünïcode", "漢字 text", "-x", "42 cats", "zzzz", "##s"]


@pytest.mark.parametrize("model", ["minilm", "tiny"])
def test_a_prefix_merged_with_the_text_never_takes_more_tokens_than_it_was_counted_for(tiny_model_dir, model):
    """``check_room_for_text`` counts a prefix's tokens on their own; the text follows it with no space between, so
    WordPiece can merge the two ("abcq" + "ing": abc ##qing). The floor holds all the same: the first ``taken + 1``
    tokens of prefix + text always reach into the text, and a prefix ending in whitespace or punctuation tokenizes
    apart."""
    from transformers import AutoTokenizer

    from retriever.model_names import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm") if model == "minilm" else tiny_model_dir)
    for prefix in PREFIXES:
        alone = tokenizer(prefix, add_special_tokens=False)["input_ids"]
        for text in TEXTS:
            joined = tokenizer(prefix + text, add_special_tokens=False, return_offsets_mapping=True)
            assert max(end for _, end in joined["offset_mapping"][:len(alone) + 1]) > len(prefix), (prefix, text)
            if not prefix[-1].isalnum():
                assert joined["input_ids"] == alone + tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("value", ["128", 12.5, -3, 0, True])
def test_a_max_seq_length_that_is_no_length_names_the_file(tmp_path, value):
    """sentence-transformers fails on these (or cuts every text to nothing); retriever replaced them with the
    tokenizer's length (512) without a word, so the folder's intended length was never applied."""
    folder = make_tiny_bert(tmp_path / "st", layers=1)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": value}))
    with pytest.raises(RetrieverError, match=rf"sentence_bert_config.json: max_seq_length {value!r} is not a number of "
                                             r"tokens .* or pass --passage-max-length N$"):
        EncoderSettings.for_model(str(folder))
    assert EncoderSettings.for_model(str(folder), passage_max_length=64).passage_max_length == 64
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": None}))  # unset: the tokenizer's
    assert EncoderSettings.for_model(str(folder)).passage_max_length == 512
