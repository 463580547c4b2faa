"""What a training run refuses or stops on rather than train nothing, train NaN, or mix two runs: non-finite
settings, a diverging loss, an output that cannot be made, changed inputs on resume, steps with a single candidate;
and what a kill at the wrong moment must not cost (checkpoint rotation, the last step's checkpoint)."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fixtures_corpora import write_jsonl
from fixtures_models import make_tiny_bert
from fixtures_training import plant_pickles
from retriever.errors import RetrieverError
from retriever.training import TrainConfig, checkpoint_state, run_record, stack, train
from retriever.training.dual_encoder import DualEncoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def config(output: Path, dataset: Path | None, model: Path, **overrides) -> TrainConfig:
    values = dict(output=str(output), dataset=str(dataset) if dataset else None, model=str(model), batch_size=4,
                  learning_rate=1e-3, device="cpu", dtype="fp32", progress=False, warmup_ratio=0.0,
                  encoder={"passage_max_length": 32, "query_max_length": 16})
    return TrainConfig(**{**values, **overrides})


def as_if_killed_before_finishing(monkeypatch) -> None:
    """The run trains and checkpoints, then dies before it writes its model folder."""
    monkeypatch.setattr(stack.StackTrainer, "finish", lambda self, write_model, result: None)


class Killed(Exception):
    pass


def killed_after_checkpoint(monkeypatch, step: int) -> None:
    """The run dies once the checkpoint of ``step`` is complete."""
    save = stack.StackTrainer._save_checkpoint

    def save_then_die(self, model, trial):
        save(self, model, trial)
        if self.state.global_step == step:
            raise Killed
    monkeypatch.setattr(stack.StackTrainer, "_save_checkpoint", save_then_die)


def never_loaded(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the settings were refused")
    monkeypatch.setattr(DualEncoder, "from_pretrained", refuse)


@pytest.mark.parametrize("name, value", [("learning_rate", math.nan), ("learning_rate", math.inf),
                                         ("temperature", math.nan), ("weight_decay", math.nan),
                                         ("weight_decay", math.inf), ("warmup_ratio", math.nan),
                                         ("max_grad_norm", math.nan)])
def test_non_finite_settings_are_refused_before_loading(tmp_path, train_beir, monkeypatch, name, value):
    never_loaded(monkeypatch)
    output = tmp_path / "model"
    with pytest.raises(RetrieverError, match=f"--{name.replace('_', '-')} is {value}; give a finite number"):
        train(config(output, train_beir, tmp_path / "any-model", **{name: value}))
    assert not output.exists()


def test_a_temperature_below_the_bound_is_refused_before_loading(tmp_path, train_beir, monkeypatch):
    """The library took τ = 1e-45 and diverged at step 1 (1/τ is inf in fp32)."""
    never_loaded(monkeypatch)
    output = tmp_path / "model"
    with pytest.raises(RetrieverError, match=r"--temperature 1e-45 is below 0\.0001.*give at least 0\.0001"):
        train(config(output, train_beir, tmp_path / "any-model", temperature=1e-45))
    assert not output.exists()


@pytest.mark.parametrize("setting", [{"corpus_format": "tsv"}, {"corpus_fields": {"id": "doc", "text": "text",
                                                                                 "title": "title"}}])
def test_corpus_reading_settings_without_a_corpus_are_refused(tmp_path, train_beir, monkeypatch, setting):
    """`train --dataset D --format tsv --id-field doc` trained, the flags (which describe --corpus) ignored."""
    never_loaded(monkeypatch)
    with pytest.raises(RetrieverError, match=r"^--format, --id-field, --text-field and --title-field describe "
                                             r"--corpus, which is not given; drop them or add --corpus$"):
        train(config(tmp_path / "model", train_beir, tmp_path / "any-model", **setting))
    assert not (tmp_path / "model").exists()


def test_an_output_that_cannot_be_created_is_refused_before_loading(tmp_path, train_beir, monkeypatch):
    never_loaded(monkeypatch)
    (tmp_path / "afile").write_text("a file")
    with pytest.raises(RetrieverError, match="afile/x: cannot be created: .* is a file.*; choose another --output"):
        train(config(tmp_path / "afile" / "x", train_beir, tmp_path / "any-model"))


def killed_run(tmp_path: Path, dataset: Path, model: Path, monkeypatch, **overrides) -> TrainConfig:
    """A run of 3 steps killed before writing its model, with checkpoint-3 gone: a rerun resumes from step 2."""
    settings = config(tmp_path / "model", dataset, model, max_steps=3, save_steps=1, **overrides)
    with monkeypatch.context() as patch:
        as_if_killed_before_finishing(patch)
        train(settings)
    shutil.rmtree(tmp_path / "model" / "checkpoints" / "checkpoint-3")
    return settings


def test_a_resume_on_changed_training_data_is_refused(tmp_path, small_bert, train_beir, monkeypatch):
    settings = killed_run(tmp_path, train_beir, small_bert, monkeypatch)
    qrels = train_beir / "qrels" / "train.tsv"
    original = qrels.read_text()
    qrels.write_text("".join(original.splitlines(keepends=True)[:-2]))  # two training queries fewer
    with pytest.raises(RetrieverError, match="the training data or the start model changed since the run in"):
        train(settings)
    qrels.write_text(original)
    result = train(settings)
    assert result.resumed_from_step == 2 and result.steps == 3
    (train_beir / "queries.jsonl").write_text((train_beir / "queries.jsonl").read_text().replace("cats", "kats"))
    with pytest.raises(RetrieverError, match="changed since the run in .*checkpoints; rerun with the same data"):
        train(settings)  # a finished run is not "nothing to do" on other data either


def test_encoder_settings_not_given_compare_equal_whether_left_out_or_none(tmp_path, small_bert, train_beir,
                                                                         monkeypatch):
    """The CLI passes every encoder flag (None when not given), the library only those set: a run started from one
    was refused as "other settings" when resumed or rerun from the other."""
    settings = killed_run(tmp_path, train_beir, small_bert, monkeypatch)  # encoder: only the two max lengths
    as_cli = dataclasses.replace(settings, encoder={"pooling": None, "normalize": None, "towers": None,
                                                    "query_prefix": None, **settings.encoder})
    assert train(as_cli).resumed_from_step == 2
    assert train(settings).already_finished
    with pytest.raises(RetrieverError, match="other settings .*'pooling': 'cls'"):
        train(dataclasses.replace(as_cli, encoder={**as_cli.encoder, "pooling": "cls"}))


@pytest.mark.parametrize("recorded, given", [("left", "model's"), ("model's", "left")])
def test_an_encoder_setting_given_at_the_models_own_value_is_the_same_run(tmp_path, small_bert, train_beir, recorded,
                                                                          given):
    """`train --pooling mean --normalize` resuming a run that left them to the model (which pools by mean and
    normalises), or the other way round, was refused as "other settings" (encoder {…} -> {'pooling': 'mean', …}):
    the same training, its checkpoints lost."""
    from retriever.training.trainer import TrainResult

    flags = {"left": {}, "model's": {"pooling": "mean", "normalize": True, "towers": "shared", "query_prefix": ""}}
    started, resumed = (config(tmp_path / "model", train_beir, small_bert, max_steps=3,
                               encoder={"passage_max_length": 32, **flags[which]}) for which in (recorded, given))
    checkpoint = tmp_path / "model" / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "run.json").write_text(json.dumps({**started.normalised().learning_settings(),
                                                     **started.normalised().fingerprints}))
    assert resumed.prepare(TrainResult)[1].resume == checkpoint
    with pytest.raises(RetrieverError, match="other settings .*'pooling': 'cls'"):
        dataclasses.replace(resumed, encoder={**resumed.encoder, "pooling": "cls"}).prepare(TrainResult)

@pytest.mark.parametrize("edited", ["train_jsonl", "corpus"])
def test_a_resume_on_changed_jsonl_examples_or_corpus_is_refused(tmp_path, small_bert, train_beir, monkeypatch,
                                                                  edited):
    """The tester's case: a killed `train --train-jsonl edit.jsonl` rerun after the file was shortened resumed."""
    lines = [{"query": f"query {i}", "positives": [f"d{i}"]} for i in range(1, 9)]
    files = {"train_jsonl": write_jsonl(tmp_path / "edit.jsonl", lines), "corpus": tmp_path / "corpus.jsonl"}
    shutil.copy(train_beir / "corpus.jsonl", files["corpus"])
    settings = killed_run(tmp_path, None, small_bert, monkeypatch, train_jsonl=str(files["train_jsonl"]),
                          corpus=str(files["corpus"]))
    text = files[edited].read_text()
    files[edited].write_text(text[:text.rindex("{")])  # its last line gone
    with pytest.raises(RetrieverError, match="the training data or the start model changed"):
        train(settings)


