"""The pre-training loop: `pretrain(PretrainConfig) -> PretrainResult`.

AdamW with linear warmup then decay, bf16 autocast on CPUs that have it (fp16 with loss scaling or
bf16 on CUDA), gradient clipping, and checkpoints in ``<output>/checkpoints/step-N/`` written under a
temporary name and renamed, so a killed run continues from the last one when the same call is
repeated. A checkpoint is itself a Condenser folder, usable as a warm start.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase, get_linear_schedule_with_warmup

from retriever.corpus import Fields
from retriever.device import autocast, resolve_device, resolve_dtype
from retriever.errors import RetrieverError
from retriever.models import load_tokenizer
from retriever.pretraining.condenser import CondenserForPretraining, load_condenser
from retriever.pretraining.masking import Example, WholeWordMaskCollator, training_examples
from retriever.randomness import restore_rng_states, rng_states, seed_everything

CHECKPOINTS = "checkpoints"
TRAINER_STATE = "trainer_state.pt"
RUN_SETTINGS = "run.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")
# Settings a resumed run may change: where and how long it runs, not what each step learns from.
RESUMABLE_CHANGES = ("device", "dtype", "save_steps", "keep_checkpoints", "progress", "epochs", "max_steps")


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
    shuffle_buffer: int = 10_000
    progress: bool = True


@dataclass
class PretrainResult:
    output: Path
    steps: int
    resumed_from_step: int | None
    history: list[dict]
    tokens_per_second: float
    seconds: float
    notes: list[str] = field(default_factory=list)


@dataclass
class LoopState:
    """Where the run is: the epoch, how many of its examples are done, and every step's losses."""

    epoch: int = 0
    examples_done: int = 0
    step: int = 0
    history: list[dict] = field(default_factory=list)


def _log(message: str) -> None:
    tqdm.write(message, file=sys.stderr)


def pretrain(config: PretrainConfig, log: Callable[[str], None] = _log) -> PretrainResult:
    """Run (or continue) Condenser pre-training and write the backbone + head to ``config.output``."""
    _validate(config)
    output = Path(config.output)
    _check_output(output)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    latest = latest_checkpoint(output)
    state = None
    if latest is not None:
        _check_same_run(latest, config)
        state = torch.load(latest / TRAINER_STATE, map_location="cpu", weights_only=False)
        model, _ = load_condenser(str(latest))
        tokenizer = load_tokenizer(str(latest))
        notes = [f"resuming from {latest} (step {state['loop'].step})"]
    else:
        seed_everything(config.seed)
        model, notes = load_condenser(config.model, config.n_head_layers, config.skip_from)
        tokenizer = load_tokenizer(config.model)
    for note in notes:
        log(note)
    _check_tokenizer(tokenizer, model, config)
    examples_per_step = config.batch_size // 2 if config.cocondenser else config.batch_size
    total_steps = _total_steps(config, tokenizer, examples_per_step, log)
    model.to(device).train()
    optimizer = _optimizer(model, config)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(config.warmup_ratio * total_steps), total_steps)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "fp16")
    collator = WholeWordMaskCollator(tokenizer, config.mlm_probability, seed=config.seed)
    loop = LoopState()
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        collator.load_state_dict(state["collator"])
        restore_rng_states(state["rng"])
        loop = state["loop"]
    resumed_from = loop.step if state is not None else None
    log(f"pre-training {'coCondenser' if config.cocondenser else 'Condenser'} from {config.model}: "
        f"{model.n_head_layers} head layers fed from layer {model.skip_from} of {model.lm.config.num_hidden_layers}, "
        f"{total_steps} steps of {config.batch_size} sequences x {config.max_length} tokens, {device.type} {dtype}")

    def save_checkpoint() -> None:
        write_checkpoint(output, loop, model, tokenizer, {
            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
            "collator": collator.state_dict(), "rng": rng_states(), "loop": loop}, config)

    bar = tqdm(total=total_steps, initial=loop.step, desc="pretrain", unit="step", file=sys.stderr,
               disable=not config.progress, dynamic_ncols=True)
    span_temperature = config.temperature if config.cocondenser else None
    tokens, seconds = 0, 0.0
    run_started = time.perf_counter()
    while loop.step < total_steps:
        examples = training_examples(config.corpus, tokenizer, config.max_length, config.cocondenser, config.seed,
                                     loop.epoch, config.corpus_format, config.corpus_fields, config.shuffle_buffer)
        for _ in itertools.islice(examples, loop.examples_done):
            pass  # already trained on before the restart
        tick = time.perf_counter()
        for batch in _batched(examples, examples_per_step):
            inputs = {key: value.to(device) for key, value in collator([s for ex in batch for s in ex]).items()}
            with autocast(device, dtype):
                outputs = model(**inputs, span_temperature=span_temperature)
            scaler.scale(outputs.loss).backward()
            if config.max_grad_norm:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            loop.step += 1
            loop.examples_done += len(batch)
            loop.history.append(_record(loop.step, outputs, scheduler.get_last_lr()[0]))
            tokens += int(inputs["attention_mask"].sum())
            now = time.perf_counter()
            seconds += now - tick
            bar.update(1)
            bar.set_postfix(loss=f"{loop.history[-1]['loss']:.3f}", tok_s=f"{tokens / seconds:.0f}")
            if config.save_steps and loop.step % config.save_steps == 0 and loop.step < total_steps:
                save_checkpoint()
            tick = time.perf_counter()
            if loop.step >= total_steps:
                break
        else:
            if loop.examples_done == 0:
                raise RetrieverError(f"{config.corpus}: no training sequences (the documents are empty"
                                     + (" or too short for two spans" if config.cocondenser else "") + ")")
            loop.epoch += 1
            loop.examples_done = 0
    bar.close()
    if resumed_from is None or loop.step > resumed_from:
        save_checkpoint()
    else:
        log(f"{output}: pre-training already finished ({loop.step} steps); rewriting the model folder")
    model.save_pretrained(output, tokenizer)
    wall = time.perf_counter() - run_started
    speed = tokens / seconds if seconds else 0.0
    if loop.history:
        log(f"wrote {output}: {loop.step} steps, loss {loop.history[0]['loss']:.3f} -> "
            f"{loop.history[-1]['loss']:.3f}, {speed:.0f} tokens/s, {wall:.0f}s")
    return PretrainResult(output=output, steps=loop.step, resumed_from_step=resumed_from, history=loop.history,
                          tokens_per_second=speed, seconds=wall, notes=notes)


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
    if output.is_dir() and any(output.iterdir()) and not (output / CHECKPOINTS).is_dir():
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


