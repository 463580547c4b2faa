"""Rows batched by token count, longest first."""
from __future__ import annotations

from retriever.token_batches import length_batches


def test_batches_hold_one_token_count_longest_first_unless_lengths_are_mixed():
    lengths = [3, 7, 3, 7, 7, 5, 3]
    assert length_batches(lengths, 2) == [[1, 3], [4], [5], [0, 2], [6]]
    assert length_batches(lengths, 2, mix_lengths=True) == [[1, 3], [4, 5], [0, 2], [6]]
    assert length_batches([], 4) == []


def test_a_part_is_tokenized_a_piece_at_a_time_with_the_vectors_of_one_call(tiny_model_dir, monkeypatch):
    """A part of --shard-size passages was tokenized in one call and its Encoding objects (tokens, offsets, the
    overflow past the max length) held while it was encoded: 1.4 GB for 60,000 passages at 128 tokens, 228 MB in
    pieces (probe round 17). The pieces' ids, cuts and so vectors are those of one call."""
    import numpy as np

    from fixtures_models import texts_of_many_lengths
    from retriever import encoder as encoder_module
    from retriever import token_batches
    from retriever.corpus import Document
    from retriever.encoder import Encoder, EncoderSettings

    documents = [Document(f"d{i}", text * (1 + i % 9)) for i, text in enumerate(texts_of_many_lengths(40))]
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir), passage_max_length=24), device="cpu", dtype="bf16")
    whole = encoder.encode_passages(documents)
    whole_cut = encoder.last_cut
    calls: list[int] = []
    tokenize = encoder_module.tokenize_bounded
    monkeypatch.setattr(encoder_module, "tokenize_bounded", lambda tokenizer, texts, *rest: (
        calls.append(len(texts)), tokenize(tokenizer, texts, *rest))[1])
    monkeypatch.setattr(token_batches, "TOKENIZE_ROWS", 7)
    pieces = encoder.encode_passages(documents)
    assert calls == [7, 7, 7, 7, 7, 5]
    assert np.array_equal(whole, pieces) and encoder.last_cut == whole_cut > 0
