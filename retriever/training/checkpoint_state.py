"""A checkpoint's trainer state (``trainer_state.json``): where a resume stands in the run's schedule. It is read
before the library reads it, so a state that is not a checkpoint's is one line, not a run taken as finished."""
from __future__ import annotations

from pathlib import Path

from transformers import TrainerState
from transformers.trainer import TRAINER_STATE_NAME

from retriever.errors import RetrieverError
from retriever.files import read_json
from retriever.training.run_record import checkpoint_step, resume_advice


def _step_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def trainer_state(checkpoint: Path) -> dict:
    """``checkpoint``'s trainer state, refused in one line unless it is an object whose ``global_step`` is the
    checkpoint's step and whose ``max_steps`` is a step count: ``{}`` read as a run finished at step 0, so its
    weights were published as the trained model (exit 0), and a list or a string step was a TypeError traceback."""
    path = checkpoint / TRAINER_STATE_NAME
    state = read_json(path, resume_advice(checkpoint))
    steps = [state.get(key) for key in ("global_step", "max_steps")] if isinstance(state, dict) else [None, None]
    if not all(map(_step_count, steps)) or steps[0] != checkpoint_step(checkpoint):
        raise RetrieverError(f"{path}: not the trainer state of {checkpoint.name} (its global_step must be "
                             f"{checkpoint_step(checkpoint)} and max_steps a step count); {resume_advice(checkpoint)}")
    return state


def final_state(checkpoint: Path) -> TrainerState | None:
    """The library's state saved in ``checkpoint`` when it was taken at the schedule's last step, else None."""
    state = trainer_state(checkpoint)
    try:
        state = TrainerState(**state)
    except TypeError as error:  # a key the library does not know
        raise RetrieverError(f"{checkpoint / TRAINER_STATE_NAME}: {error}; {resume_advice(checkpoint)}") from None
    return state if state.global_step >= state.max_steps else None
