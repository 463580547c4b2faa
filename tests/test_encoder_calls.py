"""Library calls on an Encoder with inputs of the wrong shape: a one-line RetrieverError, never vectors of the wrong
texts or a traceback from deep in the tokenizer."""
from __future__ import annotations

import numpy as np
import pytest

from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError


@pytest.fixture(scope="module")
def encoder(tiny_model_dir) -> Encoder:
    return Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")


def test_encode_queries_refuses_a_lone_string_and_non_strings(encoder):
    # "cat" was encoded letter by letter into 3 vectors; bytes and None were TypeErrors, a lone surrogate a
    # TypeError from the tokenizer.
    with pytest.raises(RetrieverError, match=r"queries must be a list of strings, not str; wrap one query as \[query\]"):
        encoder.encode_queries("cat")
    for texts, message in (([b"cat"], "query 1 of 1 is bytes, not a string"),
                           (["cat", None], "query 2 of 2 is NoneType, not a string"),
                           (["ab\ud800"], "query 1 of 1: the query has a lone surrogate U[+]D800")):
        with pytest.raises(RetrieverError, match=message):
            encoder.encode_queries(texts)
    assert encoder.encode_queries(text for text in ("cat", "dog")).shape == (2, 32)
    assert encoder.encode_queries([]).shape == (0, 32)


def test_encode_passages_takes_documents_only(encoder):
    # A list of strings was an AttributeError ('str' object has no attribute 'text').
    for passages, message in (("cat", "passages must be a list of retriever.corpus.Document, not str"),
                              (["cat"], r"passage 1 of 1 is str, not a Document; wrap each text as "
                                        r"retriever.corpus.Document\(id, text, title\)"),
                              ([Document("a", "cat"), Document("b", None)],
                               r"passage 2 of 2 has a text or title that is no string \(NoneType, str\)"),
                              ([Document("a", "cat", "\ud800")], "passage 1 of 1: text has a lone surrogate")):
        with pytest.raises(RetrieverError, match=message):
            encoder.encode_passages(passages)
    vectors = encoder.encode_passages([Document("a", "cat", "Cats"), Document("b", "dog", None)])
    np.testing.assert_allclose(vectors, encoder.encode_passages([Document("a", "cat", "Cats"), Document("b", "dog")]))


def test_an_encoder_takes_settings_not_a_model_name(tiny_model_dir):
    # Encoder("minilm") was an AttributeError ('str' object has no attribute 'validate').
    for wrong in (str(tiny_model_dir), {"model": str(tiny_model_dir)}):
        with pytest.raises(RetrieverError, match=r"Encoder takes EncoderSettings, not \w+; use Encoder\("
                                                 r"EncoderSettings.for_model\(MODEL\)\)"):
            Encoder(wrong)


def test_encode_queries_says_which_queries_it_cut_and_at_how_many_tokens(tiny_model_dir):
    """The server tells each client its query was cut from the tokenization the vectors used (no second pass)."""
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir), query_max_length=8), device="cpu", dtype="fp32")
    texts = ["cat", "the cat sat on the old mat by the fire", "x" * 5000, "a dog ran"]  # 3, 12, 1 (UNK), 5 tokens
    cut_at = ["stale"]
    vectors = encoder.encode_queries(texts, cut_at=cut_at)
    assert cut_at == [None, 8, 8, None]  # the 5,000 characters were never all read, so they count as cut
    np.testing.assert_array_equal(vectors, encoder.encode_queries(texts))


def test_encode_queries_says_which_queries_it_reads_as_unknown_tokens_only_past_the_query_prefix(tiny_model_dir):
    """The prefix's own words do not make a query of unknown words known; the flags come from the same tokenization
    as the vectors, and ``unknown_queries`` (no encoding) agrees."""
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir), query_prefix="the "), device="cpu", dtype="fp32")
    texts, unknown = ["🐝", "cat", " ", "the 🐝", "🐝 cat"], ["stale"]
    vectors = encoder.encode_queries(texts, unknown=unknown)
    assert unknown == [True, False, True, False, False] == encoder.unknown_queries(texts)
    np.testing.assert_array_equal(vectors, encoder.encode_queries(texts))


@pytest.mark.parametrize("batch_size", [0, -1, 1.5, True, "2"])
def test_a_per_call_batch_size_is_checked_as_the_encoders_own(encoder, batch_size):
    """`encode_queries(texts, batch_size=-1)`, `1.5`, `True` or `0` encoded with some other batch without a word,
    and "2" raised a TypeError from a comparison; `Encoder(batch_size=...)` refuses each in one line."""
    with pytest.raises(RetrieverError, match=rf"^batch size must be a whole number of at least 1, not {batch_size!r}$"):
        encoder.encode_queries(["cat", "dog", "bee"], batch_size=batch_size)
    assert encoder.encode_queries(["cat", "dog", "bee"], batch_size=2).shape[0] == 3
