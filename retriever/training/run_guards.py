"""What `train` and `pretrain` refuse before they load anything, each a line instead of a run that breaks later:
an empty output or model name, a second run of the same output at once, an output inside the start model's folder, and a data file that is a
pipe or a device."""
from __future__ import annotations

import contextlib
import numbers
import os
from collections.abc import Iterator
from pathlib import Path

from retriever.choices import REPORT_TO, check_count
from retriever.errors import RetrieverError, check_kind, given_path, home_expanded
from retriever.folders import exclusive_build, named_output
from retriever.model_names import check_model_name
from retriever.training.callbacks import check_tensorboard


@contextlib.contextmanager
def one_run_at_a_time(output: str, main_process: bool) -> Iterator[None]:
    """Hold ``.NAME.lock`` beside the output while this run lives (rank 0 only; the kernel drops it with the
    process): two runs of one output resumed from each other's live checkpoints, rotated them away under each
    other, and died with a traceback or published one over the other."""
    if not main_process:
        yield
        return
    with exclusive_build(named_output(home_expanded(output).resolve()), "training run"):
        yield


def check_paths_given(output: object, model: object) -> None:
    """Refuse an empty --output or model before paths are resolved: Path("") is the current folder, so the library's
    ``output=""`` trained into it and ``model=""`` loaded whatever model was there (the CLI refuses both itself)."""
    given_path(output, "--output", "the path of the folder to write the trained model to (str or Path)")
    check_kind(model, (str, os.PathLike), "model", "a model folder's path or a hub id (str or Path)")
    check_model_name(os.fspath(model))


def check_setting_kinds(config: object) -> None:
    """Each path a str or Path, each count (``config.COUNTS``) a whole number within its bound (`COUNT_BOUNDS`), each
    switch a bool, each rate a real number, the report a known one, refused in one line: the library's TrainConfig compared a string with a number (a TypeError
    traceback), handed an int to pathlib, and trained epochs=1.5 or max_steps=True."""
    for name in config.PATHS:
        if getattr(config, name) is not None:
            check_kind(getattr(config, name), (str, os.PathLike), f"--{_flag(name)}", "a path (str or Path)")
    for name in config.COUNTS:
        if getattr(config, name) is not None:
            check_count(name, getattr(config, name))
    for name in config.SWITCHES:  # a string was truthy: progress="no" drew bars, cross_device_negatives="no" was on
        check_kind(getattr(config, name), bool, name, "True or False")
    if config.report_to not in REPORT_TO:  # any other reported to TensorBoard
        raise RetrieverError(f"report_to must be one of {', '.join(REPORT_TO)}, not {config.report_to!r}")
    check_tensorboard(config.report_to)
    for name in config.FINITE:
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise RetrieverError(f"--{_flag(name)} must be a number, not {value!r}")


def _flag(name: str) -> str:
    return name.replace("_", "-")


def check_output_outside_model(output: str, model: str) -> None:
    """The output may not be (or lie in) the start model's folder: the run's own weights would join the start
    model's fingerprint, so a rerun of the finished run was refused as "the start model changed"."""
    root = home_expanded(model)  # a local folder; aliases and hub ids name folders no output goes into
    if not root.is_dir():
        return
    root, target = root.resolve(), home_expanded(output).resolve()
    if target == root or root in target.parents:
        raise RetrieverError(f"--output {output} is inside the start model's folder {root}; choose an --output "
                             "outside it")


def check_data_file(path: Path | None) -> None:
    """A data file that is a pipe or a device (``/dev/stdin``, ``<(...)``) is refused by name: its path resolved to
    ``/proc/PID/fd/pipe:[N]`` and failed as "no such file". A rerun could not check that it is unchanged before
    resuming, and under torchrun every process reads it. Checked before the config's paths are expanded, so ``~`` is
    expanded here: '~/c.jsonl' was looked for in a './~' folder, and a pipe there was read, blocking the run."""
    path = None if path is None else home_expanded(path)
    if path is not None and path.exists() and not (path.is_file() or path.is_dir()):
        raise RetrieverError(f"{path}: is a pipe or a device, not a file; training reads its data from files (a rerun "
                             "checks they are unchanged before resuming): save it to a file and pass that")


def check_run_paths(output: str, model: str, data_files: dict[str, Path | None]) -> None:
    """The output is outside the start model and no data file is a pipe: checked before anything loads."""
    check_output_outside_model(output, model)
    for path in data_files.values():
        check_data_file(path)


def same_encoder_settings(model: str, recorded: object, given: object) -> bool:
    """Whether two sets of encoder flags (`TrainConfig.encoder`, unset ones left out) train ``model`` alike: a resume
    or rerun that gives a setting the run left to the model, at the model's value (or leaves out one the run gave
    so), is the same run; it was refused as "other settings", its checkpoints lost. Resolved against the model's
    files as they are now: had they changed since, the run's fingerprint of them refuses it."""
    from retriever.encoder_settings import EncoderSettings

    if not isinstance(recorded, dict) or not isinstance(given, dict):
        return False
    try:
        resolved = [EncoderSettings.for_model(model, training=True, **flags).recorded() for flags in (recorded, given)]
    except (RetrieverError, TypeError):  # a record holding what no flag gives is another run's
        return False
    return resolved[0] == resolved[1]
