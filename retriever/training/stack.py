"""The one training stack under `retriever train` and `retriever pretrain`: Hugging Face's `Trainer`.

It brings the loop, AdamW (no decay on biases and norms), the linear warm-up/decay schedule, clipping, bf16/fp16
autocast, DDP under torchrun, checkpoints with every rank's RNG state, and logging callbacks. Added here: weights
checkpointed as safetensors (the Trainer loads the other states with ``weights_only=True``), checkpoints that count
only once complete and that rerun compares with its own settings and inputs (`run_record`), and a run that stops at
the first non-finite loss and never saves or publishes non-finite weights."""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import safetensors.torch
import torch
import torch.distributed as dist
from transformers import PrinterCallback, ProgressCallback, Trainer, TrainingArguments

from retriever.corpus import Fields
from retriever.device import resolve_device, resolve_dtype
from retriever.errors import RetrieverError, home_expanded
from retriever.files import write_json
from retriever.folders import check_creatable, make_folder
from retriever.model_folder_writing import portable_record
from retriever.training.checkpoint_state import checkpoint_states_loaded, final_state, load_weights, rng_states_read
from retriever.training.callbacks import EpochEndCheckpoints, StderrProgress, adopt_save_steps, tensorboard
from retriever.training.divergence import StopAtNonFiniteLoss, check_finite_weights
from retriever.training.layout import check_resume_layout, check_step_layout
from retriever.training.processes import (DDP_TIMEOUT, check_launch_environment,  # noqa: F401
                                          check_same_run_everywhere, is_main_process, join_process_group, log,
                                          peer_deaths_reported)
from retriever.training.run_guards import check_paths_given, check_run_paths, check_setting_kinds
from retriever.training.run_record import (CHECKPOINTS, FINISHED_FILE, OPTIMIZER_STATES,  # noqa: F401 (stack.*)
                                           PRECISION_KEY, RUN_FILE, WEIGHTS_FILE, checkpoint_step, corpus_file,
                                           check_finished_model, finished_result, note_precision, PriorRun,
                                           prior_run, rotate_checkpoints, run_fingerprints)
