"""Training sequences from raw corpus text, and BERT whole-word masking.

Documents are streamed and tokenized in small chunks, so a large corpus never sits in memory as
token lists: plain Condenser packs the token stream into full-length blocks (no padding wasted);
coCondenser needs two spans of the same document, so it makes one example per document. Every
random choice comes from generators seeded per epoch or saved in checkpoints, so a resumed run
sees exactly the batches it would have seen.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import TypeVar

import torch
from transformers import PreTrainedTokenizerBase

from retriever.corpus import Document, Fields, iter_documents
from retriever.pretraining.condenser import IGNORE_INDEX

T = TypeVar("T")
Example = list[list[int]]  # one packed block, or two sibling spans for coCondenser
MIN_SPAN_TOKENS = 4
TOKENIZE_CHUNK = 256


def document_text(document: Document) -> str:
    return f"{document.title} {document.text}".strip() if document.title else document.text


def token_streams(documents: Iterable[Document], tokenizer: PreTrainedTokenizerBase,
                  chunk_size: int = TOKENIZE_CHUNK) -> Iterator[list[int]]:
    """One token-id list per document, tokenized a chunk at a time so the fast tokenizer batches."""
    chunk: list[str] = []
    for document in documents:
        chunk.append(document_text(document))
        if len(chunk) >= chunk_size:
            yield from _tokenize(tokenizer, chunk)
            chunk = []
    if chunk:
        yield from _tokenize(tokenizer, chunk)


def _tokenize(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[list[int]]:
    encoded = tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False,
                        return_attention_mask=False, return_token_type_ids=False)
    return encoded["input_ids"]


def pack_blocks(streams: Iterable[list[int]], max_length: int, cls_id: int, sep_id: int) -> Iterator[list[int]]:
    """Concatenate documents and cut ``[CLS] + max_length-2 tokens + [SEP]`` blocks; the tail is kept short."""
    body = max_length - 2
    if body < 1:
        raise ValueError("max_length must leave room for [CLS] and [SEP]")
    carry: list[int] = []
    for ids in streams:
        carry.extend(ids)
        start = 0
        while len(carry) - start >= body:
            yield [cls_id, *carry[start:start + body], sep_id]
            start += body
        del carry[:start]
    if carry:
        yield [cls_id, *carry, sep_id]


def span_pairs(streams: Iterable[list[int]], max_length: int, cls_id: int, sep_id: int,
               rng: random.Random) -> Iterator[Example]:
    """Two disjoint random spans per document (coCondenser); documents too short for two are skipped."""
    body = max_length - 2
    for ids in streams:
        span = min(body, len(ids) // 2)
        if span < MIN_SPAN_TOKENS:
            continue
        first = rng.randint(0, len(ids) - 2 * span)
        second = rng.randint(first + span, len(ids) - span)
        pair = [[cls_id, *ids[first:first + span], sep_id], [cls_id, *ids[second:second + span], sep_id]]
        if rng.random() < 0.5:
            pair.reverse()
        yield pair


def buffer_shuffle(items: Iterable[T], buffer_size: int, rng: random.Random) -> Iterator[T]:
    """Shuffle a stream within a sliding buffer: near-random order at bounded memory."""
    buffer: list[T] = []
    for item in items:
        buffer.append(item)
        if len(buffer) >= buffer_size:
            index = rng.randrange(len(buffer))
            buffer[index], buffer[-1] = buffer[-1], buffer[index]
            yield buffer.pop()
    rng.shuffle(buffer)
    yield from buffer


def training_examples(corpus: str, tokenizer: PreTrainedTokenizerBase, max_length: int, cocondenser: bool,
                      seed: int, epoch: int, fmt: str = "auto", fields: Fields = Fields(),
                      shuffle_buffer: int = 10_000) -> Iterator[Example]:
    """The examples of one epoch, in an order fixed by (seed, epoch) so a restart can skip the done ones."""
    rng = random.Random(seed * 1_000_003 + epoch)
    streams = token_streams(iter_documents(corpus, fmt=fmt, fields=fields), tokenizer)
    if cocondenser:
        examples: Iterable[Example] = span_pairs(streams, max_length, tokenizer.cls_token_id,
                                                 tokenizer.sep_token_id, rng)
    else:
        examples = ([block] for block in pack_blocks(streams, max_length, tokenizer.cls_token_id,
                                                     tokenizer.sep_token_id))
    return buffer_shuffle(examples, shuffle_buffer, rng) if shuffle_buffer > 1 else iter(examples)


class WholeWordMaskCollator:
    """Pads sequences and masks whole words (a ``##`` piece joins the word before it), BERT 80/10/10."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, mlm_probability: float = 0.15, seed: int = 0) -> None:
        if not 0 < mlm_probability < 1:
            raise ValueError("mlm_probability must be between 0 and 1")
        self.mlm_probability = mlm_probability
        self.pad_id = tokenizer.pad_token_id
        self.mask_id = tokenizer.mask_token_id
        self.special_ids = set(tokenizer.all_special_ids)
        vocab = tokenizer.get_vocab()
        self.continuation_ids = {index for token, index in vocab.items() if token.startswith("##")}
        self.replacement_ids = sorted(set(vocab.values()) - self.special_ids)
        self.rng = random.Random(seed)

    def words(self, ids: list[int]) -> list[list[int]]:
        """Positions of each whole word; special tokens belong to none."""
        words: list[list[int]] = []
        previous_was_word = False
        for position, token in enumerate(ids):
            if token in self.special_ids:
                previous_was_word = False
                continue
            if previous_was_word and token in self.continuation_ids:
                words[-1].append(position)
            else:
                words.append([position])
            previous_was_word = True
        return words

    def mask(self, ids: list[int]) -> tuple[list[int], list[int]]:
        """Pick whole words up to 15% of the tokens (at least one word), then BERT's 80/10/10 per token."""
        words = self.words(ids)
        inputs, labels = list(ids), [IGNORE_INDEX] * len(ids)
        if not words:
            return inputs, labels
        budget = max(1, round(sum(len(word) for word in words) * self.mlm_probability))
        self.rng.shuffle(words)
        chosen: list[int] = []
        for word in words:
            if len(chosen) + len(word) <= budget:
                chosen.extend(word)
        if not chosen:  # every word is longer than the budget: still predict something
            chosen = list(words[0])
        for position in chosen:
            labels[position] = ids[position]
            roll = self.rng.random()
            if roll < 0.8:
                inputs[position] = self.mask_id
            elif roll < 0.9:
                inputs[position] = self.rng.choice(self.replacement_ids)
        return inputs, labels

    def __call__(self, sequences: list[list[int]]) -> dict[str, torch.Tensor]:
        width = max(len(sequence) for sequence in sequences)
        input_ids = torch.full((len(sequences), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(sequences), width), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, sequence in enumerate(sequences):
            masked, targets = self.mask(sequence)
            input_ids[row, :len(sequence)] = torch.tensor(masked)
            labels[row, :len(sequence)] = torch.tensor(targets)
            attention_mask[row, :len(sequence)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    def state_dict(self) -> dict:
        return {"rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.rng.setstate(state["rng"])
