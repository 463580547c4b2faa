"""Condenser pre-training on the training stack: `pretrain(PretrainConfig) -> PretrainResult`.

`CondenserTrainer` is the same Hugging Face Trainer as fine-tuning uses (see
`retriever.training.stack`: checkpoints, resume, settings check, DDP, bf16, logging), with the
Condenser's loss; each logged step also records the head and backbone MLM losses (and the
coCondenser span loss).  Under torchrun each rank takes its slice of the global batch; the span
loss pairs siblings within a rank's slice.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from retriever.corpus import Fields
from retriever.errors import RetrieverError
from retriever.models import load_tokenizer
from retriever.pretraining.condenser import CondenserForPretraining, load_condenser
from retriever.pretraining.masking import CondenserExamples, TokenizedCorpus, WholeWordMasker, pad_batch
from retriever.randomness import seed_everything
from retriever.training import stack

# Settings a resumed run may change: where and how it runs, not what each step learns from.
RESUMABLE_CHANGES = ("device", "dtype", "save_steps", "keep_checkpoints", "progress", "report_to")
LOSS_PARTS = ("head_mlm", "backbone_mlm", "span")


@dataclass
class PretrainConfig:
    """Everything `retriever pretrain` takes. None head settings come from a Condenser warm start, else defaults."""

    corpus: str
    output: str
    model: str = "minilm"
    corpus_format: str = "auto"
    corpus_fields: Fields = Fields()
    n_head_layers: int | None = None
    skip_from: int | None = None
    cocondenser: bool = False
    temperature: float = 1.0
    max_length: int = 128
    mlm_probability: float = 0.15
    batch_size: int = 32
    epochs: int | None = None
    max_steps: int | None = None
    learning_rate: float = 1e-4
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float | None = 1.0
    save_steps: int | None = 500
    keep_checkpoints: int = 2
    seed: int = 42
    device: str = "auto"
    dtype: str = "auto"
    progress: bool = True
    report_to: str = "none"


@dataclass
class PretrainResult:
    output: Path
    steps: int
    resumed_from_step: int | None
    history: list[dict]
    tokens_per_second: float
    seconds: float
    notes: list[str] = field(default_factory=list)
    already_finished: bool = False


class CondenserTrainer(stack.StackTrainer):
    """The Condenser's loss, with its parts averaged into each log entry."""

    def __init__(self, *args, span_temperature: float | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.span_temperature = span_temperature
        self.parts: dict[str, float] = {}
        self.batches = 0
        self.tokens = 0

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
        if "loss" in logs and self.batches:
            logs.update({name: float(total) / self.batches for name, total in self.parts.items()})
            self.parts, self.batches = {}, 0
        super().log(logs, start_time)


def pretrain(config: PretrainConfig, log: Callable[[str], None] = stack.log) -> PretrainResult:
    """Run (or continue) Condenser pre-training and write the backbone + head to ``config.output``."""
    started = time.perf_counter()
    _validate(config)
    output, settings = Path(config.output), _run_settings(config)
    finished = stack.finished_record(output, settings)
    if finished is not None:
        log(f"{output}: pre-training already finished ({finished['result']['steps']} steps); nothing to do")
        return dataclasses.replace(_result_from_json(finished["result"]), already_finished=True)
    resume = stack.resume_point(output, settings)
    _check_output(output)
    seed_everything(config.seed)
    model, notes = load_condenser(config.model, config.n_head_layers, config.skip_from)
    tokenizer = load_tokenizer(config.model)
    _check_tokenizer(tokenizer, model, config)
    if resume is not None:
        notes.append(f"resuming from {resume} (step {int(resume.name.split('-')[1])})")
    for note in notes:
        log(note)
    examples = CondenserExamples(TokenizedCorpus.read(config.corpus, tokenizer, config.corpus_format,
                                                      config.corpus_fields),
                                 WholeWordMasker(tokenizer, config.mlm_probability), config.max_length,
                                 config.cocondenser, config.seed)
    trainer = _trainer(config, model, tokenizer, examples, settings)
    log(f"pre-training {'coCondenser' if config.cocondenser else 'Condenser'} from {config.model}: "
        f"{model.n_head_layers} head layers fed from layer {model.skip_from} of {model.lm.config.num_hidden_layers}, "
        f"{len(examples)} {'documents with two spans' if config.cocondenser else 'blocks'}, "
        f"{trainer.args.max_steps} steps of {config.batch_size} sequences x {config.max_length} tokens over "
        f"{stack.world_size()} process(es), {trainer.args.device} {trainer.precision}")
    trainer.fit(resume)
    return _export(trainer, config, settings, tokenizer, resume, notes, started, log)


def _trainer(config: PretrainConfig, model: CondenserForPretraining, tokenizer: PreTrainedTokenizerBase,
             examples: CondenserExamples, settings: dict) -> CondenserTrainer:
    if len(examples) == 0:
        raise RetrieverError(f"{config.corpus}: no training sequences (the documents are empty"
                             + (" or too short for two spans" if config.cocondenser else "") + ")")
    per_step = config.batch_size // 2 if config.cocondenser else config.batch_size
    steps_per_epoch = math.ceil(len(examples) / per_step)
    max_steps = config.max_steps
    if config.epochs is not None or max_steps is None:
        max_steps = min(max_steps or math.inf, (config.epochs or 1) * steps_per_epoch)
    arguments, precision = stack.training_arguments(
        Path(config.output), batch_size=per_step, epochs=1, max_steps=max_steps, learning_rate=config.learning_rate,
        warmup_ratio=config.warmup_ratio, weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
        seed=config.seed, save_steps=config.save_steps, keep_checkpoints=config.keep_checkpoints,
        device=config.device, dtype=config.dtype)
    trainer = CondenserTrainer(
        model=model, args=arguments, train_dataset=examples,
        data_collator=lambda batch: pad_batch(batch, tokenizer.pad_token_id), run_settings=settings,
        progress=config.progress, callbacks=stack.tensorboard_callback(Path(config.output), config.report_to),
        span_temperature=config.temperature if config.cocondenser else None)
    trainer.precision = precision
    return trainer


def _export(trainer: CondenserTrainer, config: PretrainConfig, settings: dict, tokenizer: PreTrainedTokenizerBase,
            resume: Path | None, notes: list[str], started: float, log: Callable[[str], None]) -> PretrainResult:
    history = [{"step": entry["step"], "loss": entry["loss"], **{name: entry[name] for name in LOSS_PARTS
                                                                 if name in entry}, "lr": entry["learning_rate"]}
               for entry in trainer.state.log_history if "loss" in entry and "learning_rate" in entry]
    seconds = time.perf_counter() - started
    train_seconds = trainer.state.log_history[-1].get("train_runtime", seconds) if trainer.state.log_history else 0
    speed = trainer.tokens * stack.world_size() / train_seconds if train_seconds else 0.0
    result = PretrainResult(output=Path(config.output), steps=trainer.state.global_step,
                            resumed_from_step=int(resume.name.split("-")[1]) if resume else None, history=history,
                            tokens_per_second=speed, seconds=seconds, notes=notes)
    if trainer.is_world_process_zero():
        trainer.accelerator.unwrap_model(trainer.model).save_pretrained(config.output, tokenizer)
        stack.finish(Path(config.output), settings, {**dataclasses.asdict(result), "output": config.output})
        if history:
            log(f"wrote {config.output}: {result.steps} steps, loss {history[0]['loss']:.3f} -> "
                f"{history[-1]['loss']:.3f}, {speed:.0f} tokens/s, {seconds:.0f}s")
    if stack.world_size() > 1:
        dist.barrier()
    return result


def _result_from_json(data: dict) -> PretrainResult:
    return PretrainResult(**{**data, "output": Path(data["output"])})


def _validate(config: PretrainConfig) -> None:
    if config.max_length < 8:
        raise RetrieverError("--max-length must be at least 8")
    if config.cocondenser and config.batch_size < 4:
        raise RetrieverError("--cocondenser needs --batch-size of at least 4 (2 spans from each of 2+ documents)")
    if config.temperature <= 0:
        raise RetrieverError("--temperature must be positive")
    if not 0 < config.mlm_probability < 1:
        raise RetrieverError("--mlm-probability must be between 0 and 1")
    if config.max_steps is not None and config.max_steps < 1 or config.epochs is not None and config.epochs < 1:
        raise RetrieverError("--max-steps and --epochs must be at least 1")


def _check_output(output: Path) -> None:
    """Refuse to write into a folder that is not a pre-training run, e.g. the warm-start model itself."""
    if output.exists() and not output.is_dir():
        raise RetrieverError(f"{output}: exists and is not a folder")
    if output.is_dir() and any(output.iterdir()) and not (output / stack.CHECKPOINTS).is_dir():
        raise RetrieverError(f"{output}: folder exists and holds no pre-training checkpoints; "
                             "choose a new --output (the run writes a model folder there)")


def _check_tokenizer(tokenizer: PreTrainedTokenizerBase, model: CondenserForPretraining,
                     config: PretrainConfig) -> None:
    if None in (tokenizer.mask_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id):
        raise RetrieverError(f"{config.model}: the tokenizer lacks [MASK]/[CLS]/[SEP]/[PAD]; "
                             "a BERT tokenizer is needed")
    limit = model.lm.config.max_position_embeddings
    if config.max_length > limit:
        raise RetrieverError(f"--max-length {config.max_length} exceeds the model's {limit} positions")


def _run_settings(config: PretrainConfig) -> dict:
    """What the run learns from, paths resolved, so a rerun from another directory compares equal."""
    settings = {key: value for key, value in dataclasses.asdict(config).items() if key not in RESUMABLE_CHANGES}
    for name in ("corpus", "output"):
        settings[name] = str(Path(settings[name]).expanduser().resolve())
    return settings
