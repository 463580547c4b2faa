"""The one training stack under `retriever train` and `retriever pretrain`: Hugging Face's `Trainer`.

The Trainer brings the loop, AdamW without decay on biases and norms, the linear warm-up/decay
schedule, gradient clipping, bf16/fp16 autocast, DDP under torchrun (gloo on CPUs, NCCL on GPUs),
checkpoints with optimizer, scheduler and every rank's RNG state, and logging callbacks
(TensorBoard).  What it lacks and this module adds:

* checkpoints that can be trusted: weights as safetensors, every other state loaded with
  ``weights_only=True``, and a checkpoint counts only once its ``run.json`` (the run's settings,
  written last, after every rank has saved) is there.  A rerun compares that JSON with its own
  settings *before* loading anything, and refuses a partial or foreign one;
* ``finished.json`` once the model folder is written, so a rerun of a finished run does nothing;
* a progress bar and log lines on stderr (loss, learning rate, examples/s).
"""
from __future__ import annotations

import json
import math
import os
import pickle
import re
import shutil
import sys
import time
from pathlib import Path

import safetensors.torch
import torch
import torch.distributed as dist
from tqdm import tqdm
from transformers import PrinterCallback, ProgressCallback, Trainer, TrainerCallback, TrainingArguments

from retriever.device import resolve_device, resolve_dtype
from retriever.errors import RetrieverError
from retriever.shards import atomic_write_bytes

CHECKPOINTS = "checkpoints"
RUN_FILE = "run.json"
FINISHED_FILE = "finished.json"
WEIGHTS_FILE = "model.safetensors"
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")


def log(message: str) -> None:
    """One line on stderr, from rank 0 only, without breaking a progress bar."""
    if is_main_process():
        tqdm.write(message, file=sys.stderr)


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def training_arguments(output: Path, *, batch_size: int, epochs: int, max_steps: int | None, learning_rate: float,
                       warmup_ratio: float, weight_decay: float, max_grad_norm: float | None, seed: int,
                       save_steps: int | None, keep_checkpoints: int, device: str, dtype: str,
                       evaluate: bool = False, evaluate_first: bool = False,
                       metric: str | None = None) -> tuple[TrainingArguments, str]:
    """TrainingArguments for either command; ``batch_size`` is the global batch, split over the ranks.

    Checkpoints come every ``save_steps`` and at each epoch's end; with ``evaluate``, so does an
    evaluation whose ``metric`` picks the best checkpoint (kept from rotation by the Trainer).
    """
    resolved = resolve_device(device)
    precision = resolve_dtype(dtype, resolved)
    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    if batch_size % ranks:
        raise RetrieverError(f"--batch-size {batch_size} does not split over {ranks} processes; use a multiple of "
                             f"{ranks}")
    arguments = TrainingArguments(
        output_dir=str(output / CHECKPOINTS), per_device_train_batch_size=batch_size, num_train_epochs=epochs,
        max_steps=max_steps or -1, learning_rate=learning_rate, warmup_steps=warmup_ratio,
        weight_decay=weight_decay, max_grad_norm=max_grad_norm or 0.0, seed=seed, lr_scheduler_type="linear",
        save_strategy="steps" if save_steps else "epoch", save_steps=save_steps or 500,
        eval_strategy="epoch" if evaluate else "no", eval_on_start=evaluate and evaluate_first,
        metric_for_best_model=metric if evaluate else None, greater_is_better=True,
        save_total_limit=keep_checkpoints, logging_steps=1, report_to="none", disable_tqdm=True,
        use_cpu=resolved.type == "cpu", bf16=precision == "bf16", fp16=precision == "fp16",
        remove_unused_columns=False, dataloader_drop_last=False, ddp_backend=None if ranks == 1 else "nccl" if resolved.type == "cuda" else "gloo", accelerator_config={"split_batches": True, "even_batches": True}, save_only_model=False,
        ddp_find_unused_parameters=True)
    return arguments, precision


def run_settings_differ(recorded: object, current: dict, where: Path) -> None:
    """Refuse a resume whose recorded settings are not exactly this run's: a record with other keys
    (``{}`` included) is someone else's folder, not a compatible run."""
    if not isinstance(recorded, dict) or set(recorded) != set(current):
        raise RetrieverError(f"{where}: not a run of this command and version (its settings record does not match); "
                             "choose another --output or delete the folder")
    differing = [f"{key} {recorded[key]!r} -> {current[key]!r}" for key in sorted(current)
                 if recorded[key] != current[key]]
    if differing:
        raise RetrieverError(f"{where.parent if where.name == RUN_FILE else where} holds a run with other settings "
                             f"({'; '.join(differing)}); rerun with the same settings to resume, or choose another "
                             "--output")


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RetrieverError(f"{path}: unreadable ({error}); delete it or choose another --output") from None


def finished_record(output: Path, settings: dict) -> dict | None:
    """The result a finished run recorded, after checking it was made with these settings."""
    path = output / CHECKPOINTS / FINISHED_FILE
    if not path.is_file():
        return None
    record = _read_json(path)
    run_settings_differ(record.get("settings") if isinstance(record, dict) else None, settings, path)
    return record