def _total_steps(config: PretrainConfig, tokenizer: PreTrainedTokenizerBase, examples_per_step: int,
                 log: Callable[[str], None]) -> int:
    """--max-steps alone needs no pass over the data; --epochs needs the example count to size the schedule."""
    if config.max_steps is not None and config.epochs is None:
        return config.max_steps
    log(f"counting training sequences in {config.corpus} to size the schedule")
    count = sum(1 for _ in training_examples(config.corpus, tokenizer, config.max_length, config.cocondenser,
                                             config.seed, 0, config.corpus_format, config.corpus_fields, 0))
    if count == 0:
        raise RetrieverError(f"{config.corpus}: no training sequences (the documents are empty"
                             + (" or too short for two spans" if config.cocondenser else "") + ")")
    per_epoch = math.ceil(count / examples_per_step)
    kind = "documents with two spans" if config.cocondenser else f"blocks of {config.max_length} tokens"
    log(f"{count} {kind}: {per_epoch} steps per epoch")
    total = (config.epochs or 1) * per_epoch
    return min(total, config.max_steps) if config.max_steps is not None else total


def _optimizer(model: CondenserForPretraining, config: PretrainConfig) -> torch.optim.Optimizer:
    """AdamW without weight decay on biases and LayerNorm, as BERT was trained."""
    decayed, plain = [], []
    for name, parameter in model.named_parameters():
        (plain if name.endswith("bias") or "LayerNorm" in name else decayed).append(parameter)
    return torch.optim.AdamW([{"params": decayed, "weight_decay": config.weight_decay},
                              {"params": plain, "weight_decay": 0.0}], lr=config.learning_rate)


def _record(step: int, outputs, learning_rate: float) -> dict:
    record = {"step": step, "loss": outputs.loss.item(), "head_mlm": outputs.head_mlm_loss.item(),
              "backbone_mlm": outputs.backbone_mlm_loss.item(), "lr": learning_rate}
    if outputs.span_loss is not None:
        record["span"] = outputs.span_loss.item()
    return record


def _batched(examples: Iterable[Example], size: int) -> Iterator[list[Example]]:
    iterator = iter(examples)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _run_settings(config: PretrainConfig) -> dict:
    settings = dataclasses.asdict(config)
    settings["corpus_fields"] = dataclasses.asdict(config.corpus_fields)
    return settings


def _check_same_run(checkpoint: Path, config: PretrainConfig) -> None:
    """A resumed run must learn from the same data with the same recipe, or its result means nothing."""
    saved = json.loads((checkpoint / RUN_SETTINGS).read_text(encoding="utf-8"))
    current = _run_settings(config)
    changed = [key for key, value in current.items()
               if key not in RESUMABLE_CHANGES and key in saved and saved[key] != value]
    if changed:
        details = ", ".join(f"{key} {saved[key]!r} -> {current[key]!r}" for key in changed)
        raise RetrieverError(f"{checkpoint.parent.parent} holds a run with other settings ({details}); "
                             "rerun with the same settings to resume, or choose a new --output")


def checkpoint_folders(output: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first; temporary folders of an interrupted write are not listed."""
    folder = Path(output) / CHECKPOINTS
    if not folder.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in folder.iterdir()
             if path.is_dir() and (match := _STEP_DIR.match(path.name))]
    return sorted(found)


def latest_checkpoint(output: Path) -> Path | None:
    folders = checkpoint_folders(output)
    return folders[-1][1] if folders else None


def write_checkpoint(output: Path, loop: LoopState, model: CondenserForPretraining,
                     tokenizer: PreTrainedTokenizerBase, trainer_state: dict, config: PretrainConfig) -> Path:
    """Write into a temporary folder, then rename: a folder named step-N is always complete."""
    root = Path(output) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"step-{loop.step}"
    temporary = root / f".step-{loop.step}.tmp-{os.getpid()}"
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        model.save_pretrained(temporary, tokenizer)
        with open(temporary / TRAINER_STATE, "wb") as handle:
            torch.save(trainer_state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        (temporary / RUN_SETTINGS).write_text(json.dumps(_run_settings(config), indent=2) + "\n", encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.rename(temporary, target)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    for stale in root.glob(".step-*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for _, old in checkpoint_folders(output)[:-max(1, config.keep_checkpoints)]:
        shutil.rmtree(old, ignore_errors=True)
    return target
