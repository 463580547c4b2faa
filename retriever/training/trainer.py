"""Dual-encoder fine-tuning on the training stack: `train(TrainConfig) -> TrainResult`.

`DualEncoderTrainer` is the Hugging Face Trainer (see `stack`) with the in-batch contrastive loss:
under torchrun every rank embeds its slice of the global batch and the loss runs over all ranks'
queries and passages (`--no-cross-device-negatives` keeps each rank to its own); GradCache replaces
one training step for batches larger than memory; dev evaluation each epoch keeps the best
weights.  The output folder becomes a model folder that `retriever encode/build/search` load
directly; its ``checkpoints/`` subfolder holds the resumable state and, once training is done,
only ``finished.json``.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from retriever.corpus import Fields
from retriever.errors import RetrieverError
from retriever.models import resolve_model_path
from retriever.randomness import seed_everything
from retriever.training import stack
from retriever.training.data import Collator, EpochGroups, TrainExample, load_beir_examples, load_jsonl_examples
from retriever.training.dev import DevSet, evaluate_dev, load_dev_set
from retriever.training.gradcache import grad_cache_backward
from retriever.training.loss import contrastive_loss, default_temperature, global_batch, judged_positive_mask
from retriever.training.model import DualEncoder

SELECTION_METRIC = "ndcg@10"
# Settings that may differ when a run is resumed: where and how fast it runs, not what it learns.
RUNTIME_ONLY = ("device", "dtype", "save_steps", "progress", "dev_batch_size", "report_to")


@dataclass
class TrainConfig:
    """Everything `retriever train` takes; None encoder settings fall back to the init model's retriever.json."""

    output: str
    dataset: str | None = None
    split: str = "train"
    train_jsonl: str | None = None
    corpus: str | None = None
    corpus_format: str = "auto"
    corpus_fields: Fields = Fields()
    negatives: str | None = None
    model: str = "minilm"
    pooling: str | None = None
    normalize: bool | None = None
    towers: str | None = None
    query_max_length: int | None = None
    passage_max_length: int | None = None
    query_prefix: str | None = None
    passage_prefix: str | None = None
    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 32
    train_group_size: int = 1
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    temperature: float | None = None
    max_grad_norm: float | None = 1.0
    seed: int = 42
    grad_cache_chunk_size: int | None = None
    dev_split: str | None = None
    dev_dataset: str | None = None
    dev_max_docs: int | None = None
    dev_batch_size: int | None = None
    device: str = "auto"
    dtype: str = "auto"
    save_steps: int | None = 500
    progress: bool = True
    cross_device_negatives: bool = True
    report_to: str = "none"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def learning_settings(self) -> dict:
        return {k: v for k, v in self.to_dict().items() if k not in RUNTIME_ONLY}


@dataclass
class TrainResult:
    output: Path
    steps: int
    examples: int
    seconds: float
    best_step: int | None = None
    dev_scores: dict[str, float] | None = None
    history: list[dict] = field(default_factory=list)
    resumed_from_step: int | None = None
    already_finished: bool = False
    losses: list[float] = field(default_factory=list)
    """The training loss of every step (over the global batch under torchrun)."""

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["output"] = str(self.output)
        return data

    @classmethod
    def from_json(cls, data: dict) -> "TrainResult":
        return cls(**{**data, "output": Path(data["output"])})


def _check(config: TrainConfig) -> None:
    if (config.dataset is None) == (config.train_jsonl is None):
        raise RetrieverError("give training data as either --dataset (a BEIR folder) or --train-jsonl")
    if config.corpus and not config.train_jsonl:
        raise RetrieverError("--corpus resolves document ids in --train-jsonl; a --dataset brings its own corpus")
    if config.negatives and not config.dataset:
        raise RetrieverError("--negatives goes with --dataset; put a JSONL example's negatives in its own line")
    if config.dev_split and not (config.dev_dataset or config.dataset):
        raise RetrieverError("--dev-split needs a BEIR folder: pass --dev-dataset")
    positive = {"epochs": config.epochs, "batch_size": config.batch_size, "train_group_size": config.train_group_size,
                "max_steps": config.max_steps or 1, "grad_cache_chunk_size": config.grad_cache_chunk_size or 1,
                "save_steps": config.save_steps or 1, "dev_max_docs": config.dev_max_docs or 1}
    for name, value in positive.items():
        if value < 1:
            raise RetrieverError(f"--{name.replace('_', '-')} must be at least 1")
    if config.learning_rate <= 0 or (config.temperature is not None and config.temperature <= 0):
        raise RetrieverError("--learning-rate and --temperature must be positive")
    if not 0 <= config.warmup_ratio < 1:
        raise RetrieverError("--warmup-ratio must be in [0, 1)")


