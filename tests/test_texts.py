from __future__ import annotations

import pytest

from retriever.errors import RetrieverError
from retriever.model_loading import load_tokenizer
from retriever.texts import (CHARS_PER_TOKEN, MAX_CHARS_PER_TOKEN, check_text, id_problem, is_blank, passage_text,
                             text_problem, tokenize_bounded)


def test_text_problem_finds_lone_surrogates_only():
    assert text_problem("plain") is None and text_problem("caf\u00e9 \U0001f600") is None
    assert text_problem("ab\ud800") == "a lone surrogate U+D800 at character 3"
    with pytest.raises(RetrieverError, match=r"^f\.jsonl:7: text has a lone surrogate U\+DC80"):
        check_text("\udc80", "f.jsonl:7")


@pytest.mark.parametrize("value, ok", [("d1", True), ("", False), ("a b", False), ("a\tb", False),
                                       ("a\nb", False), ("a\u00a0b", False), ("\ud800", False), ("é-1/2", True)])
def test_id_problem(value, ok):
    assert (id_problem(value) is None) == ok


@pytest.mark.parametrize("text", [
    "word " * 5000,                       # many short words
    "x" * 3000 + " tail",                 # one word longer than the first cut
    "a" + " " * 4000 + "b c d",           # whitespace longer than the first cut
    "\u6f22\u5b57" * 2000,                # no whitespace at all
    "short text",
])
def test_tokenize_bounded_equals_whole_text_tokenisation(tiny_model_dir, text):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    expected = tokenizer([text], truncation=True, max_length=64)  # every text is under 128 x 64 characters
    assert tokenize_bounded(tokenizer, [text], 64)["input_ids"] == expected["input_ids"]


def test_tokenize_bounded_hands_the_tokenizer_only_a_head(tiny_model_dir):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    seen = []

    def spy(texts, **kwargs):
        seen.extend(len(t) for t in texts)
        return tokenizer(texts, **kwargs)

    tokenize_bounded(spy, ["cat " * 1_000_000], 32)
    assert max(seen) <= CHARS_PER_TOKEN * 32


@pytest.mark.parametrize("text", ["x" * 1_000_000, " " * 1_000_000 + "cat", "a" + "\u200b" * 1_000_000])
def test_a_huge_text_that_yields_few_tokens_is_read_only_up_to_the_bound(tiny_model_dir, text):
    """Doubling the head until it yields max_length tokens read all of such a text: time in proportion to it."""
    tokenizer = load_tokenizer(str(tiny_model_dir))
    seen = []

    def spy(texts, **kwargs):
        seen.extend(len(t) for t in texts)
        return tokenizer(texts, **kwargs)

    tokenize_bounded(spy, [text, "a cat"], 32)
    assert max(seen) <= MAX_CHARS_PER_TOKEN * 32


def test_passage_text_joins_title_and_text_as_beir_does():
    assert passage_text("Title", "body") == "Title body"
    assert passage_text("", "body") == passage_text(None, "body") == "body"


@pytest.mark.parametrize("text", ["\x00", "\x01\x02 \x7f", "\ufffd", "\u0301", "\ue000", "\U000f0000", "\u200b"])
def test_what_is_blank_is_what_the_tokenizer_drops(tiny_model_dir, text):
    """A query of control, private-use, replacement or lone combining characters was encoded as [CLS][SEP] and
    returned arbitrary hits with exit 0 / status 200."""
    tokenizer = load_tokenizer(str(tiny_model_dir))
    assert tokenizer(text)["input_ids"] == tokenizer("")["input_ids"]
    assert is_blank(text) and not is_blank(text + "a")


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return load_tokenizer("minilm")


@pytest.mark.parametrize("text, unknown", [
    ("🐝", True), ("🐝?", True), ("🐝 !!!", True), ("???", True),
    ("C++", False), ("3.5%", False), ("β-catenin", False), ("COVID-19", False), ("中国", False), ("bee 🐝", False),
])
def test_a_text_holds_no_known_word_when_none_of_its_tokens_is_a_word_of_the_vocabulary(minilm_tokenizer, text,
                                                                                         unknown):
    """Only texts of [UNK] and special tokens counted: "🐝?" ([UNK] ?) was searched for its arbitrary dense hits."""
    from retriever.texts import non_word_ids, only_unknown_tokens

    tokenizer = minilm_tokenizer
    ids = tokenizer([text])["input_ids"]
    assert only_unknown_tokens(ids, set(tokenizer.all_special_ids), non_word_ids(tokenizer)) == [unknown]


def test_a_sentencepiece_text_of_unknown_characters_holds_no_known_word():
    """SentencePiece reads "🐝" as <s> ▁ <unk> </s>: the lone word-start mark "▁" counted as a known word."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from retriever.texts import non_word_ids, only_unknown_tokens

    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0), ("▁wing", -3.0),
             ("?", -4.0), ("w", -5.0), ("i", -5.0), ("n", -5.0), ("g", -5.0)]
    backend = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    backend.pre_tokenizer, backend.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0),
                                                                                                 ("</s>", 2)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    texts = ["🐝", "🐝 ?", "wing", "🐝 wing"]
    ids = tokenizer(texts)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids[0]) == ["<s>", "▁", "<unk>", "</s>"]
    assert only_unknown_tokens(ids, set(tokenizer.all_special_ids), non_word_ids(tokenizer)) == [True, True, False,
                                                                                                  False]


def test_query_ids_are_taken_as_the_run_writers_take_them(tiny_index):
    """Searcher.run([1, 2], ...) said 'query id 1 of 2 is int, not a string', while write_run and evaluate_run take
    7 as "7": an integer (numpy's too) is its decimal text, a float is refused, and 1 and "1" are one id given twice."""
    import numpy as np

    from retriever.searching import Searcher
    from retriever.texts import check_query_ids

    assert check_query_ids([1, np.int64(2), "q3"]) == ["1", "2", "q3"]
    with pytest.raises(RetrieverError, match=r"^query id 3\.0 is float, not a string or an integer"):
        check_query_ids(["q1", 3.0])
    with pytest.raises(RetrieverError, match=r"^query id '1' is given twice \(queries 1 and 2 of 2\)"):
        check_query_ids([1, "1"])
    run = Searcher(tiny_index, device="cpu", dtype="fp32").run([1, 2], ["honey bee", "hot lava"], k=2)
    assert list(run) == ["1", "2"]


@pytest.mark.parametrize("kind", [set, frozenset])
def test_a_set_of_queries_or_ids_is_refused_as_it_has_no_order(tiny_index, kind):
    """Searcher.search({"a", "b"}) returned hits in the set's order, which hash randomisation changes between runs,
    while a dict was refused: a set is refused in one line saying to pass a list."""
    from retriever.searching import Searcher

    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    said = r"must be a list of strings, not {}: a set has no order, .*; pass a list \(e\.g\. sorted\(\.\.\.\)\)$"
    with pytest.raises(RetrieverError, match=f"^queries {said.format(kind.__name__)}"):
        searcher.search(kind({"honey", "lava"}))
    with pytest.raises(RetrieverError, match=f"^query ids {said.format(kind.__name__)}"):
        searcher.run(kind({"q1", "q2"}), ["honey", "lava"])