def resume_point(output: Path, settings: dict) -> Path | None:
    """The newest complete checkpoint of this run, its settings checked before any of its files is loaded."""
    folder = output / CHECKPOINTS
    if not folder.is_dir():
        return None
    complete = sorted((int(match.group(1)), path) for path in folder.iterdir()
                      if (match := _CHECKPOINT_DIR.match(path.name)) and (path / RUN_FILE).is_file())
    if not complete:
        return None
    latest = complete[-1][1]
    run_settings_differ(_read_json(latest / RUN_FILE), settings, latest / RUN_FILE)
    return latest


def finish(output: Path, settings: dict, result: dict) -> None:
    """Record the finished run and drop the checkpoints it no longer needs (rank 0 only)."""
    folder = output / CHECKPOINTS
    folder.mkdir(parents=True, exist_ok=True)
    record = {"settings": settings, "result": result}
    atomic_write_bytes(folder / FINISHED_FILE, (json.dumps(record, indent=2) + "\n").encode("utf-8"))
    for path in folder.iterdir():
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


class StackTrainer(Trainer):
    """Trainer whose checkpoints hold safetensors weights and are marked complete by the run's settings."""

    def __init__(self, *args, run_settings: dict, progress: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.run_settings = run_settings
        self.remove_callback(PrinterCallback)
        self.remove_callback(ProgressCallback)
        self.add_callback(StderrProgress(progress))
        self.add_callback(EpochEndCheckpoints())

    def _get_train_sampler(self, train_dataset=None):
        """Our datasets order themselves per epoch (``set_epoch``), so a resumed run sees the same batches."""
        return torch.utils.data.SequentialSampler(train_dataset or self.train_dataset)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        os.makedirs(output_dir, exist_ok=True)
        safetensors.torch.save_model(self.accelerator.unwrap_model(self.model), os.path.join(output_dir, WEIGHTS_FILE))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: torch.nn.Module | None = None) -> None:
        load_weights(model or self.model, Path(resume_from_checkpoint))

    def _save_checkpoint(self, model: torch.nn.Module, trial) -> None:
        super()._save_checkpoint(model, trial)
        if world_size() > 1:
            dist.barrier()  # every rank's RNG state is on disk before the checkpoint is marked complete
        if self.args.should_save:
            folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            atomic_write_bytes(folder / RUN_FILE, (json.dumps(self.run_settings, indent=2) + "\n").encode())

    def fit(self, resume_from: Path | None) -> None:
        """Train, resuming from a checked checkpoint; a checkpoint file that is not plain data stops the run."""
        try:
            self.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        except pickle.UnpicklingError as error:
            raise RetrieverError(f"{resume_from}: a checkpoint file is not plain tensors and was not loaded "
                                 f"({str(error).splitlines()[0]}); delete the folder to start over") from None


def load_weights(model: torch.nn.Module, checkpoint: Path) -> None:
    """A checkpoint's safetensors weights (tied tensors are stored once; safetensors restores both names)."""
    path = checkpoint / WEIGHTS_FILE
    try:
        safetensors.torch.load_model(model, path, strict=True)
    except (OSError, safetensors.SafetensorError, RuntimeError) as error:
        raise RetrieverError(f"{path}: unreadable or not this model's checkpoint weights "
                             f"({str(error).splitlines()[0]}); delete {checkpoint.parent} to start over") from None


class StderrProgress(TrainerCallback):
    """A tqdm bar with loss, learning rate and examples/s on stderr, as the loops before the Trainer showed."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: tqdm | None = None
        self.started = 0.0
        self.first_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="train", unit="step",
                            file=sys.stderr, dynamic_ncols=True, disable=not self.enabled)
        self.started, self.first_step = time.perf_counter(), state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs or "loss" not in logs:
            return
        seconds = max(time.perf_counter() - self.started, 1e-9)
        examples = (state.global_step - self.first_step) * args.per_device_train_batch_size
        logs["examples_per_second"] = round(examples / seconds, 2)
        self.bar.set_postfix(loss=f"{logs['loss']:.4f}", lr=f"{logs.get('learning_rate', 0):.2e}",
                             ex_s=f"{examples / seconds:.1f}")

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()


def tensorboard_callback(output: Path, report_to: str) -> list[TrainerCallback]:
    """The library's TensorBoard callback, writing to OUTPUT/tensorboard (kept with the model folder)."""
    if report_to == "none":
        return []
    try:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback
    except ImportError:
        raise RetrieverError("--report-to tensorboard needs the tensorboard package: pip install tensorboard") from None
    writer = SummaryWriter(log_dir=str(output / "tensorboard")) if is_main_process() else None
    return [TensorBoardCallback(tb_writer=writer)]


class EpochEndCheckpoints(TrainerCallback):
    """Checkpoint (and evaluate) at every epoch's end and at the last step, besides every --save-steps,
    but only once per step when an epoch ends on the last step or on a save step."""

    def __init__(self) -> None:
        self.saved_at = self.evaluated_at = -1

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= state.max_steps:
            control.should_save = True
            control.should_evaluate = args.eval_strategy != "no"

    def on_epoch_end(self, args, state, control, **kwargs):
        control.should_save = state.global_step != self.saved_at
        control.should_evaluate = control.should_evaluate and state.global_step != self.evaluated_at

    def on_save(self, args, state, control, **kwargs):
        self.saved_at = state.global_step

    def on_evaluate(self, args, state, control, **kwargs):
        self.evaluated_at = state.global_step


def broadcast(value: object) -> object:
    """Rank 0's value on every rank (dev metrics are computed once, on rank 0)."""
    if world_size() == 1:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]