def _load_examples(config: TrainConfig) -> list[TrainExample]:
    if config.dataset:
        return load_beir_examples(config.dataset, config.split, config.negatives)
    return load_jsonl_examples(config.train_jsonl, config.corpus, config.corpus_format, config.corpus_fields)


def _load_dev(config: TrainConfig) -> DevSet | None:
    if not config.dev_split:
        return None
    dataset = config.dev_dataset or config.dataset
    if config.dataset and Path(dataset).resolve() == Path(config.dataset).resolve():
        if config.dev_split == config.split:
            stack.log(f"warning: the dev split is the training split {config.split!r}: dev scores measure fit, "
                 "not generalisation")
    if config.dev_split == "test":
        stack.log("warning: selecting checkpoints on a test split leaks it into training; hold out a dev split instead")
    dev = load_dev_set(dataset, config.dev_split, config.dev_max_docs, config.seed)
    stack.log(f"dev set {dev.name}: {len(dev.query_ids)} queries, {len(dev.documents)} documents")
    return dev


def _normalised(config: TrainConfig) -> TrainConfig:
    """Store paths resolved and fields as plain dicts, so a rerun from another directory compares equal."""
    values = config.to_dict()
    for name in ("output", "dataset", "train_jsonl", "corpus", "negatives", "dev_dataset"):
        if values[name] is not None:
            values[name] = str(Path(values[name]).expanduser().resolve())
    if Path(config.model).expanduser().exists():
        values["model"] = str(Path(config.model).expanduser().resolve())
    values["corpus_fields"] = Fields(**values["corpus_fields"])
    return TrainConfig(**values)


class DualEncoderTrainer(stack.StackTrainer):
    """The contrastive loss over the global batch, GradCache steps and per-epoch dev evaluation."""

    def __init__(self, *args, temperature: float, cross_device: bool, grad_cache_chunk_size: int | None,
                 dev_batch_size: int | None, precision: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.temperature, self.grad_cache_chunk_size = temperature, grad_cache_chunk_size
        self.cross_device = cross_device and stack.world_size() > 1
        self.dev_batch_size, self.precision = dev_batch_size, precision

    def batch_loss(self, queries: torch.Tensor, passages: torch.Tensor, batch: dict) -> torch.Tensor:
        """Cross-entropy of each query's positive among the (global) batch's passages.

        With negatives across devices every rank computes the whole global loss, but its gradient
        reaches only its own embeddings; DDP averages the ranks' gradients, so the loss is scaled by
        the world size to make their sum the full gradient (as Tevatron does).
        """
        parts = (queries, passages, batch["targets"], batch["judged_keys"], batch["passage_keys"])
        if self.cross_device:
            parts = global_batch(*parts)
        queries, passages, targets, judged, keys = parts
        loss = contrastive_loss(queries, passages, targets, self.temperature, judged_positive_mask(judged, keys, targets))
        return loss * stack.world_size() if self.cross_device else loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        queries, passages = model(query=inputs["query"], passage=inputs["passage"])
        loss = self.batch_loss(queries, passages, inputs)
        return (loss, (queries, passages)) if return_outputs else loss

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        scale = stack.world_size() if self.cross_device else 1
        if not self.grad_cache_chunk_size:
            return super().training_step(model, inputs, num_items_in_batch) / scale
        model.train()
        inputs = self._prepare_inputs(inputs)
        encoder = self.accelerator.unwrap_model(model)  # past DDP's hooks: gradients are averaged below
        scaler = self.accelerator.scaler
        loss = grad_cache_backward(encoder, inputs, self.batch_loss, self.grad_cache_chunk_size,
                                   scaler.scale if scaler is not None else (lambda value: value))
        if stack.world_size() > 1:
            for parameter in encoder.parameters():
                if parameter.grad is not None:
                    dist.all_reduce(parameter.grad)
                    parameter.grad /= stack.world_size()
        return loss / scale

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """nDCG@10 and Recall@100 on the dev set (rank 0 computes, every rank gets them)."""
        scores = None
        if self.is_world_process_zero():
            scores = evaluate_dev(self.accelerator.unwrap_model(self.model), self.eval_dataset, self.args.device,
                                  self.precision, self.dev_batch_size)
        metrics = {f"{metric_key_prefix}_{key}": value for key, value in stack.broadcast(scores).items()}
        self.log(metrics)
        step = self.state.global_step
        label = "before training" if step == 0 else f"epoch {_epoch(self.state.epoch)}, step {step}"
        stack.log(f"dev {self.eval_dataset.name} {label}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
                  if scores else "")
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics=metrics)
        return metrics