def test_another_folder_of_the_same_name_is_other_data(tmp_path, small_bert, train_beir, monkeypatch):
    """The settings record names, not paths (the model folder moves), so only the content tells the two apart."""
    settings = killed_run(tmp_path, train_beir, small_bert, monkeypatch)
    other = tmp_path / "elsewhere" / train_beir.name
    shutil.copytree(train_beir, other)
    write_jsonl(other / "corpus.jsonl", [{"_id": f"d{i}", "title": "", "text": f"other text {i}"}
                                         for i in range(1, 13)])
    with pytest.raises(RetrieverError, match="the training data or the start model changed"):
        train(dataclasses.replace(settings, dataset=str(other)))


def test_a_resume_from_another_start_model_of_the_same_path_is_refused(tmp_path, train_beir, monkeypatch):
    model = make_tiny_bert(tmp_path / "bert", layers=1)
    settings = killed_run(tmp_path, train_beir, model, monkeypatch)
    make_tiny_bert(model, layers=1, seed=7)  # same folder, same config, other weights
    with pytest.raises(RetrieverError, match="the training data or the start model changed"):
        train(settings)


@pytest.mark.parametrize("dropped", [run_record.BESIDE_SETTINGS, (run_record.MODEL_FILES_KEY,)])
def test_records_without_a_fingerprint_still_resume(tmp_path, train_beir, monkeypatch, capfd, dropped):
    """Checkpoints and finished runs recorded before a fingerprint (or the precision) existed resume as before,
    unchecked on what they lack: an edited tokenizer, another --dtype."""
    model = make_tiny_bert(tmp_path / "bert", layers=1)
    settings = killed_run(tmp_path, train_beir, model, monkeypatch)
    marker = tmp_path / "model" / "checkpoints" / "checkpoint-2" / "run.json"
    record = json.loads(marker.read_text())
    assert set(record) - set(settings.learning_settings()) == set(run_record.BESIDE_SETTINGS)
    marker.write_text(json.dumps({key: value for key, value in record.items() if key not in dropped}))
    (model / "tokenizer_config.json").write_text((model / "tokenizer_config.json").read_text() + "\n")
    capfd.readouterr()
    assert train(dataclasses.replace(settings, dtype="bf16")).resumed_from_step == 2
    assert ("was trained in fp32" in capfd.readouterr().err) == (run_record.PRECISION_KEY not in dropped)
    finished = tmp_path / "model" / "checkpoints" / "finished.json"
    record = json.loads(finished.read_text())
    record["settings"] = {key: value for key, value in record["settings"].items() if key not in dropped}
    finished.write_text(json.dumps(record))
    assert train(settings).already_finished


