"""Whether a training step scores each query against more than one passage: a softmax over a single candidate is
1, so its loss is 0 and nothing is learnt. Such runs are refused, a lone last step is dropped, and hard negatives
that will not be used are said."""
from __future__ import annotations

from typing import TYPE_CHECKING

from retriever.errors import RetrieverError
from retriever.training import stack
from retriever.training.examples import TrainExample
from retriever.training.processes import launched_processes

if TYPE_CHECKING:
    from transformers import TrainingArguments

    from retriever.training.train_config import TrainConfig


def _softmax_processes(config: TrainConfig) -> int:
    """Over how many processes a step's queries are spread for each one's softmax (1: the whole global batch)."""
    return launched_processes() if not config.cross_device_negatives else 1


def _single_candidate(config: TrainConfig, queries: int, examples: list[TrainExample] | None, negatives_of=max) -> bool:
    """Whether a step of ``queries`` scores each query against one passage: a softmax over one candidate is 1, so
    its loss is 0. ``negatives_of`` picks which example's hard negatives count (``min``: the poorest one's)."""
    negatives = config.train_group_size - 1
    if examples:
        negatives = min(negatives, negatives_of(len(example.negatives) for example in examples))
    return -(-queries // _softmax_processes(config)) * (1 + negatives) < 2


def check_candidates(config: TrainConfig, examples: list[TrainExample] | None = None) -> None:
    """Refuse a run whose every step scores each query against a single passage: nothing would be learnt.
    Before loading (``examples`` None) only the flags are known."""
    queries = min(config.batch_size, len(examples)) if examples else config.batch_size
    if _single_candidate(config, queries, examples):
        where = " per process (--no-cross-device-negatives)" if _softmax_processes(config) > 1 else ""
        raise RetrieverError(f"a training step holds one query and one passage{where}, its only candidate, so the "
                             "loss is 0 and nothing is learnt; raise --queries-per-step, add training examples, or "
                             "give hard negatives with --train-group-size 2 or more")


def drop_a_lone_last_step(config: TrainConfig, examples: list[TrainExample],
                          arguments: TrainingArguments) -> None:
    """An epoch's last, short step of a query alone with its positive would train at loss 0 (an optimizer step on
    nothing), so it is dropped; the order is shuffled per epoch, so a different query sits out each time."""
    leftover = len(examples) % config.batch_size
    if leftover and not arguments.dataloader_drop_last and _single_candidate(config, leftover, examples, min):
        arguments.dataloader_drop_last = True
        stack.log(f"the last step of each epoch would hold one query ({len(examples)} queries in steps of "
                  f"{config.batch_size}) and no other candidate passage, so its loss would be 0; it is left out")


def warn_about_negatives(config: TrainConfig, examples: list[TrainExample]) -> None:
    """Say when hard negatives are asked for but none is there, or given but not used (--train-group-size 1)."""
    with_negatives = any(e.negatives for e in examples)
    if config.train_group_size > 1 and not with_negatives:
        stack.log(f"warning: --train-group-size {config.train_group_size} but no example has a usable hard "
                  "negative (none given, or none left: see above); training with in-batch negatives only")
    elif with_negatives and config.train_group_size == 1:
        stack.log("warning: hard negatives are given but --train-group-size is 1, so they are not used")
