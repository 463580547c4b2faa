"""How a run's examples fill its steps when torchrun splits every step over its processes.

Accelerate gives each process an equal slice of a step: an epoch's short last step was filled up by repeating the
epoch's first examples, so under torchrun they were trained twice, their passages sat in the batch twice as
negatives of the other queries (a coCondenser passage's spans could meet their own copies), and the losses and
weights were not those of one process on the same data. So under torchrun a short last step is left out (a
different set sits out each epoch, the order being shuffled per epoch) and fewer examples than one step are
refused. The steps of an epoch then depend on the process count, so a resume with another count is refused too.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from retriever.errors import RetrieverError
from retriever.training.processes import launched_processes
from retriever.training.checkpoint_state import trainer_state
from retriever.wording import agree, counted


def drops_short_last_step(examples: int, per_step: int) -> bool:
    """Whether an epoch's last step would be short and filled with repeats (only under torchrun)."""
    return launched_processes() > 1 and examples % per_step != 0


def steps_per_epoch(examples: int, per_step: int) -> int:
    return examples // per_step if drops_short_last_step(examples, per_step) else -(-examples // per_step)


def planned_steps(max_steps: int | None, epochs: int | None, examples: int, per_step: int) -> int:
    """A run's optimizer steps by HF TrainingArguments' rule, which `train` gets from the Trainer itself and
    `pretrain` counts ahead: --max-steps when given (it overrides --epochs), else --epochs (default 1) passes."""
    return max_steps or (epochs or 1) * steps_per_epoch(examples, per_step)


def check_step_split(per_step: int, flag: str) -> None:
    """Refuse a step whose examples do not split over the launch's processes (Accelerate gives each an equal
    slice): a flag error, so the line names the counts that fit."""
    processes = launched_processes()
    if per_step % processes:
        lower, upper = max(processes, per_step // processes * processes), -(-per_step // processes) * processes
        raise RetrieverError(f"{flag} {per_step} does not split over {processes} processes: it must be a multiple "
                             f"of {processes}; use " + (f"{lower}" if lower == upper else f"{lower} or {upper}"))


def check_step_layout(examples: int, per_step: int, unit: str, log: Callable[[str], None],
                      plural: str | None = None) -> bool:
    """Refuse ``examples`` that fill no step under torchrun; return whether the short last step of each epoch is left
    out, saying so. ``unit``: the noun of one example, ``plural`` its plural when not the noun's + s (``counted``)."""
    processes = launched_processes()
    if processes > 1 and examples < per_step:
        raise RetrieverError(f"{counted(examples, unit, plural)} {agree(examples, 'does', 'do')} not fill one step "
                             f"of {per_step} over {processes} processes (each process would train on repeats of "
                             f"{agree(examples, 'it', 'them')}); lower --queries-per-step (train) or "
                             f"--sequences-per-step (pretrain) to fit, a multiple of {processes}, or give more data")
    if not drops_short_last_step(examples, per_step):
        return False
    log(f"the last step of each epoch would hold {examples % per_step} of its {counted(per_step, unit, plural)} "
        f"({examples} in steps of {per_step}), which torchrun fills with repeats; it is left out (a different "
        "set each epoch)")
    return True


def check_resume_layout(checkpoint: Path | None, max_steps: int, epoch_steps: int | None = None) -> None:
    """Refuse to resume ``checkpoint`` when this run lays its epochs out in other steps (another process count
    leaving out or keeping a short last step): the library skipped batches by the new layout and the schedule
    changed length, so the run silently trained another order than the one it resumed. Under --max-steps the
    length is the same whatever the count, so the steps of an epoch (``epoch_steps``) are compared too."""
    if checkpoint is None:
        return
    state = trainer_state(checkpoint)
    recorded = state.get("max_steps")
    if isinstance(recorded, int) and recorded != max_steps:
        _refuse_layout(checkpoint, f"{recorded} steps", f"{max_steps}", old_plan=True)
    recorded_epoch = _recorded_epoch_steps(state)
    if epoch_steps is not None and recorded_epoch is not None and recorded_epoch != epoch_steps:
        _refuse_layout(checkpoint, f"{recorded_epoch} steps an epoch", f"{epoch_steps}", old_plan=False)


def _recorded_epoch_steps(state: dict) -> int | None:
    """The steps of an epoch the checkpoint's run had: the library records its step and its epoch as a fraction
    (step + 1) / steps of the epoch it was in."""
    step, epoch = state.get("global_step"), state.get("epoch")
    if not isinstance(step, int) or isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or epoch <= 0:
        return None
    return round(step / epoch)


def _refuse_layout(checkpoint: Path, recorded: str, planned: str, old_plan: bool) -> None:
    if saved_processes(checkpoint) == launched_processes():
        reason = ("a pretrain run from before --max-steps overrode --epochs stopped at whichever came first" if
                  old_plan else "its data or steps differ")
        raise RetrieverError(f"{checkpoint}: the run was planned in {recorded} and this one, under the same process "
                             f"count, in {planned} ({reason}), so it cannot resume as it was; choose another "
                             "--output, or delete the folder to start over")
    launched = counted(launched_processes(), "process", "processes")
    raise RetrieverError(f"{checkpoint}: the run was laid out in {recorded} and this one, over {launched}, in "
                         f"{planned}; resume with the number of processes it was started with, or choose another "
                         "--output")


def saved_processes(checkpoint: Path) -> int | None:
    """The process count that saved ``checkpoint``, from its RNG state files (one per process), None if none."""
    per_process = len(list(checkpoint.glob("rng_state_*.pth")))
    return 1 if (checkpoint / "rng_state.pth").is_file() else per_process or None
