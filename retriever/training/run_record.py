"""What a training run leaves in OUTPUT/checkpoints, and what a rerun finds there.

A checkpoint counts only once its ``run.json`` exists (written after every rank saved); it holds the
run's settings and a fingerprint of its inputs (the data files it reads and the start model's weight
files), a second one of its tokenizer and config files, and the precision it computed in. A rerun compares the
settings and fingerprints with its own before it loads anything: resuming on other data, or from another start model
(or tokenizer) under the same name, would silently mix two runs; another precision is allowed, with a note
(`precision_note`). ``finished.json`` records the same plus the result, so a rerun of a finished run is a no-op.
Records older than a fingerprint or the precision lack it; they resume unchecked on it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from retriever.errors import RetrieverError, home_expanded
from retriever.files import read_json
from retriever.model_names import resolve_model_path

CHECKPOINTS = "checkpoints"
RUN_FILE = "run.json"
FINISHED_FILE = "finished.json"
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_STATES = ("optimizer.pt", "scheduler.pt")
INPUTS_KEY = "inputs_sha256"  # beside the settings in both records, compared separately
MODEL_FILES_KEY = "model_files_sha256"  # the start model's tokenizer and config files: apart, so older runs resume
PRECISION_KEY = "dtype"  # the precision the run computed in: a resume in another is noted, not refused
BESIDE_SETTINGS = (INPUTS_KEY, MODEL_FILES_KEY, PRECISION_KEY)
MEMORY_SETTINGS = ("grad_cache_chunk_size",)  # recorded, not compared: they change memory, not the gradients
# The start model's files besides its weights that shape what it computes: its config, its tokenizer's files, and
# the sentence-transformers and retriever records that set pooling, lengths and prefixes (in any tower's folder).
MODEL_FILE_NAMES = frozenset({
    "config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
    "modules.json", "config_sentence_transformers.json", "sentence_bert_config.json", "router_config.json",
    "retriever.json"})
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
# What the fingerprint reads: a file up to WHOLE_FILE bytes whole; a larger one (a pre-training corpus of
# gigabytes, a model's weights) by its size and SAMPLES evenly spaced blocks of BLOCK bytes, first and last
# included, so at most 64 MiB per file and a rerun starts in seconds. That is enough for what happens to data
# between runs (another file under the same name, lines added, removed or rewritten): each changes the size or
# a sampled block. Only an equal-length edit that misses every sampled block of a file over 64 MiB goes unseen.
WHOLE_FILE, SAMPLES, BLOCK = 64 << 20, 64, 1 << 20
# Whether a setting's recorded and given values, unequal, set the same run (name, recorded, given -> bool).
SameSetting = Callable[[str, object, object], bool]


def file_fingerprint(path: Path) -> str:
    """SHA-256 of a file's size and content (sampled above WHOLE_FILE bytes, see above)."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as handle:
        if size <= WHOLE_FILE:
            for block in iter(lambda: handle.read(BLOCK), b""):
                digest.update(block)
            return digest.hexdigest()
        for sample in range(SAMPLES):
            handle.seek((size - BLOCK) * sample // (SAMPLES - 1))
            digest.update(handle.read(BLOCK))
    return digest.hexdigest()


def model_weight_files(model: str) -> dict[str, Path]:
    """The start model's weight files by their place in its folder (an untied model's towers and a Condenser head
    included, a training output's own checkpoints not); none for a hub id, which the settings name."""
    return _model_files(model, lambda path: path.suffix in WEIGHT_SUFFIXES)


def model_config_files(model: str) -> dict[str, Path]:
    """The start model's tokenizer and config files (``MODEL_FILE_NAMES``), found as its weight files are."""
    return _model_files(model, lambda path: path.name in MODEL_FILE_NAMES)


def _model_files(model: str, wanted: Callable[[Path], bool]) -> dict[str, Path]:
    root = Path(resolve_model_path(model))
    if not root.is_dir():
        return {}
    return {f"model/{path.relative_to(root).as_posix()}": path for path in sorted(root.rglob("*"))
            if wanted(path) and path.is_file()
            and not any(part == CHECKPOINTS or part.startswith(".") for part in path.relative_to(root).parts)}


def corpus_file(corpus: str | None) -> Path | None:
    """The file a corpus argument (a file or a BEIR folder, ``~`` the home folder, as it is read) reads."""
    path = None if corpus is None else home_expanded(corpus)
    return None if path is None else path / "corpus.jsonl" if path.is_dir() else path


def inputs_fingerprint(files: dict[str, Path | None]) -> str:
    """One hash of the named input files; a missing one counts as absent (its reader reports it)."""
    digest = hashlib.sha256()
    for role, path in sorted(files.items()):
        digest.update(f"{role}\t{file_fingerprint(path) if path and path.is_file() else '-'}\n".encode())
    return digest.hexdigest()[:32]


def run_fingerprints(data_files: dict[str, Path | None], model: str) -> dict[str, str]:
    """The fingerprints a resume compares, by their record's key: the data files with the start model's weights, and
    apart (so runs recorded before it resume) the start model's tokenizer and config files."""
    return {INPUTS_KEY: inputs_fingerprint({**data_files, **model_weight_files(model)}),
            MODEL_FILES_KEY: inputs_fingerprint(model_config_files(model))}


def _check_record(path: Path, settings: dict, fingerprints: dict[str, str], key: str | None = None,
                  same: SameSetting | None = None) -> dict:
    """A recorded run (``path``, its settings under ``key``) whose settings are these (equal, or taken as the same by
    ``same``) and whose fingerprints (those it recorded: `INPUTS_KEY`, `MODEL_FILES_KEY`) are these; a record with
    other keys (``{}`` included) is another kind of folder, not a compatible run."""
    record = read_json(path, "delete it or choose another --output")
    recorded = record.get(key) if key and isinstance(record, dict) else record
    beside = {k: v for k, v in recorded.items() if k in BESIDE_SETTINGS} if isinstance(recorded, dict) else {}
    recorded = {k: v for k, v in recorded.items() if k not in BESIDE_SETTINGS} if isinstance(recorded, dict) \
        else recorded
    if not isinstance(recorded, dict) or set(recorded) != set(settings):
        raise RetrieverError(f"{path}: not a run of this command and version (its settings record does not match); "
                             "choose another --output or delete the folder")
    recorded, settings = _given(recorded), _given(settings)
    differing = [f"{k} {recorded[k]!r} -> {settings[k]!r}" for k in sorted(settings)
                 if recorded[k] != settings[k] and not (same and same(k, recorded[k], settings[k]))]
    if differing:
        raise RetrieverError(f"{path.parent} holds a run with other settings ({'; '.join(differing)}); rerun with "
                             "the same settings to resume, or choose another --output")
    if beside.get(INPUTS_KEY, fingerprints[INPUTS_KEY]) != fingerprints[INPUTS_KEY]:
        raise RetrieverError(f"the training data or the start model changed since the run in {path.parent}; rerun "
                             "with the same data and model to resume, or choose another --output")
    if beside.get(MODEL_FILES_KEY, fingerprints[MODEL_FILES_KEY]) != fingerprints[MODEL_FILES_KEY]:
        raise RetrieverError(f"the start model's tokenizer or config files changed since the run in {path.parent}; "
                             "rerun with the same model files to resume, or choose another --output")
    return record


def _given(settings: dict) -> dict:
    """Settings with the None entries of their nested dicts left out: there None means "not given" (an encoder
    setting then comes from the model), and the CLI passes every flag where the library passes only those set, so
    a run started from one was refused as "other settings" when resumed or rerun from the other. With max_steps
    set, epochs goes unused (HF's rule, `layout.planned_steps`): a run recorded with both before the CLI refused
    them together was refused on resume as "other settings" (epochs 3 -> 1), and no command line could match it."""
    given = {key: {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value
             for key, value in settings.items()}
    given = {**given, **{key: None for key in MEMORY_SETTINGS if key in given}}  # lowered after running out of memory
    if "max_grad_norm" in given and not given["max_grad_norm"]:  # no clipping: the library's 0.0, the CLI's None
        given["max_grad_norm"] = None
    return {**given, "epochs": None} if given.get("max_steps") is not None and "epochs" in given else given


def complete_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint, oldest first."""
    return sorted((int(match.group(1)), path) for path in folder.glob("checkpoint-*")
                  if (match := _CHECKPOINT_DIR.match(path.name)) and (path / RUN_FILE).is_file())


class PriorRun(NamedTuple):
    """What a rerun finds in its output (`prior_run`): a finished run's record, or the checkpoint to resume from and
    its record, read once for the comparison and the resume's notes (`note_precision`, train's GradCache note)."""
    finished: object | None = None  # the record; once `StackConfig.prepare` read it, its result (`finished_result`)
    resume: Path | None = None
    resumed: dict = {}


def prior_run(output: Path, settings: dict, fingerprints: dict[str, str],
              log: Callable[[str], None] | None = None, same: SameSetting | None = None) -> PriorRun:
    """What a rerun finds: a finished run's record, or the newest complete checkpoint, each checked against
    these settings (``same`` takes some unequal values as the same) and fingerprints (`INPUTS_KEY`, `MODEL_FILES_KEY`)
    before any other file of it is read. A folder that holds something else is refused. ``log`` is told of
    incomplete checkpoints skipped (`skipped_checkpoints`)."""
    folder = output / CHECKPOINTS
    if output.exists() and (not output.is_dir() or any(output.iterdir()) and not folder.is_dir()):
        raise RetrieverError(f"{output}: exists and holds no training run (no {CHECKPOINTS}/); choose a new --output "
                             "(the run writes a model folder there)")
    if (folder / FINISHED_FILE).is_file():
        return PriorRun(finished=_check_record(folder / FINISHED_FILE, settings, fingerprints, "settings", same))
    complete = complete_checkpoints(folder)
    resume = complete[-1][1] if complete else None
    resumed = _check_record(resume / RUN_FILE, settings, fingerprints, same=same) if resume else {}
    if log is not None and (skipped := skipped_checkpoints(output, resume)):
        log(skipped)
    return PriorRun(resume=resume, resumed=resumed)


def finished_result(finished: dict, result_type: type, output: Path):
    """The result a finished run of ``output`` recorded, as ``result_type`` marked already finished; keys it lacks (a
    record of another version) are left out. One that is not a mapping holding each field this version's result
    needs, with steps a step count, is one line: it was a KeyError or TypeError traceback on every rerun."""
    path, result = output / CHECKPOINTS / FINISHED_FILE, finished.get("result")
    fields = {field.name: field for field in dataclasses.fields(result_type)}
    needed = [name for name, field in fields.items() if name != "output" and field.default is dataclasses.MISSING
              and field.default_factory is dataclasses.MISSING]
    lacking = [name for name in needed if not isinstance(result, dict) or name not in result]
    problem = ("its result is missing or not a mapping" if not isinstance(result, dict) else
               f"its result lacks {', '.join(lacking)}" if lacking else
               f"its steps is {result['steps']!r}" if not is_step_count(result["steps"]) else None)
    if problem:
        raise RetrieverError(f"{path}: not the result of a finished run of this version ({problem}); delete it to run "
                             f"{output} again")
    return result_type(**{**{k: v for k, v in result.items() if k in fields}, "output": output,
                          "already_finished": True})


def check_finished_model(output: Path) -> None:
    """A finished run's output still holds its model (config.json and weights, written before finished.json): a
    rerun said "already finished; nothing to do", exit 0, over a folder whose weights had been deleted."""
    gone = [name for name, found in (("config.json", (output / "config.json").is_file()),
                                     (WEIGHTS_FILE, any(output.glob("model*.safetensors")))) if not found]
    if gone:
        raise RetrieverError(f"{output}: this run finished, but its model files are gone (no {' or '.join(gone)}); "
                             f"delete {output / CHECKPOINTS / FINISHED_FILE} to train it again, or choose another "
                             "--output")


def is_step_count(value: object) -> bool:
    """A whole number of steps (a bool is no count, though Python makes it an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def note_precision(prior: PriorRun, precision: str, log: Callable[[str], None]) -> None:
    """Tell ``log`` in one line when the checkpoint ``prior`` resumes was trained in another precision than this
    resume computes in. A resume goes on, as a user who changed --dtype (or whose ``auto`` resolves otherwise on this
    machine) expects: the checkpoint holds fp32 weights and optimizer states either way; but its steps round otherwise
    than the uninterrupted run's, which it did without a word. Checkpoints that predate the record say nothing."""
    recorded = prior.resumed.get(PRECISION_KEY)
    if prior.resume is not None and recorded is not None and recorded != precision:
        log(f"note: {prior.resume.name} was trained in {recorded} and this run computes in {precision}: it continues "
            f"from the same weights, but its steps round otherwise, so its weights will not be those of an "
            f"uninterrupted run; resume with --dtype {recorded} to continue it as it was")


def skipped_checkpoints(output: Path, resume: Path | None) -> str | None:
    """One line naming the checkpoints newer than ``resume`` that a rerun skips for lacking their ``run.json`` (a run
    stopped while saving them), or None: skipping them is right, but silent, a user who expected a resume from one
    saw the run start over."""
    after = checkpoint_step(resume) if resume else -1
    skipped = sorted((int(match.group(1)), path.name) for path in (output / CHECKPOINTS).glob("checkpoint-*")
                     if (match := _CHECKPOINT_DIR.match(path.name)) and int(match.group(1)) > after
                     and not (path / RUN_FILE).is_file())
    if not skipped:
        return None
    return (f"note: skipping {', '.join(name for _, name in skipped)} in {output / CHECKPOINTS}: incomplete (no "
            f"{RUN_FILE}, which is written last: the run stopped while saving it); "
            + (f"resuming from {resume.name}" if resume else "starting from the beginning"))


def rotate_checkpoints(folder: Path, keep: int | None, best_step: int | None) -> None:
    """Delete the oldest complete checkpoints down to ``keep`` (None: keep all), never the newest nor the best
    (``best_step``), and what is left of older incomplete ones. Called once the newest is complete: Hugging Face's
    rotation runs before that, so a kill between the two could leave no complete checkpoint."""
    complete = complete_checkpoints(folder)
    if not complete or (keep or 0) < 1:
        return
    protected = {complete[-1][1]} | {path for step, path in complete if step == best_step}
    others = [path for _, path in complete if path not in protected]
    doomed = others[:max(0, len(complete) - max(keep, len(protected)))]
    doomed += [path for path in folder.glob("checkpoint-*") if (match := _CHECKPOINT_DIR.match(path.name))
               and int(match.group(1)) < complete[-1][0] and not (path / RUN_FILE).is_file()]
    for path in doomed:
        (path / RUN_FILE).unlink(missing_ok=True)  # incomplete at once, should the deletion be cut short
        shutil.rmtree(path, ignore_errors=True)


def checkpoint_step(checkpoint: Path | None) -> int | None:
    return int(checkpoint.name.split("-")[1]) if checkpoint else None


def resume_advice(checkpoint: Path, named: str | None = None) -> str:
    """What to do with a checkpoint that cannot be resumed: delete it (``named`` so, where a message has named it
    already) to resume from the complete one before it, or, with none, delete the checkpoints to start over (each
    lost file said otherwise, some to drop every checkpoint)."""
    folder, step = checkpoint.parent, checkpoint_step(checkpoint)
    earlier = [path.name for at, path in complete_checkpoints(folder) if at < step]
    return f"delete {named or checkpoint} to resume from {earlier[-1]}" if earlier else f"delete {folder} to start over"