def _epoch(value: float | None) -> float | int:
    value = value or 0
    return int(value) if float(value).is_integer() else round(value, 3)


def train(config: TrainConfig) -> TrainResult:
    """Fine-tune a dual encoder and write it to ``config.output``; rerun the same call after a crash to resume."""
    started = time.time()
    _check(config)
    config = _normalised(config)
    output, settings = Path(config.output), config.learning_settings()
    finished = stack.finished_record(output, settings)
    if finished is not None:
        result = dataclasses.replace(TrainResult.from_json(finished["result"]), already_finished=True)
        stack.log(f"{output}: training already finished ({result.steps} steps); nothing to do")
        return result
    resume = stack.resume_point(output, settings)
    if (output / "config.json").is_file() and not (output / stack.CHECKPOINTS).is_dir():
        raise RetrieverError(f"{output} already holds a model; choose another --output")
    seed_everything(config.seed)
    model = DualEncoder.from_pretrained(
        config.model, pooling=config.pooling, normalize=config.normalize, towers=config.towers,
        query_max_length=config.query_max_length, passage_max_length=config.passage_max_length,
        query_prefix=config.query_prefix, passage_prefix=config.passage_prefix)
    examples, dev = _load_examples(config), _load_dev(config)
    trainer = _trainer(config, model, examples, dev, settings, resume is None)
    temperature = trainer.temperature
    if resume is not None:
        stack.log(f"resuming from {resume} (step {int(resume.name.split('-')[1])})")
    stack.log(f"training {config.model} ({model.settings.towers} towers, {model.settings.pooling} pooling, "
              f"normalize={model.settings.normalize}, tau={temperature}) on {len(examples)} queries: "
              f"{trainer.args.max_steps if trainer.args.max_steps > 0 else config.epochs} "
              f"{'steps' if trainer.args.max_steps > 0 else 'epochs'} of {config.batch_size} x "
              f"{config.train_group_size} passages over {stack.world_size()} process(es), {trainer.args.device} "
              f"{trainer.precision}")
    trainer.fit(resume)
    return _export(trainer, config, settings, len(examples), resume, started)


def _trainer(config: TrainConfig, model: DualEncoder, examples: list[TrainExample], dev: DevSet | None,
             settings: dict, fresh: bool) -> DualEncoderTrainer:
    with_negatives = sum(1 for e in examples if e.negatives)
    if config.train_group_size > 1 and not with_negatives:
        stack.log(f"warning: --train-group-size {config.train_group_size} but no hard negatives were given; "
                  "training with in-batch negatives only")
    elif with_negatives and config.train_group_size == 1:
        stack.log("warning: hard negatives are given but --train-group-size is 1, so they are not used")
    arguments, precision = stack.training_arguments(
        Path(config.output), batch_size=config.batch_size, epochs=config.epochs, max_steps=config.max_steps,
        learning_rate=config.learning_rate, warmup_ratio=config.warmup_ratio, weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm, seed=config.seed, save_steps=config.save_steps, keep_checkpoints=2,
        device=config.device, dtype=config.dtype, evaluate=dev is not None, evaluate_first=fresh,
        metric=SELECTION_METRIC)
    return DualEncoderTrainer(
        model=model, args=arguments, train_dataset=EpochGroups(examples, config.seed, config.train_group_size),
        data_collator=Collator(model.tokenizer, model.settings), run_settings=settings, progress=config.progress,
        callbacks=stack.tensorboard_callback(Path(config.output), config.report_to),
        temperature=config.temperature or default_temperature(model.settings.normalize),
        cross_device=config.cross_device_negatives, grad_cache_chunk_size=config.grad_cache_chunk_size, eval_dataset=dev,
        dev_batch_size=config.dev_batch_size, precision=precision)