@pytest.mark.parametrize("edit", ["tokenizer_config.json", "config.json", "tokenizer.json"])
def test_a_resume_after_the_start_models_tokenizer_or_config_changed_is_refused(tmp_path, train_beir, monkeypatch,
                                                                               edit):
    """They shape the token ids and the model as much as the weights do; only the weights were fingerprinted, so a
    resume after an edit (lowercasing turned off, a word renamed, a dropout changed) trained on with exit 0."""
    model = make_tiny_bert(tmp_path / "bert", layers=1)
    settings = killed_run(tmp_path, train_beir, model, monkeypatch)
    path = model / edit
    if edit == "tokenizer.json":  # a word of its vocabulary renamed
        path.write_text(path.read_text().replace('"cat":', '"kat":', 1))
    else:
        text = json.loads(path.read_text())
        path.write_text(json.dumps({**text, "do_lower_case": False} if edit.startswith("tok") else
                                   {**text, "hidden_dropout_prob": 0.5}))
    with pytest.raises(RetrieverError, match="the start model's tokenizer or config files changed since the run in"):
        train(settings)


def test_a_resume_in_another_precision_continues_with_one_line_saying_so(tmp_path, small_bert, train_beir,
                                                                        monkeypatch, capfd):
    """The checkpoint recorded no precision, so a resume with another --dtype (or an ``auto`` that resolves otherwise
    on another machine) trained on in it without a word, to other weights than the uninterrupted run's."""
    settings = killed_run(tmp_path, train_beir, small_bert, monkeypatch)  # fp32
    capfd.readouterr()
    assert train(dataclasses.replace(settings, dtype="bf16")).resumed_from_step == 2
    err = capfd.readouterr().err
    assert ("note: checkpoint-2 was trained in fp32 and this run computes in bf16: it continues from the same "
            "weights") in err and "resume with --dtype fp32 to continue it as it was\n" in err
    (tmp_path / "again").mkdir()
    settings = killed_run(tmp_path / "again", train_beir, small_bert, monkeypatch)
    capfd.readouterr()
    assert train(settings).resumed_from_step == 2
    assert "was trained in" not in capfd.readouterr().err


