"""Packing, coCondenser spans, per-epoch order and whole-word masking."""
from __future__ import annotations

import random

import pytest

from retriever.model_loading import load_tokenizer
from retriever.pretraining.condenser import IGNORE_INDEX
from retriever.pretraining.masking import (CondenserExamples, TokenizedCorpus, WholeWordMasker, pad_batch,
                                           span_pair)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# "xylophone", "zebra", "quokka" are not in the tiny vocabulary, so they split into x ##y ##l ...
TEXT = ("the xylophone and the zebra met a quokka near the river of ice where the old king had "
        "a castle of stone and a queen with honey bread and hot tea")


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(str(tiny_model_dir))


def test_words_join_continuation_pieces(tokenizer):
    collator = WholeWordMasker(tokenizer)
    ids = tokenizer("the zebra cat")["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens == ["[CLS]", "the", "z", "##e", "##b", "##r", "##a", "cat", "[SEP]"]
    assert collator.words(ids) == [[1], [2, 3, 4, 5, 6], [7]]


def test_masking_covers_whole_words_only(tokenizer):
    ids = tokenizer(TEXT)["input_ids"]
    multi_piece_masked = 0
    for seed in range(200):
        collator = WholeWordMasker(tokenizer, 0.15)
        inputs, labels = collator.mask(ids, random.Random(seed))
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
    collator, rng = WholeWordMasker(tokenizer, 0.15), random.Random(1)
    masked = replaced = kept = 0
    for _ in range(400):
        inputs, labels = collator.mask(ids, rng)
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


def test_pad_batch_pads_and_keeps_labels_of_masked_positions_only(tokenizer):
    masker, rng = WholeWordMasker(tokenizer), random.Random(0)
    short, long = tokenizer("the cat")["input_ids"], tokenizer(TEXT)["input_ids"]
    batch = pad_batch([[masker.mask(short, rng)], [masker.mask(long, rng)]], tokenizer.pad_token_id)
    assert batch["input_ids"].shape == (2, len(long))
    assert batch["attention_mask"][0].sum() == len(short)
    assert (batch["input_ids"][0, len(short):] == tokenizer.pad_token_id).all()
    assert (batch["labels"][0, len(short):] == IGNORE_INDEX).all()
    assert ((batch["labels"] != IGNORE_INDEX).sum(dim=1) >= 1).all()


def test_blocks_cut_the_concatenated_documents_into_full_length_pieces(tokenizer):
    corpus = TokenizedCorpus([list(range(10, 17)), list(range(20, 23)), list(range(30, 41))])
    examples = CondenserExamples(corpus, WholeWordMasker(tokenizer, 0.15), max_length=6, cocondenser=False, seed=0)
    assert len(examples) == 6  # 21 tokens in blocks of 4, the tail kept short
    by_block = {}
    for index in range(len(examples)):
        [(inputs, labels)] = examples[index]
        original = [label if label != IGNORE_INDEX else token for token, label in zip(inputs, labels)]
        assert original[0] == tokenizer.cls_token_id and original[-1] == tokenizer.sep_token_id
        by_block[int(examples.order[index])] = original[1:-1]
    assert [token for block in sorted(by_block) for token in by_block[block]] == list(corpus.ids)


def test_span_pairs_are_two_disjoint_spans_of_one_document():
    rng = random.Random(0)
    assert span_pair([7, 8, 9], max_length=12, rng=rng) is None  # too short for two spans
    for source in (list(range(100, 140)), list(range(200, 212))):
        first, second = span_pair(source, max_length=12, rng=rng)
        assert len(first) == len(second) == min(10, len(source) // 2)
        assert set(first) <= set(source) and set(second) <= set(source) and not set(first) & set(second)


def test_epoch_order_and_masks_are_fixed_by_seed_epoch_and_example(tokenizer, tiny_beir):
    corpus = TokenizedCorpus.read(str(tiny_beir), tokenizer)

    def examples(epoch, cocondenser=False):
        dataset = CondenserExamples(corpus, WholeWordMasker(tokenizer), 16, cocondenser, seed=5)
        dataset.set_epoch(epoch)
        return [dataset[i] for i in range(len(dataset))]
    assert examples(0) == examples(0) and examples(0) != examples(1)
    pairs = examples(0, cocondenser=True)
    assert len(pairs) == 12 and all(len(pair) == 2 for pair in pairs)
