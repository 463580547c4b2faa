"""What `retriever pretrain` refuses before it trains, each case one line instead of a traceback or a run that
trains nothing: an empty corpus path, a tokenizer the model cannot embed, and a corpus without anything to learn
from (what `train` refuses as well is in `retriever.training.run_guards`); and the warning before pre-training a
sentence encoder."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from transformers import PreTrainedTokenizerBase

from retriever.errors import CORPUS_PATH, RetrieverError, given_path
from retriever.model_loading import check_vocabulary, model_files
from retriever.pretraining.masking import MIN_SPAN_TOKENS, CondenserExamples
from retriever.training.processes import launched_processes
from retriever.wording import agree, counted

COUNT_BLOCK = 1 << 24  # tokens counted at a time, so the check holds no corpus-sized temporary
UNK_WARNING_SHARE = 0.1
CONTRASTIVE_MARKERS = ("modules.json", "config_sentence_transformers.json", "retriever.json")


def check_corpus_path(corpus: object) -> None:
    """The corpus named by a non-empty path: "" (an unset variable in a library call) is Path(""), the working folder,
    which was pre-trained on whatever it held, and None died of pathlib's TypeError naming no argument."""
    given_path(corpus, "corpus", CORPUS_PATH)


def check_tokenizer(tokenizer: PreTrainedTokenizerBase, model, name: str, max_length: int) -> None:
    """A BERT tokenizer whose every id the model can embed (a larger vocabulary died of an ``IndexError`` in the
    embedding at the first batch), and a max length within the model's positions."""
    if None in (tokenizer.mask_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id):
        raise RetrieverError(f"{name}: the tokenizer lacks [MASK]/[CLS]/[SEP]/[PAD]; a BERT tokenizer is needed")
    check_vocabulary(tokenizer, model, name)
    if max_length > (limit := model.config.max_position_embeddings):
        raise RetrieverError(f"--max-length {max_length} is more than the {limit} positions {name} can take; pass at "
                             f"most {limit}")


def check_examples(examples: CondenserExamples, unk_id: int | None, corpus: str, log: Callable[[str], None]) -> None:
    """Refuse a corpus that gives no sequence, nothing to mask (every token [UNK] or special: the loss was 0.000
    at every step and exit 0) or, with --cocondenser, fewer than 2 span documents per process (the span softmax
    held only the sibling: span loss 0 at every step); warn when many tokens are [UNK], and say how many documents
    --cocondenser leaves out as too short (they went untrained without a word)."""
    cocondenser = examples.cocondenser
    if len(examples) == 0:
        raise RetrieverError(f"{corpus}: no training sequences (the documents are empty"
                             + (" or too short for two spans" if cocondenser else "") + ")")
    ids, special = examples.corpus.ids, np.fromiter(examples.masker.special_ids, dtype=np.int64)
    specials = unknown = 0
    for start in range(0, len(ids), COUNT_BLOCK):
        block = ids[start:start + COUNT_BLOCK]
        specials += int(np.isin(block, special).sum())
        unknown += int((block == unk_id).sum()) if unk_id is not None else 0
    if specials == len(ids):
        raise RetrieverError(f"{corpus}: every token of the corpus is [UNK] or another special token of the model's "
                             "tokenizer, so there is nothing to mask and learn; use a model whose vocabulary covers "
                             "the corpus's language")
    if unknown > UNK_WARNING_SHARE * len(ids):
        log(f"warning: {unknown / len(ids):.0%} of the corpus's tokens are [UNK] (never masked or predicted); "
            "the model's vocabulary does not cover much of the corpus")
    if cocondenser and (short := len(examples.corpus.offsets) - 1 - len(examples)):
        log(f"{corpus}: {short} of {counted(len(examples.corpus.offsets) - 1, 'document')} "
            f"{agree(short, 'is', 'are')} too short for two spans of {MIN_SPAN_TOKENS} tokens and "
            f"{agree(short, 'is', 'are')} left out of --cocondenser pre-training (empty ones included)")
    if cocondenser and len(examples) < 2 * (processes := launched_processes()):
        raise RetrieverError(f"{corpus}: --cocondenser needs at least {2 * processes} documents long enough for two "
                             f"spans (2 per process), and there are {len(examples)}: the span loss would be 0")


def drops_lone_span_passage(examples: CondenserExamples, per_step: int, log: Callable[[str], None]) -> bool:
    """Whether an epoch's last step, in one process with --cocondenser, would hold one passage: its two spans have
    only each other to pick from, so that step's span loss is 0 (it trained MLM alone, logged beside the others).
    It is left out, as `train` leaves out a lone query, and said; under torchrun a short last step is left out
    anyway (`layout`)."""
    if not examples.cocondenser or launched_processes() > 1 or len(examples) % per_step != 1 or len(examples) < 2:
        return False
    log(f"the last step of each epoch would hold one passage ({len(examples)} in steps of {per_step}), whose two "
        "spans have only each other to pick from, so its span loss would be 0; it is left out (a different passage "
        "each epoch)")
    return True


def contrastive_start_warning(name: str) -> str | None:
    """A warning when ``name`` is already a contrastively trained sentence encoder: there our benchmark measured
    Condenser pre-training lowering fine-tuned quality (README, "When pre-training helps"). A hub id's markers are
    read from its snapshot of JSON files (they were looked for in a local folder only)."""
    try:
        path = model_files(name)
    except RetrieverError:  # a hub id nowhere: loading says so
        return None
    found = [marker for marker in CONTRASTIVE_MARKERS if path is not None and (path / marker).is_file()]
    if not found:
        return None
    return (f"warning: {name} is already a contrastive sentence encoder ({found[0]}); on minilm, Condenser "
            "pre-training measurably lowered fine-tuned nDCG@10 (README.md, \"When pre-training helps\"). Fine-tune "
            "it directly, or pre-train a BERT with an MLM head instead")