def test_a_checkpoint_without_its_run_record_is_skipped_with_one_line_naming_it(tmp_path, small_bert, train_beir,
                                                                             monkeypatch, capfd):
    """It was skipped in silence: a user who expected a resume from it saw the run go on from an older one, or start
    over, without a word."""
    settings = killed_run(tmp_path, train_beir, small_bert, monkeypatch)
    checkpoints = tmp_path / "model" / "checkpoints"
    shutil.copytree(checkpoints / "checkpoint-2", checkpoints / "checkpoint-3")
    (checkpoints / "checkpoint-3" / run_record.RUN_FILE).unlink()  # killed while saving it
    capfd.readouterr()
    assert train(settings).resumed_from_step == 2
    assert (f"note: skipping checkpoint-3 in {checkpoints}: incomplete (no run.json, which is written last: the run "
            "stopped while saving it); resuming from checkpoint-2\n") in capfd.readouterr().err
    (tmp_path / "other" / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    assert run_record.skipped_checkpoints(tmp_path / "other", None).endswith("; starting from the beginning")


@pytest.mark.parametrize("saved, process, processes, read", [
    (["rng_state.pth"], 0, 1, ("rng_state.pth",)), ([], 0, 1, ("rng_state.pth",)),
    (["rng_state_0.pth", "rng_state_1.pth"], 1, 2, ("rng_state_1.pth",)),
    (["rng_state_0.pth"], 1, 2, ("rng_state_1.pth",)),  # a missing one of this process count's
    (["rng_state_0.pth", "rng_state_1.pth"], 0, 1, ()), (["rng_state.pth"], 1, 2, ())])  # another count's
def test_each_process_reads_its_own_rng_state_unless_another_process_count_saved_them(tmp_path, saved, process,
                                                                                       processes, read):
    """Another count's files are read by no process, and the resume says so in one line (the library said it at info
    level, so a resumed run drew other dropout masks than an uninterrupted one without a word)."""
    for name in saved:
        (tmp_path / name).write_bytes(b"")
    told = []
    assert checkpoint_state.rng_states_read(str(tmp_path), process, processes, told.append) == read
    if read:
        assert told == []
    else:
        by = "1 process" if len(saved) == 1 else f"{len(saved)} processes"  # it said "1 process(es)"
        assert len(told) == 1 and told[0].startswith(f"note: {tmp_path.name} was saved by {by} "
                                                     f"and this run has {processes}: it continues with the same data "
                                                     "order but other random draws"), told


def test_the_fingerprint_samples_large_files(tmp_path, monkeypatch):
    monkeypatch.setattr(run_record, "WHOLE_FILE", 100)
    monkeypatch.setattr(run_record, "SAMPLES", 4)
    monkeypatch.setattr(run_record, "BLOCK", 10)
    path = tmp_path / "large"
    path.write_bytes(bytes(1000))
    before = run_record.file_fingerprint(path)
    path.write_bytes(bytes(999) + b"x")  # the last block is sampled
    assert run_record.file_fingerprint(path) != before
    path.write_bytes(bytes(1001))  # a line more or less changes the size
    assert run_record.file_fingerprint(path) != before
    path.write_bytes(bytes(500) + b"x" + bytes(499))  # between samples: the documented blind spot
    assert run_record.file_fingerprint(path) == before


def test_a_single_training_example_is_refused(tmp_path, small_bert):
    data = write_jsonl(tmp_path / "one.jsonl", [{"query": "honey bee", "positives": ["the bee makes honey"]}])
    settings = TrainConfig(output=str(tmp_path / "model"), train_jsonl=str(data), model=str(small_bert), device="cpu",
                           dtype="fp32", progress=False, batch_size=4)
    with pytest.raises(RetrieverError, match="one query and one passage"):
        train(settings)
    assert not (tmp_path / "model").exists()


def test_rotation_keeps_the_newest_and_the_best_complete_checkpoints(tmp_path):
    for step, complete in ((1, True), (2, True), (3, False), (4, True), (5, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / run_record.RUN_FILE).write_text("{}")
    run_record.rotate_checkpoints(tmp_path, keep=2, best_step=1)
    # 2 goes (over the limit), 3 is left over from a kill, 5 may be the one being written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1", "checkpoint-4", "checkpoint-5"]


def test_resuming_from_the_last_steps_checkpoint_trains_no_extra_step(tmp_path, small_bert, train_beir,
                                                                      monkeypatch):
    """Killed while writing the model: the checkpoint of the last step is the result, and its pickled states are
    not even read."""
    output = tmp_path / "model"
    settings = config(output, train_beir, small_bert, max_steps=3, save_steps=1)
    with monkeypatch.context() as patch:
        as_if_killed_before_finishing(patch)
        killed = train(settings)
    final = load_file(output / "checkpoints" / "checkpoint-3" / "model.safetensors")
    marker = plant_pickles(output / "checkpoints" / "checkpoint-3", tmp_path / "marker")
    resumed = train(settings)
    assert resumed.resumed_from_step == 3 and resumed.steps == 3 and resumed.losses == killed.losses
    assert len(resumed.losses) == 3 and not marker.exists()
    recorded = json.loads((output / "retriever.json").read_text())["training"]
    assert (recorded["steps"], recorded["max_steps"], recorded["epochs"], recorded["epochs_completed"]) == (3, 3, None,
                                                                                                           1)
    written = DualEncoder.from_pretrained(str(output)).query_model.state_dict()
    for name, tensor in final.items():
        torch.testing.assert_close(written[name.removeprefix("query_model.")], tensor, msg=name)


DAMAGES = {"deleted": lambda path: path.unlink(), "truncated": lambda path: path.write_bytes(path.read_bytes()[:100]),
           "emptied": lambda path: path.write_bytes(b""),
           "another state": lambda path: shutil.copy(path.with_name("scheduler.pt"), path)}


@pytest.mark.parametrize("name, damage", [("optimizer.pt", "deleted"), ("scheduler.pt", "deleted"),
                                          ("rng_state.pth", "deleted"), ("optimizer.pt", "truncated"),
                                          ("optimizer.pt", "emptied"), ("scheduler.pt", "truncated"),
                                          ("rng_state.pth", "emptied"), ("optimizer.pt", "another state")])
def test_a_checkpoint_state_deleted_or_damaged_stops_the_resume_with_one_line(tmp_path, small_bert, train_beir,
                                                                             monkeypatch, name, damage):
    """The library skipped a missing optimizer, scheduler or RNG file without a word (fresh AdamW moments, warm-up
    again, other dropout draws: other weights, exit 0), and a damaged one was a torch traceback ("Aborted!" from the
    CLI for an empty one). Deleting the damaged checkpoint, as the error says, resumes from the one before it."""
    output = tmp_path / "model"
    settings = config(output, train_beir, small_bert, max_steps=4, save_steps=1)
    with monkeypatch.context() as patch:
        killed_after_checkpoint(patch, 3)
        with pytest.raises(Killed):
            train(settings)
    checkpoint = output / "checkpoints" / "checkpoint-3"
    DAMAGES[damage](checkpoint / name)
    expected = f"{name} missing" if damage == "deleted" else "unreadable"
    with pytest.raises(RetrieverError, match=f"checkpoint-3: .*{expected}.*; delete it to resume from checkpoint-2$"):
        train(settings)
    shutil.rmtree(checkpoint)
    assert train(settings).resumed_from_step == 2


def test_an_epochs_last_step_with_a_lone_query_and_no_other_candidate_is_dropped(tmp_path, small_bert, train_beir,
                                                                                 capfd):
    """8 training queries in steps of 7 left a last step of one query and its positive: loss 0, an optimizer step
    on nothing. The epoch's order is shuffled, so a different query sits out each epoch."""
    result = train(config(tmp_path / "model", train_beir, small_bert, batch_size=7, epochs=2))
    assert result.steps == 2 and all(loss > 0 for loss in result.losses)
    assert "the last step of each epoch would hold one query" in capfd.readouterr().err
    kept = train(config(tmp_path / "kept", train_beir, small_bert, batch_size=6, epochs=1))  # a last step of 2
    assert kept.steps == 2 and all(loss > 0 for loss in kept.losses)


def test_a_second_train_of_the_same_output_is_refused_while_one_runs(tmp_path, small_bert, train_beir):
    """Two runs of one output resumed from each other's live checkpoints and rotated them away under each other."""
    from retriever.folders import exclusive_build, named_output
    output = tmp_path / "model"
    with exclusive_build(named_output(output.resolve())):  # what a running `train` of it holds
        with pytest.raises(RetrieverError, match=r"another training run of it is running \(pid \d+\)"):
            train(config(output, train_beir, small_bert, epochs=1))
    assert not output.exists()


def test_train_output_inside_the_start_model_and_a_piped_data_file_are_refused(tmp_path, small_bert, train_beir,
                                                                               monkeypatch):
    """An output inside the start model joined its fingerprint (a rerun said "the start model changed"); a pipe
    resolved to /proc/PID/fd/pipe:[N] and was "no such file"."""
    never_loaded(monkeypatch)
    model = shutil.copytree(small_bert, tmp_path / "start")
    with pytest.raises(RetrieverError, match="is inside the start model's folder"):
        train(config(model / "fine-tuned", train_beir, model))
    read, write = os.pipe()
    try:
        with pytest.raises(RetrieverError, match=f"/dev/fd/{read}: is a pipe or a device, not a file"):
            train(config(tmp_path / "out", None, small_bert, train_jsonl=f"/dev/fd/{read}",
                         corpus=str(train_beir / "corpus.jsonl")))
    finally:
        os.close(read)
        os.close(write)
    assert not (model / "fine-tuned").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("before, steps, checkpoints, said", [(1, 5, [4, 5, 8], "every 5 steps"),
                                                             (2, 0, [4, 8], "only at each epoch's end")])
def test_a_resume_with_another_save_steps_checkpoints_at_the_new_interval(tmp_path, small_bert, train_beir,
                                                                           monkeypatch, capfd, before, steps,
                                                                           checkpoints, said):
    """The library kept the checkpoint's interval (every ``before`` steps here) and printed its own multi-line
    warning; a change to --save-steps 0 was not said. From 2, not 1: a checkpoint of 1 may be one of 0 written
    before 0 was passed as 0 (``adopt_save_steps``)."""
    settings = config(tmp_path / "model", train_beir, small_bert, batch_size=2, epochs=2, save_steps=before)
    with monkeypatch.context() as patch:
        killed_after_checkpoint(patch, before)
        with pytest.raises(Killed):
            train(settings)
    saved = []
    save = stack.StackTrainer._save_checkpoint
    monkeypatch.setattr(stack.StackTrainer, "_save_checkpoint",
                        lambda self, model, trial: (saved.append(self.state.global_step), save(self, model, trial)))
    capfd.readouterr()
    result = train(dataclasses.replace(settings, save_steps=steps))
    assert result.resumed_from_step == before and saved == checkpoints  # each epoch's end, and every --save-steps
    err = capfd.readouterr().err
    assert "do not match" not in err and f"--save-steps changed: checkpoints {said} from now on" in err, err


def test_a_step_ending_an_epoch_is_checkpointed_once(tmp_path, small_bert, train_beir, monkeypatch):
    """The step's save (--save-steps, or the run's last step) and the epoch's end each wrote the same checkpoint."""
    saved = []
    save = stack.StackTrainer._save_checkpoint
    monkeypatch.setattr(stack.StackTrainer, "_save_checkpoint",
                        lambda self, model, trial: (saved.append(self.state.global_step), save(self, model, trial)))
    train(config(tmp_path / "model", train_beir, small_bert, batch_size=2, epochs=2, save_steps=2))
    assert saved == [2, 4, 6, 8]


def test_a_resume_in_gradcache_chunks_goes_on_with_a_note(tmp_path, small_bert, train_beir, monkeypatch, capfd):
    """--grad-cache-chunk-size changes the memory a step takes, not its gradients: it is how a run that ran out of
    memory goes on, and such a resume was refused as a run with other settings, its checkpoints lost."""
    settings = killed_run(tmp_path, train_beir, small_bert, monkeypatch)
    capfd.readouterr()
    assert train(dataclasses.replace(settings, grad_cache_chunk_size=2)).resumed_from_step == 2
    assert ("note: checkpoint-2 was trained without GradCache and this run trains in GradCache chunks of 2: the same "
            "gradients from the same weights, but other dropout draws") in capfd.readouterr().err
    assert train(settings).already_finished  # the finished run, whatever the chunking
