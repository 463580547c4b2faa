"""The fine-tuning loop: `train(TrainConfig) -> TrainResult`.

AdamW with linear warmup then linear decay; bf16 autocast on CPUs that have it, fp16 with a
GradScaler (or bf16) on CUDA; gradient clipping; optional GradCache for batches larger than
memory; dev evaluation each epoch keeping the best weights; checkpoints that let a killed run be
resumed by rerunning the same call.  The output folder becomes a model folder that
`retriever encode/build/search` load directly; its ``checkpoints/`` subfolder holds the
resumable state and, once training is done, only ``finished.json``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from retriever.corpus import Fields
from retriever.device import resolve_device, resolve_dtype
from retriever.errors import RetrieverError
from retriever.models import resolve_model_path
from retriever.randomness import restore_rng_states, seed_everything
from retriever.shards import atomic_write_bytes
from retriever.training import checkpoints as ckpt
from retriever.training.data import Collator, TrainExample, batched, epoch_groups, load_beir_examples, \
    load_jsonl_examples
from retriever.training.dev import DevSet, evaluate_dev, load_dev_set
from retriever.training.gradcache import grad_cache_backward, plain_backward
from retriever.training.loss import default_temperature
from retriever.training.model import DualEncoder

SELECTION_METRIC = "ndcg@10"
# Settings that may differ when a run is resumed: where and how fast it runs, not what it learns.
RUNTIME_ONLY = ("device", "dtype", "save_steps", "progress", "dev_batch_size")


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

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["output"] = str(self.output)
        return data


def _log(message: str) -> None:
    print(message, file=sys.stderr)


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
            _log(f"warning: the dev split is the training split {config.split!r}: dev scores measure fit, "
                 "not generalisation")
    if config.dev_split == "test":
        _log("warning: selecting checkpoints on a test split leaks it into training; hold out a dev split instead")
    dev = load_dev_set(dataset, config.dev_split, config.dev_max_docs, config.seed)
    _log(f"dev set {dev.name}: {len(dev.query_ids)} queries, {len(dev.documents)} documents")
    return dev


def _optimizer(model: DualEncoder, config: TrainConfig) -> torch.optim.AdamW:
    """No weight decay on biases and LayerNorm weights, as in BERT."""
    decay, no_decay = [], []
    for tower in model.towers():
        for name, parameter in tower.named_parameters():
            (no_decay if parameter.ndim < 2 or "LayerNorm" in name else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.learning_rate)


def _linear_schedule(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _finished_result(folder: Path, config: TrainConfig) -> TrainResult | None:
    finished = folder / ckpt.FINISHED_FILE
    if not finished.is_file():
        return None
    record = json.loads(finished.read_text(encoding="utf-8"))
    _refuse_other_settings(record["config"], config, folder.parent)
    result = TrainResult(**{**record["result"], "output": Path(record["result"]["output"])})
    result.already_finished = True
    _log(f"{folder.parent}: training already finished ({result.steps} steps); nothing to do")
    return result


def _refuse_other_settings(recorded: dict, config: TrainConfig, output: Path) -> None:
    current = config.learning_settings()
    recorded = {k: v for k, v in recorded.items() if k not in RUNTIME_ONLY}
    differing = [f"{k} {recorded.get(k)!r} -> {current.get(k)!r}"
                 for k in sorted(set(recorded) | set(current)) if recorded.get(k) != current.get(k)]
    if differing:
        raise RetrieverError(f"{output} holds a training run with other settings ({'; '.join(differing)}); "
                             "rerun with the same settings to resume, or choose another --output")


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


@dataclass
class _Run:
    """What one training process holds: the model and its optimisation state, and where to checkpoint them."""

    config: TrainConfig
    model: DualEncoder
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler | None
    device: torch.device
    dtype: str
    temperature: float
    folder: Path

    def restore(self, checkpoint: Path) -> ckpt.LoopState:
        state = ckpt.load_checkpoint(checkpoint)
        _refuse_other_settings(state["config"], self.config, Path(self.config.output))
        ckpt.load_tower_weights(self.model, state["weights"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        restore_rng_states(state["rng"])
        return ckpt.LoopState(**state["loop"])

    def checkpoint(self, loop: ckpt.LoopState) -> None:
        ckpt.save_checkpoint(self.folder, self.model, self.optimizer, self.scheduler, self.scaler, loop,
                             self.config.to_dict())

    def step(self, batch) -> float:
        """Forward, backward (plain or GradCache), clip, update; return the batch loss."""
        batch.query_inputs = {k: v.to(self.device) for k, v in batch.query_inputs.items()}
        batch.passage_inputs = {k: v.to(self.device) for k, v in batch.passage_inputs.items()}
        if self.config.grad_cache_chunk_size:
            loss = grad_cache_backward(self.model, batch, self.temperature, self.config.grad_cache_chunk_size,
                                       self.device, self.dtype, self.scaler)
        else:
            loss = plain_backward(self.model, batch, self.temperature, self.device, self.dtype, self.scaler)
        if not math.isfinite(loss) and self.scaler is None:
            raise RetrieverError(f"the loss became {loss}; lower --learning-rate, or use --dtype fp32")
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.config.max_grad_norm:
            torch.nn.utils.clip_grad_norm_([p for group in self.optimizer.param_groups for p in group["params"]],
                                           self.config.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss


def train(config: TrainConfig) -> TrainResult:
    """Fine-tune a dual encoder and write it to ``config.output``; rerun after a crash to resume."""
    started = time.time()
    _check(config)
    config = _normalised(config)
    output = Path(config.output)
    folder = output / ckpt.CHECKPOINTS
    finished = _finished_result(folder, config)
    if finished is not None:
        return finished
    if (output / "config.json").is_file() and not folder.is_dir():
        raise RetrieverError(f"{output} already holds a model; choose another --output")
    seed_everything(config.seed)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    model = DualEncoder.from_pretrained(
        config.model, pooling=config.pooling, normalize=config.normalize, towers=config.towers,
        query_max_length=config.query_max_length, passage_max_length=config.passage_max_length,
        query_prefix=config.query_prefix, passage_prefix=config.passage_prefix).to(device)
    examples = _load_examples(config)
    with_negatives = sum(1 for e in examples if e.negatives)
    if config.train_group_size > 1 and not with_negatives:
        _log(f"warning: --train-group-size {config.train_group_size} but no hard negatives were given; "
             "training with in-batch negatives only")
    elif with_negatives and config.train_group_size == 1:
        _log("warning: hard negatives are given but --train-group-size is 1, so they are not used")
    dev = _load_dev(config)
    total_steps = config.max_steps or config.epochs * math.ceil(len(examples) / config.batch_size)
    optimizer = _optimizer(model, config)
    run = _Run(config, model, optimizer, _linear_schedule(optimizer, round(config.warmup_ratio * total_steps),
                                                          total_steps),
               torch.amp.GradScaler(device.type) if dtype == "fp16" else None, device, dtype,
               config.temperature or default_temperature(model.settings.normalize), folder)
    latest = ckpt.latest_checkpoint(folder)
    loop = run.restore(latest) if latest is not None else ckpt.LoopState()
    resumed_from = loop.global_step if latest is not None else None
    if latest is not None:
        _log(f"resuming from {latest} (step {loop.global_step}, epoch {loop.epoch + 1})")
    _log(f"training {config.model} ({model.settings.towers} towers, {model.settings.pooling} pooling, "
         f"normalize={model.settings.normalize}, tau={run.temperature}) on {len(examples)} queries: "
         f"{total_steps} steps of {config.batch_size} x {config.train_group_size} passages, {device} {dtype}")
    if dev is not None and latest is None:
        _record_dev(run, dev, loop, epoch=0, baseline=True)
    _train_loop(run, examples, dev, loop, total_steps)
    return _export(run, loop, len(examples), resumed_from, started)


def _train_loop(run: _Run, examples: list[TrainExample], dev: DevSet | None, loop: ckpt.LoopState,
                total_steps: int) -> None:
    """Steps until total_steps, skipping the batches a resumed run already did; dev + checkpoint per epoch."""
    config = run.config
    collator = Collator(run.model.tokenizer, run.model.settings)
    run.model.train()
    bar = tqdm(total=total_steps, initial=loop.global_step, desc="train", unit="step", file=sys.stderr,
               disable=not config.progress, dynamic_ncols=True)
    seen, clock, running_loss = 0, time.time(), None
    try:
        while loop.global_step < total_steps:
            batches = batched(epoch_groups(examples, loop.epoch, config.seed, config.train_group_size),
                              config.batch_size)
            for index in range(loop.batches_done, len(batches)):
                batch = collator(batches[index])
                loss = run.step(batch)
                running_loss = loss if running_loss is None else 0.9 * running_loss + 0.1 * loss
                loop.batches_done, loop.global_step = index + 1, loop.global_step + 1
                seen += batch.size
                bar.set_postfix(loss=f"{running_loss:.4f}", ex_per_s=f"{seen / (time.time() - clock):.1f}",
                                epoch=loop.epoch + 1)
                bar.update(1)
                epoch_done, all_done = index + 1 == len(batches), loop.global_step >= total_steps
                if epoch_done or all_done:
                    if dev is not None:
                        _record_dev(run, dev, loop, loop.epoch + 1, train_loss=running_loss)
                    if epoch_done:
                        loop.epoch, loop.batches_done = loop.epoch + 1, 0
                    run.checkpoint(loop)
                    break
                if config.save_steps and loop.global_step % config.save_steps == 0:
                    run.checkpoint(loop)
    finally:
        bar.close()


def _record_dev(run: _Run, dev: DevSet, loop: ckpt.LoopState, epoch: int, baseline: bool = False,
                train_loss: float | None = None) -> None:
    """Score the current weights; keep them as the best (on disk) when nDCG@10 improves on every earlier epoch."""
    scores = evaluate_dev(run.model, dev, run.device, run.dtype, run.config.dev_batch_size)
    entry = {"step": loop.global_step, "epoch": epoch, **scores}
    if train_loss is not None:
        entry["train_loss"] = round(train_loss, 5)
    loop.history.append(entry)
    label = "before training" if baseline else f"epoch {epoch}, step {loop.global_step}"
    _log(f"dev {dev.name} {label}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
    if not baseline and (loop.best_score is None or scores[SELECTION_METRIC] > loop.best_score):
        loop.best_score, loop.best_step = scores[SELECTION_METRIC], loop.global_step
        ckpt.save_best_weights(run.folder, run.model, loop.global_step)


def _export(run: _Run, loop: ckpt.LoopState, examples: int, resumed_from: int | None,
            started: float) -> TrainResult:
    """Write the best (or last) weights as the model folder, then drop the heavy checkpoints."""
    config, model, folder = run.config, run.model, run.folder
    if loop.best_step is not None and loop.best_step != loop.global_step:
        ckpt.load_tower_weights(model, ckpt.load_best_weights(folder, loop.best_step))
        _log(f"keeping the weights of step {loop.best_step} (best dev {SELECTION_METRIC} {loop.best_score:.4f})")
    best = next((h for h in loop.history if h["step"] == loop.best_step and h["epoch"] > 0), None)
    dev_scores = {k: v for k, v in best.items() if "@" in k} if best else None
    seconds = time.time() - started
    training = {
        "init_model": config.model, "init_model_path": resolve_model_path(config.model),
        "data": {"dataset": config.dataset, "split": config.split} if config.dataset else
                {"train_jsonl": config.train_jsonl, "corpus": config.corpus},
        "negatives": config.negatives, "examples": examples, "steps": loop.global_step,
        "epochs_completed": loop.epoch, "dtype": run.dtype, "seconds": round(seconds, 1),
        "batch_size": config.batch_size, "train_group_size": config.train_group_size,
        "learning_rate": config.learning_rate, "warmup_ratio": config.warmup_ratio,
        "weight_decay": config.weight_decay, "temperature": run.temperature, "max_grad_norm": config.max_grad_norm,
        "seed": config.seed, "grad_cache_chunk_size": config.grad_cache_chunk_size,
        "dev": {"dataset": config.dev_dataset or config.dataset, "split": config.dev_split,
                "max_docs": config.dev_max_docs, "best_step": loop.best_step, "scores": dev_scores,
                "history": loop.history} if config.dev_split else None,
    }
    model.save(config.output, training)
    result = TrainResult(Path(config.output), loop.global_step, examples, seconds, loop.best_step, dev_scores,
                         loop.history, resumed_from)
    record = {"config": config.to_dict(), "result": result.to_json()}
    atomic_write_bytes(folder / ckpt.FINISHED_FILE, (json.dumps(record, indent=2) + "\n").encode())
    ckpt.prune(folder, keep_step=None, keep_best=None)
    _log(f"wrote {config.output} ({loop.global_step} steps, {seconds:.0f}s)")
    return result