def _dev_history(trainer: DualEncoderTrainer) -> list[dict]:
    history, last_loss = [], None
    for entry in trainer.state.log_history:
        if "loss" in entry:
            last_loss = entry["loss"]
        if f"eval_{SELECTION_METRIC}" in entry:
            scores = {key[len("eval_"):]: value for key, value in entry.items() if key.startswith("eval_")}
            record = {"step": entry["step"], "epoch": _epoch(entry.get("epoch")), **scores}
            if entry["step"] > 0 and last_loss is not None:
                record["train_loss"] = round(last_loss, 5)
            history.append(record)
    return history


def _export(trainer: DualEncoderTrainer, config: TrainConfig, settings: dict, examples: int, resume: Path | None,
            started: float) -> TrainResult:
    """Rank 0 writes the best (or last) weights as the model folder and records the finished run."""
    state, model = trainer.state, trainer.accelerator.unwrap_model(trainer.model)
    best_step = state.best_global_step if config.dev_split else None
    history = _dev_history(trainer) if config.dev_split else []
    best = next((h for h in history if h["step"] == best_step and h["step"] > 0), None)
    dev_scores = {k: v for k, v in best.items() if "@" in k} if best else None
    seconds = time.time() - started
    result = TrainResult(Path(config.output), state.global_step, examples, seconds, best_step, dev_scores, history,
                         int(resume.name.split("-")[1]) if resume else None,
                         losses=[entry["loss"] for entry in state.log_history if "loss" in entry])
    if trainer.is_world_process_zero():
        if best_step is not None and best_step != state.global_step:
            stack.load_weights(model, Path(trainer.args.output_dir) / f"checkpoint-{best_step}")
            stack.log(f"keeping the weights of step {best_step} (best dev {SELECTION_METRIC} {state.best_metric:.4f})")
        model.save(config.output, _training_record(config, trainer, result))
        stack.finish(Path(config.output), settings, result.to_json())
        stack.log(f"wrote {config.output} ({state.global_step} steps, {seconds:.0f}s)")
    if stack.world_size() > 1:
        dist.barrier()
    return result


def _training_record(config: TrainConfig, trainer: DualEncoderTrainer, result: TrainResult) -> dict:
    """How the model was trained, for retriever.json."""
    return {
        "init_model": config.model, "init_model_path": resolve_model_path(config.model),
        "data": {"dataset": config.dataset, "split": config.split} if config.dataset else
                {"train_jsonl": config.train_jsonl, "corpus": config.corpus},
        "negatives": config.negatives, "examples": result.examples, "steps": result.steps,
        "epochs_completed": int(trainer.state.epoch or 0), "dtype": trainer.precision,
        "seconds": round(result.seconds, 1), "processes": stack.world_size(), "batch_size": config.batch_size,
        "train_group_size": config.train_group_size, "learning_rate": config.learning_rate,
        "warmup_ratio": config.warmup_ratio, "weight_decay": config.weight_decay, "temperature": trainer.temperature,
        "max_grad_norm": config.max_grad_norm, "seed": config.seed, "cross_device_negatives": config.cross_device_negatives,
        "grad_cache_chunk_size": config.grad_cache_chunk_size,
        "dev": {"dataset": config.dev_dataset or config.dataset, "split": config.dev_split,
                "max_docs": config.dev_max_docs, "best_step": result.best_step, "scores": result.dev_scores,
                "history": result.history} if config.dev_split else None,
    }
