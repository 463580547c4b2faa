"""What a resume reads from a checkpoint besides its record (`run_record`): the weights, the optimizer, schedule and
RNG states, and the trainer state (``trainer_state.json``), where the resume stands in the run's schedule. Each is
checked as it is read, so a file that is missing, damaged or not the checkpoint's is one line naming what to delete,
not a traceback, a run taken as finished, or a resume that silently starts its optimizer or schedule afresh."""
from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import safetensors.torch
import torch
from transformers import TrainerState
from transformers.trainer import TRAINER_STATE_NAME

from retriever.errors import RetrieverError
from retriever.files import read_json
from retriever.training.run_record import WEIGHTS_FILE, checkpoint_step, is_step_count, resume_advice
from retriever.weights_files import protocol_note_silenced
from retriever.wording import counted


def trainer_state(checkpoint: Path) -> dict:
    """``checkpoint``'s trainer state, refused in one line unless it is an object whose ``global_step`` is the
    checkpoint's step and whose ``max_steps`` is a step count: ``{}`` read as a run finished at step 0, so its
    weights were published as the trained model (exit 0), and a list or a string step was a TypeError traceback."""
    path = checkpoint / TRAINER_STATE_NAME
    state = read_json(path, resume_advice(checkpoint))
    steps = [state.get(key) for key in ("global_step", "max_steps")] if isinstance(state, dict) else [None, None]
    if not all(map(is_step_count, steps)) or steps[0] != checkpoint_step(checkpoint):
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


def load_weights(model: torch.nn.Module, checkpoint: Path) -> None:
    """A checkpoint's safetensors weights (tied tensors are stored once; safetensors restores both names)."""
    path = checkpoint / WEIGHTS_FILE
    try:
        safetensors.torch.load_model(model, path, strict=True)
    except (OSError, safetensors.SafetensorError, RuntimeError) as error:
        raise RetrieverError(f"{path}: unreadable or not this model's checkpoint weights "
                             f"({str(error).splitlines()[0]}); {resume_advice(checkpoint)}") from None


def rng_states_read(checkpoint: str | None, process: int, processes: int,
                    log: Callable[[str], None] | None = None) -> tuple[str, ...]:
    """The RNG state file this process reads from ``checkpoint``: its own, unless the checkpoint was saved by another
    process count (one ``rng_state.pth``, or one ``rng_state_N.pth`` per process), whose files no process reads: a
    resume under another count is allowed where its steps are the same (`layout`), with other dropout draws, which
    ``log`` is told in one line (the library noted it at info level, unseen). One process's generator cannot replay
    the draws of several (each drew its own slice's masks), so this cannot be made equal to an uninterrupted run."""
    own = f"rng_state_{process}.pth" if processes > 1 else "rng_state.pth"
    saved = list(Path(checkpoint).glob("rng_state*.pth")) if checkpoint else []
    same_count = any((path.name == "rng_state.pth") == (processes == 1) for path in saved)
    if saved and not same_count and log is not None:
        count = 1 if any(path.name == "rng_state.pth" for path in saved) else len(saved)
        saved_by = counted(count, "process", "processes")
        log(f"note: {Path(checkpoint).name} was saved by {saved_by} and this run has {processes}: it continues with "
            "the same data order but other random draws (dropout) than an uninterrupted run, so its losses and "
            f"weights will not be that run's; resume with {saved_by} to continue it exactly")
    return (own,) if same_count or not saved else ()


@contextmanager
def checkpoint_states_loaded(checkpoint: str | None, names: tuple[str, ...]) -> Iterator[None]:
    """Around the library's loading of a checkpoint's optimizer, schedule or RNG states (the files ``names``).
    It skipped a missing file without a word, so a resume went on with fresh AdamW moments, a schedule back at
    warm-up or other dropout draws (other weights, exit 0), and a damaged file was a torch traceback (an empty one
    "Aborted!"); both are one line here. Loading is ``weights_only``: a pickle that needs more is never run."""
    if checkpoint is None:
        yield
        return
    folder = Path(checkpoint)
    advice = resume_advice(folder, named="it")
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise RetrieverError(f"{folder}: {' and '.join(missing)} missing, so the run cannot resume as it was; {advice}")
    try:
        with protocol_note_silenced():  # the refusal below says it all
            yield
    except pickle.UnpicklingError as error:
        raise RetrieverError(f"{folder}: a checkpoint file is not plain tensors and was not loaded "
                             f"({_first_sentence(error)}); {advice}") from None
    except (EOFError, RuntimeError, ValueError, KeyError, TypeError) as error:  # truncated, or another run's states
        raise RetrieverError(f"{folder}: {' or '.join(names)} unreadable ({_first_sentence(error)}); "
                             f"{advice}") from None


def _first_sentence(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__} {text}".strip() if isinstance(error, (KeyError, EOFError)) or not text else \
        text.splitlines()[0].split(". ")[0]
