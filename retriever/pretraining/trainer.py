"""Condenser pre-training on the training stack: `pretrain(PretrainConfig) -> PretrainResult`.

The run reads and checks the corpus and start model, trains with `CondenserTrainer`, and publishes the backbone,
head and model card. Under torchrun each rank takes its slice of the global batch; the span loss pairs siblings
within a rank's slice, so with --cocondenser each rank needs 2+ whole passages.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from transformers import set_seed

from retriever.corpus import ReadStats
from retriever.errors import full_disk_named, refused_writes_named
from retriever.folders import publish_model_folder
from retriever.model_loading import load_tokenizer
from retriever.model_names import FETCH_ADVICE, located_model, resolve_model_path
from retriever.pretraining.card import pretrain_card
from retriever.pretraining.condenser import load_condenser
from retriever.pretraining.condenser_trainer import LOSS_PARTS, CondenserTrainer
from retriever.pretraining.config import PretrainConfig, PretrainResult
from retriever.pretraining.guards import (check_examples, check_tokenizer, contrastive_start_warning,
                                          drops_lone_span_passage)
from retriever.pretraining.masking import CondenserExamples, TokenizedCorpus, WholeWordMasker, pad_batch
from retriever.st_router import refuse_router
from retriever.training import stack
from retriever.training.layout import planned_steps
from retriever.training.processes import refusals_shared
from retriever.training.run_guards import one_run_at_a_time
from retriever.wording import counted

MODEL_CARD = "README.md"


def pretrain(config: PretrainConfig, log: Callable[[str], None] = stack.log) -> PretrainResult:
    """Run (or continue) Condenser pre-training and write the backbone + head to ``config.output``; one run of an
    output at a time, never inside the start model's folder."""
    config.check()
    with refusals_shared(), one_run_at_a_time(config.output, stack.is_main_process()), \
            full_disk_named(Path(config.output)), \
            refused_writes_named(Path(config.output)):
        return _pretrain(config, log)


def _pretrain(config: PretrainConfig, log: Callable[[str], None]) -> PretrainResult:
    started = time.perf_counter()
    config, prior = config.prepare(PretrainResult)
    output, resume = Path(config.output), prior.resume
    if prior.finished is not None:
        return prior.finished
    located_model(config.model, FETCH_ADVICE)  # not advising minilm, as loading would: pre-training it made it worse
    refuse_router(resolve_model_path(config.model), "pretrain continues one transformer; pass one tower's folder, "
                  "e.g. --model {document}")
    if warning := contrastive_start_warning(config.model):
        log(warning)
    set_seed(config.seed)
    model, notes = load_condenser(config.model, 0 if config.objective == "mlm" else config.n_head_layers,
                                  config.skip_from)
    tokenizer = load_tokenizer(config.model)
    check_tokenizer(tokenizer, model.lm, config.model, config.max_length)
    notes += [f"resuming from {resume} (step {stack.checkpoint_step(resume)})"] if resume else []
    for note in notes:
        log(note)
    examples = read_examples(config, tokenizer, log)
    per_step = config.batch_size // 2 if config.cocondenser else config.batch_size
    lone = drops_lone_span_passage(examples, per_step, log)
    max_steps = run_steps(config, len(examples) - lone, per_step, log)
    one, unit = ("document with two spans", "documents with two spans") if config.cocondenser else ("block", "blocks")
    sequences = min(per_step, len(examples)) * (config.batch_size // per_step)  # what a step holds
    arguments, precision = config.arguments(per_step, max_steps, config.keep_checkpoints, (len(examples), one, unit))
    arguments.dataloader_drop_last |= lone
    trainer = CondenserTrainer(config, arguments=arguments, precision=precision, model=model, train_dataset=examples,
                               data_collator=lambda batch: pad_batch(batch, tokenizer.pad_token_id))
    layers = model.lm.config.num_hidden_layers  # an MLM-only run has no head, and nothing is fed from skip_from
    head = (f"{counted(model.n_head_layers, 'head layer')} fed from layer {model.skip_from} of {layers}"
            if model.n_head_layers else f"no Condenser head, {counted(layers, 'layer')}")
    log(f"pre-training {'co' if config.cocondenser else ''}{'MLM' if config.objective == 'mlm' else 'Condenser'} "
        f"from {config.model}: {head}, {counted(len(examples), one, unit)}, {counted(max_steps, 'step')} of "
        f"{counted(sequences, 'sequence')} x {config.max_length} tokens over "
        f"{counted(stack.world_size(), 'process', 'processes')}, {arguments.device} {precision}")
    trainer.fit(prior)
    history = [{"step": entry["step"], "loss": entry["loss"], **{name: entry[name] for name in LOSS_PARTS
                                                                 if name in entry}, "lr": entry["learning_rate"]}
               for entry in trainer.state.log_history if "loss" in entry and "learning_rate" in entry]
    train_seconds = next((e["train_runtime"] for e in trainer.state.log_history if "train_runtime" in e), 0)
    result = PretrainResult(output, trainer.state.global_step, stack.checkpoint_step(resume), history,
                            trainer.tokens * stack.world_size() / train_seconds if trainer.tokens and train_seconds
                            else None, time.perf_counter() - started, notes)

    def write_model() -> None:
        model = trainer.accelerator.unwrap_model(trainer.model)
        card = pretrain_card(config.learning_settings(), result.steps, model.n_head_layers, model.skip_from)

        def fill(staging: Path) -> None:
            model.save_pretrained(staging, tokenizer)
            (staging / MODEL_CARD).write_text(card, encoding="utf-8")  # a train folder's card has the same name
        publish_model_folder(output, fill)
        if history:
            log(f"wrote {output}: {counted(result.steps, 'step')}, loss {history[0]['loss']:.3f} -> "
                f"{history[-1]['loss']:.3f}, " + (f"{result.tokens_per_second:.0f} tokens/s" if result.tokens_per_second
                                                    else "no step left to train") + f", {result.seconds:.0f}s")
    trainer.finish(write_model, {**dataclasses.asdict(result), "output": str(output)})
    return result


def read_examples(config: PretrainConfig, tokenizer, log: Callable[[str], None]) -> CondenserExamples:
    """The corpus as checked training sequences, saying how many documents were read and how many had empty
    text, as `encode` does: they add nothing, and pre-training passed over them without a word."""
    stats = ReadStats()
    corpus = TokenizedCorpus.read(config.corpus, tokenizer, config.corpus_format, config.corpus_fields, stats)
    log(f"{config.corpus}: {stats.summary()}")
    examples = CondenserExamples(corpus, WholeWordMasker(tokenizer, config.mlm_probability), config.max_length,
                                 config.cocondenser, config.seed)
    check_examples(examples, tokenizer.unk_token_id, config.corpus, log)
    return examples


def run_steps(config: PretrainConfig, examples: int, per_step: int, log: Callable[[str], None]) -> int:
    """The run's optimizer steps, as `train` counts them (`planned_steps`). Freezing them all writes the start
    model's backbone back bit for bit (a head-only stage, continued later with --model OUTPUT, or a typo), so it
    is said; it used to pass silently."""
    max_steps = planned_steps(config.max_steps, config.epochs, examples, per_step)
    if config.freeze_backbone_steps >= max_steps:
        log(f"warning: --freeze-backbone-steps {config.freeze_backbone_steps} covers all {max_steps} steps of the "
            "run: only the heads train and the backbone (what fine-tuning keeps) comes out unchanged; continue with "
            "--model OUTPUT to train it, or freeze fewer steps (the README's recipe freezes a quarter)")
    return max_steps
