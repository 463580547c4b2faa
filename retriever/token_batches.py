"""Tokenized texts as the encoder batches them: which rows go through one forward pass, and which texts were cut at
the max length (what ``Encoder`` counts and the server tells each client)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

# Texts per tokenizer call: a part (--shard-size passages) tokenized whole held every text's Encoding object while
# it was encoded; a piece's go once its token lists and cuts are kept.
TOKENIZE_ROWS = 1024


def length_batches(lengths: Sequence[int], batch_size: int, mix_lengths: bool = False) -> list[list[int]]:
    """Rows to encode together, longest first. A text's vector moves in its low bits with the padded length of its
    batch (bf16 most), so a batch of queries holds one token count only: a query's vector is then the same
    whatever else is encoded with it (a subset of the file, another --batch-size, one served alone). Passages
    and the server's concurrent queries mix lengths (``mix_lengths``): there, splitting costs more than the low
    bits are worth (benchmarks/README.md)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    if mix_lengths:
        return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    batches: list[list[int]] = []
    for row in order:
        if batches and len(batches[-1]) < batch_size and lengths[batches[-1][0]] == lengths[row]:
            batches[-1].append(row)
        else:
            batches.append([row])
    return batches


def cut_flags(encoded, unread: list, max_length: int) -> list[bool]:
    """Which tokenized texts were cut: tokens left over past the max length (fast tokenizers keep them; others are
    taken as cut at full length), or text other than whitespace the tokenizer never saw (``tokenize_bounded``'s
    ``unread``: only the head of a long text is read). Trailing whitespace past the cut is no cut."""
    overflowing = ([bool(e.overflowing) for e in encoded.encodings] if encoded.encodings
                   else [len(ids) >= max_length for ids in encoded["input_ids"]])
    return [bool(left or over) for left, over in zip(unread, overflowing)]


def cut_lengths(flags: list[bool], max_length: int) -> list[int | None]:
    """``encode_queries(cut_at=)``'s entries: the tokens a cut text was cut to, None for one that fit."""
    return [max_length if cut else None for cut in flags]


def tokenize_in_pieces(tokenize: Callable[[list[str], list], object], texts: list[str],
                       max_length: int) -> tuple[dict[str, list], list[bool]]:
    """``tokenize(piece, unread)`` (``tokenize_bounded`` with its tokenizer) over ``texts`` ``TOKENIZE_ROWS`` at a time:
    each text's token lists by key (``input_ids``, ``attention_mask``, ...) and whether it was cut (``cut_flags``),
    without the tokenizer's per-text Encoding objects (tokens, offsets, the overflow past the max length), which
    held for a whole part took several times the lists' memory. A text is tokenized alone, so the lists are one
    call's."""
    columns: dict[str, list] = {}
    flags: list[bool] = []
    for start in range(0, len(texts), TOKENIZE_ROWS):
        unread: list = []
        encoded = tokenize(texts[start:start + TOKENIZE_ROWS], unread)
        flags += cut_flags(encoded, unread, max_length)
        for key in encoded.keys():
            columns.setdefault(key, []).extend(encoded[key])
    return columns, flags