from retriever.wording import counted


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@dataclass(kw_only=True)
class StackConfig:
    """What both commands share: how to learn (compared on resume) and where and how to run (not compared)."""

    output: str
    model: str = "minilm"
    corpus: str | None = None
    corpus_format: str = "auto"
    corpus_fields: Fields = Fields()
    batch_size: int = 32
    epochs: int | None = None
    max_steps: int | None = None
    learning_rate: float = 1e-4
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float | None = 1.0
    seed: int = 42
    save_steps: int | None = 500
    device: str = "auto"
    dtype: str = "auto"
    progress: bool = True
    report_to: str = "none"
    ddp_timeout: int = DDP_TIMEOUT
    RUNTIME_ONLY: ClassVar[tuple[str, ...]] = ("device", "dtype", "save_steps", "progress", "report_to", "ddp_timeout")
    PATHS: ClassVar[tuple[str, ...]] = ("output", "corpus")
    COUNTS: ClassVar[tuple[str, ...]] = ("batch_size", "epochs", "max_steps", "save_steps", "ddp_timeout", "seed")
    FINITE: ClassVar[tuple[str, ...]] = ("learning_rate", "warmup_ratio", "weight_decay", "max_grad_norm")
    SWITCHES: ClassVar[tuple[str, ...]] = ("progress",)

    def __post_init__(self) -> None:
        if isinstance(self.corpus_fields, dict):  # as `dataclasses.asdict` and JSON give it back
            self.corpus_fields = Fields(**self.corpus_fields)

    def check(self) -> None:
        check_paths_given(self.output, self.model)
        check_setting_kinds(self)  # and counts within bounds: 0 passed as unset, max_steps=0 trained whole epochs
        for name in self.FINITE:  # nan fails no comparison below, and nan or inf trains a NaN model
            if getattr(self, name) is not None and not math.isfinite(getattr(self, name)):
                raise RetrieverError(f"--{name.replace('_', '-')} is {getattr(self, name)}; give a finite number")
        if self.learning_rate <= 0 or not 0 <= self.warmup_ratio < 1:
            raise RetrieverError("--learning-rate must be positive and --warmup-ratio in [0, 1)")
        if self.weight_decay < 0:  # AdamW grew every weight each step: the CLI refused it, the library trained on
            raise RetrieverError(f"--weight-decay must be at least 0 (0: no decay), not {self.weight_decay}")
        if self.max_grad_norm is not None and self.max_grad_norm < 0:  # read as no clipping, without a word
            raise RetrieverError(f"--max-grad-norm must be at least 0 (0: no clipping), not {self.max_grad_norm}")
        self.check_flag_combinations()
        check_run_paths(self.output, self.model, self.data_files())
        check_launch_environment()  # after the flags: a flag that cannot fit the launch is the first line

    def check_flag_combinations(self) -> None:
        """Flags that contradict each other or the launch, read from no file: usage errors of the CLI (`check`)."""
        if not self.corpus and (self.corpus_format != "auto" or self.corpus_fields != Fields()):  # else ignored
            raise RetrieverError("--format, --id-field, --text-field and --title-field describe --corpus, which is "
                                 "not given; drop them or add --corpus")

    def normalised(self) -> "StackConfig":
        """Paths resolved, so a rerun from another directory compares equal."""
        paths = {name: str(home_expanded(getattr(self, name)).resolve()) for name in self.PATHS
                 if getattr(self, name) is not None}
        model = home_expanded(self.model)
        if model.exists():
            paths["model"] = str(model.resolve())
        return dataclasses.replace(self, **paths)

    def prepare(self, result_type: type) -> tuple["StackConfig", PriorRun]:
        """This config checked and normalised, and what a rerun of it finds (see `prior_run`), all before loading; a
        finished run's record comes as its ``result_type`` (`finished_result`)."""
        self.check()
        config = self.normalised()
        if not (output := Path(config.output)).exists():
            check_creatable(output, "--output")
        prior = prior_run(output, config.learning_settings(), config.fingerprints, log, config.same_setting)
        if prior.finished is not None:
            prior = prior._replace(finished=finished_result(prior.finished, result_type, output))
            check_finished_model(output)
            log(f"{output}: this run already finished ({counted(prior.finished.steps, 'step')}); nothing to do (to "
                f"train it again, delete {output / 'checkpoints' / 'finished.json'} or give another --output)")
        return config, prior

    def same_setting(self, name: str, recorded: object, given: object) -> bool:
        """Whether a setting recorded and given otherwise sets the same run all the same (`TrainConfig`'s encoder)."""
        return False

    def data_files(self) -> dict[str, Path | None]:
        """The data files the run reads, by role: with the start model's weights, what a resume must not change."""
        return {"corpus": corpus_file(self.corpus)}

    @functools.cached_property
    def fingerprints(self) -> dict[str, str]:
        """What a resume compares of the data files and the start model (`run_record.run_fingerprints`), read once."""
        return run_fingerprints(self.data_files(), self.model)

    def learning_settings(self) -> dict:
        """What a resume must match. The record lives in the model folder, which gets moved, so paths are kept as
        names (`portable_record`) rather than as paths of this machine. With max_steps, epochs is null: max_steps sets
        the run's length (`layout.planned_steps`), and a train folder's record said `epochs: 1` (train's default) of
        a run that passed over the data as often as its steps needed (`epochs_completed` says how often); records
        written before resume alike (`run_record._given`)."""
        settings = {k: v for k, v in dataclasses.asdict(self).items() if k not in (*self.RUNTIME_ONLY, "output")}
        return portable_record({**settings, "epochs": None} if self.max_steps is not None else settings)

    def arguments(self, per_step: int, max_steps: int | None, keep_checkpoints: int,
                  examples: tuple[int, str] | tuple[int, str, str] | None = None, evaluate: bool = False,
                  evaluate_first: bool = False, metric: str | None = None) -> tuple[TrainingArguments, str]:
        """TrainingArguments and the precision; ``per_step`` examples make the global batch, split over the ranks;
        ``examples`` is the count and noun of the data, and its plural when not the noun's + s (`layout`). With ``evaluate``, each epoch's end evaluates;
        ``metric`` picks the best checkpoint, kept from rotation."""
        device = resolve_device(self.device)
        precision = resolve_dtype(self.dtype, device)
        drop_last = examples is not None and check_step_layout(examples[0], per_step, examples[1], log, *examples[2:])
        backend = join_process_group(device, self.ddp_timeout)
        arguments = TrainingArguments(
            output_dir=str(Path(self.output) / CHECKPOINTS), per_device_train_batch_size=per_step,
            num_train_epochs=self.epochs or 1, max_steps=max_steps or -1, learning_rate=self.learning_rate,
            warmup_steps=self.warmup_ratio, weight_decay=self.weight_decay, max_grad_norm=self.max_grad_norm or 0.0,
            seed=self.seed, save_strategy="steps" if self.save_steps else "epoch", save_steps=self.save_steps or 0,
            save_total_limit=keep_checkpoints, eval_strategy="epoch" if evaluate else "no",
            eval_on_start=evaluate and evaluate_first, metric_for_best_model=metric if evaluate else None,
            logging_steps=1, logging_nan_inf_filter=False,  # the filter logs a NaN step's loss as 0.0: hidden
            report_to="none", disable_tqdm=True, use_cpu=device.type == "cpu", ddp_timeout=self.ddp_timeout,
            bf16=precision == "bf16", fp16=precision == "fp16", remove_unused_columns=False,
            accelerator_config={"split_batches": True}, dataloader_drop_last=drop_last, ddp_backend=backend)
        return arguments, precision


