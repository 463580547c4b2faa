"""Training sequences from raw corpus text, and BERT whole-word masking.

The corpus is tokenized once into one int32 array (4 bytes a token). Condenser cuts it into
full-length blocks (no padding wasted); coCondenser takes two spans of a document per example.
Examples are reordered per epoch, and every random choice of one (spans, masks) is seeded by
(seed, epoch, example): a resumed run, or another process count, sees the same batches.
"""
from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from retriever.corpus import Fields, ReadStats, iter_documents
from retriever.pretraining.condenser import IGNORE_INDEX
from retriever.texts import passage_text

Example = list[tuple[list[int], list[int]]]  # (input ids, labels) of one block, or of two sibling spans
MIN_SPAN_TOKENS = 4
TOKENIZE_CHUNK = 256
PIECE_CHARS = 1 << 16  # characters of a text the tokenizer sees in one piece
TOKENIZE_CHARS = 1 << 20  # characters per tokenizer call


class TokenizedCorpus:
    """Every document's token ids in one array; ``offsets[i]:offsets[i+1]`` is document i."""

    def __init__(self, documents: Iterable[Sequence[int]]) -> None:
        pieces = [np.asarray(ids, dtype=np.int32) for ids in documents]
        self.ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
        self.offsets = np.cumsum([0, *map(len, pieces)], dtype=np.int64)

    @classmethod
    def read(cls, corpus: str, tokenizer: PreTrainedTokenizerBase, fmt: str = "auto",
             fields: Fields = Fields(), stats: ReadStats | None = None) -> "TokenizedCorpus":
        """Tokenized a chunk of documents at a time, so the fast tokenizer batches. Each chunk becomes int32 at
        once (Python lists of ids cost 9-36 bytes a token, not 4), and a long text is tokenized in pieces of at
        most PIECE_CHARS characters: whole, a 20 MB line held the tokenizer's per-token records of all of it
        (3.9 GB). ``stats`` counts the documents and those with empty text."""
        documents = iter(iter_documents(corpus, fmt=fmt, fields=fields, stats=stats))
        chunks, lengths = [], []
        while texts := [passage_text(d.title, d.text) for d in itertools.islice(documents, TOKENIZE_CHUNK)]:
            ids, chunk_lengths = _tokenize_chunk(tokenizer, texts)
            chunks.append(ids)
            lengths.append(np.asarray(chunk_lengths, dtype=np.int64))
        corpus_ids = cls([])
        corpus_ids.ids = np.concatenate(chunks) if chunks else corpus_ids.ids
        if lengths:
            corpus_ids.offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))])
        return corpus_ids


def text_pieces(text: str, limit: int = PIECE_CHARS) -> list[str]:
    """``text`` cut into pieces of at most ``limit`` characters, each cut after a whitespace character where the
    window has one: BERT tokenizers split words at whitespace, so the pieces' tokens are the whole text's. Only a
    run of ``limit`` characters without whitespace is cut inside it (one word, [UNK] either way)."""
    pieces, start = [], 0
    while len(text) - start > limit:
        window = text[start:start + limit]
        cut = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
        end = start + (cut + 1 if cut > 0 else limit)
        pieces.append(text[start:end])
        start = end
    return [*pieces, text[start:]]  # a cut leaves more than `limit` characters, so this is never empty but for ""


def _tokenize_chunk(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> tuple[np.ndarray, list[int]]:
    """The chunk's token ids as one int32 array, and each text's token count; the tokenizer gets at most
    about TOKENIZE_CHARS characters a call, whatever the texts' lengths."""
    owners = [(index, piece) for index, text in enumerate(texts) for piece in text_pieces(text)]
    arrays, lengths, batch, size = [], [0] * len(texts), [], 0
    for position, (index, piece) in enumerate(owners):
        batch.append((index, piece))
        size += len(piece)
        if size >= TOKENIZE_CHARS or position == len(owners) - 1:
            encoded = tokenizer([piece for _, piece in batch], add_special_tokens=False, truncation=False,
                                verbose=False, return_attention_mask=False, return_token_type_ids=False)["input_ids"]
            for (owner, _), ids in zip(batch, encoded):
                arrays.append(np.asarray(ids, dtype=np.int32))
                lengths[owner] += len(ids)
            batch, size = [], 0
    return (np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)), lengths


