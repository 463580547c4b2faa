"""Packing, coCondenser spans, shuffling and whole-word masking."""
from __future__ import annotations

import json
import random

import pytest

from retriever.models import load_tokenizer
from retriever.pretraining.condenser import IGNORE_INDEX
from retriever.pretraining.masking import (WholeWordMaskCollator, buffer_shuffle, pack_blocks, span_pairs,
                                           training_examples)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# "xylophone", "zebra", "quokka" are not in the tiny vocabulary, so they split into x ##y ##l ...
TEXT = ("the xylophone and the zebra met a quokka near the river of ice where the old king had "
        "a castle of stone and a queen with honey bread and hot tea")


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(str(tiny_model_dir))


def test_words_join_continuation_pieces(tokenizer):
    collator = WholeWordMaskCollator(tokenizer)
    ids = tokenizer("the zebra cat")["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens == ["[CLS]", "the", "z", "##e", "##b", "##r", "##a", "cat", "[SEP]"]
    assert collator.words(ids) == [[1], [2, 3, 4, 5, 6], [7]]


def test_masking_covers_whole_words_only(tokenizer):
    ids = tokenizer(TEXT)["input_ids"]
    multi_piece_masked = 0
    for seed in range(200):
        collator = WholeWordMaskCollator(tokenizer, 0.15, seed=seed)
        inputs, labels = collator.mask(ids)
        for word in collator.words(ids):
            chosen = [labels[position] != IGNORE_INDEX for position in word]
            assert all(chosen) or not any(chosen), (seed, word, labels)
            multi_piece_masked += len(word) > 1 and all(chosen)
        assert labels[0] == labels[-1] == IGNORE_INDEX and inputs[0] == ids[0] and inputs[-1] == ids[-1]
        assert 1 <= sum(label != IGNORE_INDEX for label in labels) <= round(0.15 * (len(ids) - 2))
        assert all(label == ids[i] for i, label in enumerate(labels) if label != IGNORE_INDEX)
    assert multi_piece_masked > 20


def test_bert_80_10_10_replacement(tokenizer):
    ids = tokenizer(TEXT)["input_ids"]
    collator = WholeWordMaskCollator(tokenizer, 0.15, seed=1)
    masked = replaced = kept = 0
    for _ in range(400):
        inputs, labels = collator.mask(ids)
        for position, label in enumerate(labels):
            if label == IGNORE_INDEX:
                assert inputs[position] == ids[position]
            elif inputs[position] == tokenizer.mask_token_id:
                masked += 1
            elif inputs[position] == ids[position]:
                kept += 1
            else:
                replaced += 1
                assert inputs[position] not in tokenizer.all_special_ids
    total = masked + replaced + kept
    assert abs(masked / total - 0.8) < 0.04 and abs(kept / total - 0.1) < 0.04


def test_collator_pads_and_labels_only_masked_positions(tokenizer):
    short, long = tokenizer("the cat")["input_ids"], tokenizer(TEXT)["input_ids"]
    batch = WholeWordMaskCollator(tokenizer, seed=0)([short, long])
    assert batch["input_ids"].shape == (2, len(long))
    assert batch["attention_mask"][0].sum() == len(short)
    assert (batch["input_ids"][0, len(short):] == tokenizer.pad_token_id).all()
    assert (batch["labels"][0, len(short):] == IGNORE_INDEX).all()
    assert ((batch["labels"] != IGNORE_INDEX).sum(dim=1) >= 1).all()


def test_pack_blocks_concatenates_and_cuts_full_blocks():
    streams = [list(range(10, 17)), list(range(20, 23)), list(range(30, 41))]
    blocks = list(pack_blocks(streams, max_length=6, cls_id=1, sep_id=2))
    assert all(block[0] == 1 and block[-1] == 2 for block in blocks)
    assert [len(block) for block in blocks] == [6, 6, 6, 6, 6, 3]
    assert [token for block in blocks for token in block[1:-1]] == [t for stream in streams for t in stream]


def test_span_pairs_are_two_disjoint_spans_of_one_document():
    documents = [list(range(100, 140)), [7, 8, 9], list(range(200, 212))]
    pairs = list(span_pairs(documents, max_length=12, cls_id=1, sep_id=2, rng=random.Random(0)))
    assert len(pairs) == 2  # the 3-token document is too short for two spans
    for pair, source in zip(pairs, [documents[0], documents[2]]):
        first, second = (span[1:-1] for span in pair)
        assert len(first) == len(second) == min(10, len(source) // 2)
        assert set(first) <= set(source) and set(second) <= set(source) and not set(first) & set(second)


def test_buffer_shuffle_is_a_seeded_permutation():
    items = list(range(100))
    shuffled = list(buffer_shuffle(items, 10, random.Random(3)))
    assert sorted(shuffled) == items and shuffled != items
    assert shuffled == list(buffer_shuffle(items, 10, random.Random(3)))


def test_epoch_order_is_fixed_by_seed_and_epoch(tokenizer, tiny_beir):
    def examples(epoch, cocondenser=False):
        return list(training_examples(str(tiny_beir), tokenizer, 16, cocondenser, seed=5, epoch=epoch,
                                      shuffle_buffer=4))
    assert examples(0) == examples(0) and examples(0) != examples(1)
    assert sorted(map(json.dumps, examples(0))) == sorted(map(json.dumps, examples(1)))
    pairs = examples(0, cocondenser=True)
    assert len(pairs) == 12 and all(len(pair) == 2 for pair in pairs)