class StackTrainer(Trainer):
    """Trainer whose checkpoints hold safetensors weights and are marked complete by the run's record."""

    def __init__(self, config: StackConfig, arguments: TrainingArguments, precision: str, *,
                 unused_parameters: bool, **kwargs) -> None:
        """``unused_parameters``: whether some step leaves a trainable parameter without a gradient. Only then must DDP
        search each step's autograd graph for them (`find_unused_parameters`; without it DDP waits for their
        gradients and fails); elsewhere the search costs a traversal a step and a warning from every process."""
        arguments.ddp_find_unused_parameters = unused_parameters
        if is_main_process():  # inputs are checked: from now on OUTPUT is recognisably a run's, even if killed
            make_folder(Path(config.output) / CHECKPOINTS, "--output")
        every_epoch = not (config.max_steps and config.save_steps) or arguments.eval_strategy != "no"
        callbacks = [StderrProgress(config.progress), EpochEndCheckpoints(every_epoch), StopAtNonFiniteLoss(),
                     *tensorboard(config, is_main_process())]  # examples/s first
        super().__init__(args=arguments, callbacks=callbacks, **kwargs)
        self.output, self.precision, self.resuming = Path(config.output), precision, None
        self.record = {**config.learning_settings(), **config.fingerprints, PRECISION_KEY: precision}
        # rotated by _save_checkpoint once the new checkpoint is complete, not by the library before that
        self.keep_checkpoints, self.args.save_total_limit = self.args.save_total_limit, None
        self.remove_callback(PrinterCallback)
        self.remove_callback(ProgressCallback)

    def _load_callback_state(self) -> None:
        adopt_save_steps(self.state, self.args, log)  # the resumed state is loaded now, before any step
        super()._load_callback_state()

    def _get_train_sampler(self, train_dataset=None):
        """Our datasets order themselves per epoch (``set_epoch``), so a resumed run sees the same batches."""
        return torch.utils.data.SequentialSampler(train_dataset or self.train_dataset)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        os.makedirs(output_dir, exist_ok=True)
        safetensors.torch.save_model(self.accelerator.unwrap_model(self.model), os.path.join(output_dir, WEIGHTS_FILE))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: torch.nn.Module | None = None) -> None:
        load_weights(model or self.model, Path(resume_from_checkpoint))

    def _save_checkpoint(self, model: torch.nn.Module, trial) -> None:
        check_finite_weights(model, self.state.global_step)
        folder = Path(self.args.output_dir)
        marker = folder / f"checkpoint-{self.state.global_step}" / RUN_FILE
        if self.args.should_save:  # saved again at this step (an epoch's end): incomplete while rewritten
            marker.unlink(missing_ok=True)
        super()._save_checkpoint(model, trial)
        if world_size() > 1:
            dist.barrier()  # every rank's RNG state is on disk before the checkpoint is marked complete
        if self.args.should_save:
            write_json(marker, self.record)
            rotate_checkpoints(folder, self.keep_checkpoints, self.state.best_global_step)

    def fit(self, prior: PriorRun) -> None:
        """Train, resuming from a checked checkpoint laid out as this run is; a checkpoint state that is missing,
        damaged or not plain data stops the run, and so does a process's death or a process running another training
        than the first's (settings, checkpoint interval or precision: all save and average together), in one line."""
        resume_from = prior.resume
        check_same_run_everywhere({**self.record, "resume_from_step": checkpoint_step(resume_from),
                                   "save_steps": self.args.save_steps},
                                  self.args.ddp_timeout)
        note_precision(prior, self.precision, log)
        self.resuming = resume_from
        if resume_from is not None and self._resume_at_the_end(resume_from):
            return
        with peer_deaths_reported(self.args.ddp_timeout):
            self.train(resume_from_checkpoint=str(resume_from) if resume_from else None)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        with checkpoint_states_loaded(checkpoint, OPTIMIZER_STATES):
            super()._load_optimizer_and_scheduler(checkpoint)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        expected = rng_states_read(checkpoint, self.args.process_index, world_size(), log)
        with checkpoint_states_loaded(checkpoint, expected):
            super()._load_rng_state(checkpoint)

    def set_initial_training_values(self, args, dataloader):
        values = super().set_initial_training_values(args, dataloader)
        check_resume_layout(self.resuming, values[-1], values[1])  # the run's max_steps and steps an epoch
        warn_if_no_step_learns(values[-1], args)
        return values

    def _resume_at_the_end(self, checkpoint: Path) -> bool:
        """Whether ``checkpoint`` was taken at the last step (the run was killed while writing its model): then its
        state and weights are the result, where the library would train one step past the schedule."""
        state = final_state(checkpoint)
        if state is not None:
            self.state = state
            load_weights(self.model, checkpoint)
        return state is not None

    def finish(self, write_model, result: dict) -> None:
        """Rank 0 writes the model folder, records the finished run and drops its checkpoints; all ranks wait."""
        check_finite_weights(self.model, self.state.global_step)
        if self.is_world_process_zero():
            write_model()
            folder = self.output / CHECKPOINTS
            folder.mkdir(parents=True, exist_ok=True)
            result = {key: value for key, value in result.items() if key != "output"}  # a rerun knows its output
            write_json(folder / FINISHED_FILE, {"settings": self.record, "result": result})
            for path in folder.iterdir():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
        if world_size() > 1:
            with peer_deaths_reported(self.args.ddp_timeout):
                dist.barrier()


def warn_if_no_step_learns(max_steps: int, args: TrainingArguments) -> None:
    """Say that a one-step run with warm-up trains nothing: the schedule's first step runs at learning rate 0, so the
    start model's weights were written back unchanged as the result, without a word."""
    if max_steps == 1 and args.get_warmup_steps(max_steps) > 0:
        log(f"warning: the run is 1 optimizer step and warm-up (--warmup-ratio {args.warmup_steps:g}, rounded up to "
            "a whole step) runs it at learning rate 0, so the weights come out unchanged; pass --warmup-ratio 0, or "
            "train more steps (--epochs, --max-steps, or fewer --queries-per-step or --sequences-per-step)")