class WholeWordMasker:
    """Masks whole words (a ``##`` piece joins the word before it), BERT 80/10/10."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, mlm_probability: float = 0.15) -> None:
        if not 0 < mlm_probability < 1:
            raise ValueError("mlm_probability must be between 0 and 1")
        self.mlm_probability = mlm_probability
        self.mask_id, self.cls_id, self.sep_id = tokenizer.mask_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id
        self.special_ids = set(tokenizer.all_special_ids)
        vocab = tokenizer.get_vocab()
        self.continuation_ids = {index for token, index in vocab.items() if token.startswith("##")}
        self.replacement_ids = sorted(set(vocab.values()) - self.special_ids)

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

    def mask(self, ids: list[int], rng: random.Random) -> tuple[list[int], list[int]]:
        """Pick whole words up to 15% of the tokens (at least one word), then BERT's 80/10/10 per token."""
        words = self.words(ids)
        inputs, labels = list(ids), [IGNORE_INDEX] * len(ids)
        if not words:
            return inputs, labels
        budget = max(1, round(sum(len(word) for word in words) * self.mlm_probability))
        rng.shuffle(words)
        chosen: list[int] = []
        for word in words:
            if len(chosen) + len(word) <= budget:
                chosen.extend(word)
        if not chosen:  # every word is longer than the budget: still predict something
            chosen = list(words[0])
        for position in chosen:
            labels[position] = ids[position]
            roll = rng.random()
            if roll < 0.8:
                inputs[position] = self.mask_id
            elif roll < 0.9:
                inputs[position] = rng.choice(self.replacement_ids)
        return inputs, labels


def span_pair(ids: list[int], max_length: int, rng: random.Random) -> tuple[list[int], list[int]] | None:
    """Two disjoint random spans of one document (coCondenser), or None if it is too short for two."""
    span = min(max_length - 2, len(ids) // 2)
    if span < MIN_SPAN_TOKENS:
        return None
    first = rng.randint(0, len(ids) - 2 * span)
    second = rng.randint(first + span, len(ids) - span)
    pair = [ids[first:first + span], ids[second:second + span]]
    if rng.random() < 0.5:
        pair.reverse()
    return pair[0], pair[1]


class CondenserExamples(torch.utils.data.Dataset):
    """Blocks of ``max_length`` tokens (Condenser) or span pairs (coCondenser) in a per-epoch order."""

    def __init__(self, corpus: TokenizedCorpus, masker: WholeWordMasker, max_length: int, cocondenser: bool,
                 seed: int) -> None:
        self.corpus, self.masker, self.max_length, self.cocondenser, self.seed = (corpus, masker, max_length,
                                                                                   cocondenser, seed)
        if cocondenser:
            lengths = np.diff(corpus.offsets)
            self.items = np.flatnonzero(lengths // 2 >= MIN_SPAN_TOKENS)
        else:
            self.items = np.arange(-(-len(corpus.ids) // (max_length - 2)))
        self.epoch, self.order = -1, self.items
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.order = np.random.default_rng([self.seed, epoch]).permutation(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Example:
        item = int(self.order[index])
        rng = random.Random(f"{self.seed}:{self.epoch}:{item}")
        if self.cocondenser:
            offsets = self.corpus.offsets
            bodies = span_pair(self.corpus.ids[offsets[item]:offsets[item + 1]].tolist(), self.max_length, rng)
        else:
            bodies = [self.corpus.ids[item * (self.max_length - 2):(item + 1) * (self.max_length - 2)].tolist()]
        return [self.masker.mask([self.masker.cls_id, *body, self.masker.sep_id], rng) for body in bodies]


def pad_batch(examples: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad every sequence of the examples (siblings stay adjacent) into one batch."""
    sequences = [sequence for example in examples for sequence in example]
    width = max(len(ids) for ids, _ in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    labels = torch.full((len(sequences), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, (ids, targets) in enumerate(sequences):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        labels[row, :len(ids)] = torch.tensor(targets)
        attention_mask[row, :len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
