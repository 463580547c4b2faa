"""The training stack's own callbacks: progress on stderr, a checkpoint at each epoch's end, TensorBoard."""
from __future__ import annotations

import importlib.util
import logging
import sys
import time
from pathlib import Path

from tqdm import tqdm
from transformers import TrainerCallback

from retriever.errors import RetrieverError
from retriever.wording import counted


class StderrProgress(TrainerCallback):
    """A tqdm bar with loss, learning rate and examples/s on stderr (rank 0); examples/s (of every process of a
    torchrun launch: a step's examples are split over them) goes into the logs."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.bar, self.started, self.first_step = enabled, None, 0.0, 0

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="train", unit="step",
                            file=sys.stderr, dynamic_ncols=True, disable=not self.enabled)
        self.started, self.first_step = time.perf_counter(), state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or "loss" not in (logs or {}):
            return
        examples = (state.global_step - self.first_step) * args.per_device_train_batch_size * args.world_size  # all
        logs["examples_per_second"] = round(examples / max(time.perf_counter() - self.started, 1e-9), 2)
        self.bar.update(state.global_step - self.bar.n)
        self.bar.set_postfix(loss=f"{logs['loss']:.4f}", lr=f"{logs.get('learning_rate', 0):.2e}",
                             ex_s=f"{logs['examples_per_second']:.1f}")
        if state.global_step >= state.max_steps:
            self.bar.close()


def adopt_save_steps(state, args, log) -> None:
    """A resume checkpoints at this run's --save-steps: the library kept the checkpoint's interval, and said so in a
    multi-line warning of its own (`_only_save_steps_differ` drops it). 0 (only epochs' ends) is an interval like
    any other: `StackConfig.arguments` passes it as 0, so the checkpoint's state tells it from 1, and a change to or
    from it is said (a change to 0 passed without a word). A checkpoint written before 0 was passed holds 1 for it, so
    resuming one of 1 at 0 is taken as no change: "changed" was said of a run resumed as it was started."""
    recorded_zero = args.save_steps == 0 and state.save_steps == 1
    if state.save_steps != args.save_steps and not recorded_zero:
        interval = (f"every {counted(args.save_steps, 'step')}" if args.save_steps else "only at each epoch's end")
        log(f"--save-steps changed: checkpoints {interval} from now on")
    state.save_steps = args.save_steps


def _only_save_steps_differ(record: logging.LogRecord) -> bool:
    """False for the library's resume warning when save_steps is all it names (`adopt_save_steps` handles it)."""
    head, *lines = record.getMessage().split("\n\t")
    return not ("do not match the ones in the `trainer_state.json`" in head and lines
                and all(line.startswith("save_steps:") for line in lines))


logging.getLogger("transformers.trainer_utils").addFilter(_only_save_steps_differ)


class EpochEndCheckpoints(TrainerCallback):
    """A checkpoint at each epoch's end besides every --save-steps: dev evaluation picks the best among them.

    A step that ends the epoch (or the run) is saved there only, after the dev evaluation: the library's
    own save of it at the step's end wrote the same checkpoint a second time. Without ``every_epoch`` (a run of
    --max-steps with --save-steps and no dev evaluation) an epoch's end is saved only when it is the run's end or
    a --save-steps step: on a small data set every epoch's end wrote weights and optimizer state, a few steps apart."""

    def __init__(self, every_epoch: bool = True) -> None:
        self.every_epoch = every_epoch

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_training_stop or float(state.epoch).is_integer():
            control.should_save = False

    def on_epoch_end(self, args, state, control, **kwargs):
        control.should_save = (self.every_epoch or control.should_training_stop
                               or state.global_step % args.save_steps == 0)


TENSORBOARD_MISSING = "--report-to tensorboard needs the tensorboard package: pip install tensorboard"


def check_tensorboard(report_to: str) -> None:
    """Refuse --report-to tensorboard without its package before anything loads: it was refused when the trainer
    was built, after the model and data had loaded."""
    if report_to == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        raise RetrieverError(TENSORBOARD_MISSING)


def tensorboard(config, main_process: bool) -> list[TrainerCallback]:
    """The library's TensorBoard callback, writing to OUTPUT/tensorboard (kept with the model folder)."""
    if config.report_to == "none":
        return []
    try:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback
    except ImportError:  # found (`check_tensorboard`) but broken
        raise RetrieverError(TENSORBOARD_MISSING) from None
    writer = SummaryWriter(log_dir=str(Path(config.output) / "tensorboard")) if main_process else None
    return [TensorBoardCallback(tb_writer=writer)]
