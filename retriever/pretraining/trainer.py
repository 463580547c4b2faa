"""Condenser pre-training on the training stack: `pretrain(PretrainConfig) -> PretrainResult`.

`CondenserTrainer` is the same Hugging Face Trainer as fine-tuning uses (see
`retriever.training.stack`: checkpoints, resume, settings check, DDP, bf16, logging), with the
Condenser's loss; each logged step also records the head and backbone MLM losses (and the
coCondenser span loss).  Under torchrun each rank takes its slice of the global batch; the span
loss pairs siblings within a rank's slice, so with --cocondenser each rank needs 2+ whole passages.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from transformers import Trainer, TrainerCallback, set_seed

from retriever.choices import DEFAULT_START, check_temperature
from retriever.corpus import ReadStats
from retriever.encoder_settings import model_name
from retriever.errors import RetrieverError, full_disk_named
from retriever.folders import publish_model_folder
from retriever.model_loading import load_tokenizer
from retriever.model_names import FETCH_ADVICE, located_model, resolve_model_path
from retriever.pretraining.card import pretrain_card
from retriever.pretraining.condenser import CondenserForPretraining, load_condenser
from retriever.pretraining.guards import (check_corpus_path, check_examples, check_tokenizer,
                                          contrastive_start_warning, drops_lone_span_passage)
from retriever.pretraining.masking import CondenserExamples, TokenizedCorpus, WholeWordMasker, pad_batch
from retriever.st_router import refuse_router
from retriever.training import stack
from retriever.training.layout import check_step_split, planned_steps
from retriever.training.processes import (average_gradients, launched_processes, refusals_shared,
                                          summed_over_processes)
from retriever.training.run_guards import one_run_at_a_time
from retriever.wording import counted

LOSS_PARTS = ("head_mlm", "backbone_mlm", "span")
OBJECTIVES = ("condenser", "mlm")
BACKBONE_PREFIX = "lm.bert."  # the encoder a retriever keeps; everything else is a pre-training head
MODEL_CARD = "README.md"


@dataclass(kw_only=True)
class PretrainConfig(stack.StackConfig):
    """Everything `retriever pretrain` takes. None head settings come from a Condenser warm start, else defaults."""

    corpus: str
    model: str = DEFAULT_START
    n_head_layers: int | None = None
    skip_from: int | None = None
    cocondenser: bool = False
    objective: str = "condenser"
    freeze_backbone_steps: int = 0
    backbone_lr_scale: float = 1.0
    temperature: float = 1.0
    max_length: int = 128
    mlm_probability: float = 0.15
    keep_checkpoints: int = 2
    RUNTIME_ONLY: ClassVar[tuple[str, ...]] = (*stack.StackConfig.RUNTIME_ONLY, "keep_checkpoints")
    FINITE: ClassVar[tuple[str, ...]] = (*stack.StackConfig.FINITE, "backbone_lr_scale", "temperature",
                                         "mlm_probability")
    SWITCHES: ClassVar[tuple[str, ...]] = (*stack.StackConfig.SWITCHES, "cocondenser")  # "yes" trained coCondenser
    COUNTS: ClassVar[tuple[str, ...]] = (*stack.StackConfig.COUNTS, "n_head_layers", "max_length", "keep_checkpoints",
                                         "skip_from", "freeze_backbone_steps")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model = model_name(self.model)  # a Path died in check_model_name; the corpus and output paths are resolved

    def check(self) -> None:
        check_corpus_path(self.corpus)  # as super().check() begins with the output and model (check_paths_given)
        super().check()
        if self.backbone_lr_scale <= 0:
            raise RetrieverError("--backbone-lr-scale must be positive")
        if not 0 < self.mlm_probability < 1:
            raise RetrieverError("--mlm-probability must be between 0 and 1")

    def check_flag_combinations(self) -> None:
        """Settings that contradict each other or the launch, read from no file: `retriever pretrain` reports them as
        usage errors before anything is read, and `check` runs them, so the library raises the same line."""
        if self.objective not in OBJECTIVES or self.objective == "mlm" and (self.n_head_layers or
                                                                           self.skip_from is not None):
            raise RetrieverError(f"--objective is one of {', '.join(OBJECTIVES)}; mlm has no head (no --n-head-layers "
                                 "or --skip-from)")
        check_temperature(self.temperature)
        if self.cocondenser:
            check_span_batch(self.batch_size, launched_processes())
        if not self.cocondenser and self.temperature != PretrainConfig.temperature:  # else unused, without a word
            raise RetrieverError(f"--temperature {self.temperature:g} is the --cocondenser span loss's, which this "
                                 "run does not have; add --cocondenser or drop --temperature")
        check_step_split(self.batch_size, "--sequences-per-step")  # it was refused once the model and data loaded
        super().check_flag_combinations()


def check_span_batch(sequences: int, processes: int) -> None:
    """coCondenser's span softmax runs within a process's slice: each process needs whole passages (2 spans each)
    from at least 2 documents, or its only candidate is the sibling and the span loss is 0. A flag error, so the line
    names the counts that fit (the CLI refused it with exit 1, as if a run had failed)."""
    step, least = 2 * processes, 4 * processes
    if sequences >= least and sequences % step == 0:
        return
    lower, upper = (max(least, rounded * step) for rounded in (sequences // step, -(-sequences // step)))
    use = f"{lower}" if lower == upper else f"{lower} or {upper}"
    rule = (f"a multiple of {step} (whole 2-span passages in each of the {processes} processes) and at least "
            f"{least} (2+ passages a process for the span loss)" if processes > 1 else
            "even (2 spans a passage) and at least 4 (2+ passages for the span loss)")
    raise RetrieverError(f"--sequences-per-step {sequences} does not fit --cocondenser: it must be {rule}; use {use}")


@dataclass
class PretrainResult:
    output: Path
    steps: int
    resumed_from_step: int | None
    history: list[dict]
    tokens_per_second: float | None  # None: this run trained no step (resumed from the last step's checkpoint)
    seconds: float
    notes: list[str] = field(default_factory=list)
    already_finished: bool = False


class FrozenBackbone(TrainerCallback):
    """The first ``steps`` optimizer steps train only the heads: the backbone gets no gradient, so AdamW
    (which skips parameters without one) leaves it exactly as it was, weight decay included."""

    def __init__(self, model: CondenserForPretraining, steps: int) -> None:
        self.backbone, self.steps = model.lm.bert, steps

    def on_step_begin(self, args, state, control, **kwargs):
        self.backbone.requires_grad_(state.global_step >= self.steps)


def backbone_frozen(model: CondenserForPretraining) -> bool:
    """Whether this step trains only the heads (`FrozenBackbone` froze the backbone)."""
    return not any(parameter.requires_grad for parameter in model.lm.bert.parameters())


class CondenserTrainer(stack.StackTrainer):
    """The Condenser's loss, with its parts averaged into each log entry; the backbone may learn slower."""

    def __init__(self, config: PretrainConfig, **kwargs) -> None:
        # every parameter has a gradient at every step DDP runs (frozen steps run past it: training_step)
        super().__init__(config, unused_parameters=False, **kwargs)
        self.span_temperature = config.temperature if config.cocondenser else None
        self.backbone_lr_scale = config.backbone_lr_scale
        self.parts, self.batches, self.tokens = {}, 0, 0
        if config.freeze_backbone_steps:
            self.add_callback(FrozenBackbone(self.model, config.freeze_backbone_steps))

    def create_optimizer(self, model=None):
        """The library's AdamW and decay split, with backbone groups at ``backbone_lr_scale`` x the learning
        rate (the schedule scales every group alike). Frozen steps drop gradients, not parameters, from it."""
        if self.optimizer is None:
            model = model or self.model
            decay = set(self.get_decay_parameter_names(model))
            groups = [{"params": [p for n, p in model.named_parameters()
                                  if (n in decay) == decayed and n.startswith(BACKBONE_PREFIX) == backbone],
                       "weight_decay": self.args.weight_decay if decayed else 0.0,
                       "lr": self.args.learning_rate * (self.backbone_lr_scale if backbone else 1.0)}
                      for backbone in (True, False) for decayed in (True, False)]
            optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, model)
            self.optimizer = optimizer_cls([group for group in groups if group["params"]], **kwargs)
        return self.optimizer

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        """A frozen-backbone step under torchrun runs past DDP and averages the heads' gradients itself. DDP would
        wait for the frozen parameters' gradients; searching each step's graph for them instead
        (``find_unused_parameters``) cost a traversal at every step of the run and, once the backbone thawed, a
        warning from every process that the search found nothing."""
        module = self.accelerator.unwrap_model(model)
        if stack.world_size() < 2 or not backbone_frozen(module):
            return super().training_step(model, inputs, num_items_in_batch)
        loss = super().training_step(module, inputs, num_items_in_batch)
        average_gradients(module.parameters())
        return loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs, span_temperature=self.span_temperature)
        for name in LOSS_PARTS:
            value = getattr(outputs, f"{name}_loss")
            if value is not None:
                self.parts[name] = self.parts.get(name, 0.0) + value.detach()
        self.batches += 1
        self.tokens += int(inputs["attention_mask"].sum())
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self.batches:  # each part's mean over the launch, as the loss is (not rank 0's)
            totals = summed_over_processes(self.parts)
            logs.update({name: total / (self.batches * stack.world_size()) for name, total in totals.items()})
            self.parts, self.batches = {}, 0
        super().log(logs, start_time)


def pretrain(config: PretrainConfig, log: Callable[[str], None] = stack.log) -> PretrainResult:
    """Run (or continue) Condenser pre-training and write the backbone + head to ``config.output``; one run of an
    output at a time, never inside the start model's folder."""
    config.check()
    with refusals_shared(), one_run_at_a_time(config.output, stack.is_main_process()), \
            full_disk_named(Path(config.output)):
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

