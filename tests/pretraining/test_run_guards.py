"""Pre-training refuses non-finite settings and an output it cannot make before tokenizing the corpus, stops at a
diverging loss, refuses to resume on a changed corpus, and survives kills around checkpoint rotation and at the
last step."""
from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import shutil
from pathlib import Path

import pytest

from pretraining.configs import checkpointed_config
from retriever.choices import COUNT_BOUNDS
from retriever.errors import RetrieverError
from retriever.pretraining import pretrain
from retriever.pretraining import trainer as pretraining_trainer
from retriever.training import run_record, stack

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HEAD = COUNT_BOUNDS["n_head_layers"].why


def quiet(message: str) -> None:
    pass


def nothing_loaded(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the model or corpus was loaded before the settings were refused")
    monkeypatch.setattr(pretraining_trainer, "load_condenser", refuse)
    monkeypatch.setattr(pretraining_trainer.TokenizedCorpus, "read", refuse)


@pytest.mark.parametrize("name, value", [("learning_rate", math.inf), ("learning_rate", math.nan),
                                         ("backbone_lr_scale", math.nan), ("temperature", math.nan),
                                         ("mlm_probability", math.nan), ("weight_decay", math.inf)])
def test_non_finite_settings_are_refused_before_loading(tiny_beir, tmp_path, monkeypatch, name, value):
    nothing_loaded(monkeypatch)
    with pytest.raises(RetrieverError, match=f"--{name.replace('_', '-')} is {value}; give a finite number"):
        pretrain(checkpointed_config(tiny_beir, tmp_path / "out", tmp_path / "any-model", **{name: value}), log=quiet)
    assert not (tmp_path / "out").exists()


def test_a_span_temperature_below_the_bound_is_refused_before_loading(tiny_beir, tmp_path, monkeypatch):
    nothing_loaded(monkeypatch)
    with pytest.raises(RetrieverError, match=r"--temperature 1e-45 is below 0\.0001.*give at least 0\.0001"):
        pretrain(checkpointed_config(tiny_beir, tmp_path / "out", tmp_path / "any-model", cocondenser=True, temperature=1e-45),
                 log=quiet)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("head", [{"n_head_layers": 2}, {"skip_from": 0}, {"skip_from": 1}])
def test_head_settings_with_the_mlm_objective_are_refused_before_loading(tiny_beir, tmp_path, monkeypatch, head):
    """--objective mlm has no Condenser head: --n-head-layers was refused but --skip-from was ignored, exit 0."""
    nothing_loaded(monkeypatch)
    with pytest.raises(RetrieverError, match=r"mlm has no head \(no --n-head-layers or --skip-from\)"):
        pretrain(checkpointed_config(tiny_beir, tmp_path / "out", tmp_path / "any-model", objective="mlm", **head), log=quiet)
    assert not (tmp_path / "out").exists()


def test_a_span_temperature_without_the_span_loss_is_refused_before_loading(tiny_beir, tmp_path, monkeypatch):
    """`--temperature 0.05` without --cocondenser trained plain Condenser, the temperature unused, exit 0."""
    nothing_loaded(monkeypatch)
    with pytest.raises(RetrieverError, match=r"^--temperature 0.05 is the --cocondenser span loss's, .* add "
                                             r"--cocondenser or drop --temperature$"):
        pretrain(checkpointed_config(tiny_beir, tmp_path / "out", tmp_path / "any-model", temperature=0.05), log=quiet)
    assert not (tmp_path / "out").exists()


def test_an_output_that_cannot_be_created_is_refused_before_tokenizing(tiny_beir, tmp_path, monkeypatch):
    nothing_loaded(monkeypatch)
    (tmp_path / "afile").write_text("a file")
    with pytest.raises(RetrieverError, match="cannot be created: .* is a file.*; choose another --output"):
        pretrain(checkpointed_config(tiny_beir, tmp_path / "afile" / "x", tmp_path / "any-model"), log=quiet)



def test_a_corpus_under_home_that_is_a_pipe_is_refused_by_name(tiny_model_dir, tmp_path, monkeypatch):
    """`~/c.jsonl` is read from the home folder (the config's paths are expanded), but the check that a data file is
    no pipe looked at the literal './~/c.jsonl', found nothing and let it through: a FIFO there blocked the run."""
    import os

    nothing_loaded(monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path))
    read, write = os.pipe()
    os.close(write)
    try:
        (tmp_path / "c.jsonl").symlink_to(f"/dev/fd/{read}")
        with pytest.raises(RetrieverError, match=f"^{tmp_path}/c.jsonl: is a pipe or a device, not a file"):
            pretrain(checkpointed_config("~/c.jsonl", tmp_path / "out", tiny_model_dir, corpus_format="jsonl"), log=quiet)
    finally:
        os.close(read)
    assert not (tmp_path / "out").exists()

def test_a_diverging_run_stops_and_writes_no_model(tiny_beir, tiny_model_dir, tmp_path):
    output = tmp_path / "out"
    with pytest.raises(RetrieverError, match="training diverged at step 2: its loss is nan"):
        pretrain(checkpointed_config(tiny_beir, output, tiny_model_dir, learning_rate=1e300, save_steps=None), log=quiet)
    assert not (output / "config.json").exists() and not (output / "model.pt").exists()


def test_a_resume_on_a_changed_corpus_is_refused(tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    settings = checkpointed_config(tiny_beir, tmp_path / "out", tiny_model_dir)
    with monkeypatch.context() as patch:
        patch.setattr(stack.StackTrainer, "finish", lambda self, write_model, result: None)  # as if killed
        pretrain(settings, log=quiet)
    corpus = tiny_beir / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + json.dumps({"_id": "d13", "title": "", "text": "one more"}) + "\n")
    with pytest.raises(RetrieverError, match="the training data or the start model changed"):
        pretrain(settings, log=quiet)


def test_a_kill_between_rotation_and_marker_leaves_a_complete_checkpoint(tiny_beir, tiny_model_dir, tmp_path,
                                                                         monkeypatch):
    """With --keep-checkpoints 1, killed after step 2's checkpoint was written but before it was marked complete:
    step 1's must still be there to resume from."""
    settings = checkpointed_config(tiny_beir, tmp_path / "out", tiny_model_dir, keep_checkpoints=1)
    real_write = stack.write_json

    def killed_at_step_2_marker(path, value, *args, **kwargs):
        if Path(path).name == run_record.RUN_FILE and Path(path).parent.name == "checkpoint-2":
            raise KeyboardInterrupt("killed")
        return real_write(path, value, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(stack, "write_json", killed_at_step_2_marker)
        with pytest.raises(KeyboardInterrupt):
            pretrain(settings, log=quiet)
    assert [step for step, _ in run_record.complete_checkpoints(tmp_path / "out" / "checkpoints")] == [1]
    assert pretrain(settings, log=quiet).resumed_from_step == 1


def test_resuming_from_the_last_steps_checkpoint_trains_no_extra_step(tiny_beir, tiny_model_dir, tmp_path,
                                                                      monkeypatch):
    settings = checkpointed_config(tiny_beir, tmp_path / "out", tiny_model_dir)
    with monkeypatch.context() as patch:
        patch.setattr(stack.StackTrainer, "finish", lambda self, write_model, result: None)  # killed writing the model
        killed = pretrain(settings, log=quiet)
    lines = []
    resumed = pretrain(settings, log=lines.append)
    assert resumed.resumed_from_step == 3 and resumed.steps == 3 and resumed.history == killed.history
    assert (tmp_path / "out" / "model.pt").is_file()
    # this rerun trained no step, so it measured no speed: it logged and recorded a false '0 tokens/s'
    assert resumed.tokens_per_second is None and killed.tokens_per_second > 0
    assert json.loads((tmp_path / "out" / "checkpoints" / "finished.json").read_text())["result"][
        "tokens_per_second"] is None
    wrote = [line for line in lines if line.startswith("wrote ")]
    assert len(wrote) == 1 and "tokens/s" not in wrote[0] and "no step left to train" in wrote[0], wrote
    assert pretrain(settings, log=quiet).already_finished


def test_pretraining_a_router_of_two_towers_is_refused_naming_them(tiny_beir, tmp_path, monkeypatch):
    """Pre-training continues one BERT, and a Router's root holds none: loading it failed calling the folder damaged."""
    pytest.importorskip("sentence_transformers")
    from test_st_router import saved_router

    folder = saved_router(tmp_path)
    nothing_loaded(monkeypatch)
    with pytest.raises(RetrieverError, match=r"st: a sentence-transformers Router of untied query and document towers "
                                             r"\(query_0_Transformer/ and document_0_Transformer/\), and pretrain "
                                             r"continues one transformer; pass one tower's folder, e.g. --model "
                                             r".*st/document_0_Transformer"):
        pretrain(checkpointed_config(tiny_beir, tmp_path / "out", folder), log=quiet)


def test_a_resume_in_another_precision_is_noted_and_an_edited_tokenizer_refused(tiny_beir, tiny_model_dir, tmp_path,
                                                                                monkeypatch, capfd):
    """Neither was recorded: a resume in bf16 of an fp32 run, or after the start model's tokenizer changed, went on
    without a word."""
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "bert"))
    settings = checkpointed_config(tiny_beir, tmp_path / "out", model)
    with monkeypatch.context() as patch:
        patch.setattr(stack.StackTrainer, "finish", lambda self, write_model, result: None)  # as if killed
        pretrain(settings, log=quiet)
    shutil.rmtree(tmp_path / "out" / "checkpoints" / "checkpoint-3")
    capfd.readouterr()
    assert pretrain(dataclasses.replace(settings, dtype="bf16"), log=quiet).resumed_from_step == 2
    assert "note: checkpoint-2 was trained in fp32 and this run computes in bf16" in capfd.readouterr().err
    (model / "tokenizer_config.json").write_text(json.dumps({**json.loads((model / "tokenizer_config.json").read_text()),
                                                             "do_lower_case": False}))
    with pytest.raises(RetrieverError, match="the start model's tokenizer or config files changed"):
        pretrain(settings, log=quiet)  # a finished run is no "nothing to do" with another tokenizer either


def test_an_empty_start_model_is_refused_not_read_as_the_current_folder(tiny_beir, tiny_model_dir, tmp_path,
                                                                        monkeypatch):
    """`pretrain --model "$UNSET"` pre-trained the model in the current folder: its path was resolved from "" first."""
    monkeypatch.chdir(tiny_model_dir)
    nothing_loaded(monkeypatch)
    with pytest.raises(RetrieverError, match="^the model name is empty"):
        pretrain(checkpointed_config(tiny_beir, tmp_path / "out", ""), log=quiet)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, value, said", [
    ("n_head_layers", "2", f"--n-head-layers must be a whole number from 1 to 12 ({HEAD}), not '2'"),
    ("n_head_layers", 0, f"--n-head-layers must be a whole number from 1 to 12 ({HEAD}), not 0"),
    ("max_length", "16", "--max-length must be a whole number of at least 8, not '16'"),  # it said at least 1
    ("max_length", 7, "--max-length must be a whole number of at least 8, not 7"),
    ("keep_checkpoints", 0, "--keep-checkpoints must be a whole number of at least 1, not 0"),
    ("skip_from", "1", "--skip-from must be a whole number of at least 0 (0: the embeddings), not '1'"),
    ("freeze_backbone_steps", 1.5, "--freeze-backbone-steps must be a whole number of at least 0, not 1.5"),
    ("cocondenser", "yes", "cocondenser must be True or False, not str 'yes'")])
def test_pretrain_settings_of_the_wrong_kind_are_refused_before_loading(tiny_beir, tmp_path, monkeypatch, name,
                                                                          value, said):
    """PretrainConfig's own settings, as the shared ones are (check_setting_kinds): n_head_layers='2' and
    max_length='16' were TypeError tracebacks (skip_from='1' once the model loaded), freeze_backbone_steps=1.5 and
    cocondenser='yes' trained, keep_checkpoints=0 kept every checkpoint, n_head_layers=0 built the default head."""
    nothing_loaded(monkeypatch)
    with pytest.raises(RetrieverError) as caught:
        pretrain(checkpointed_config(tiny_beir, tmp_path / "out", tmp_path / "model", **{name: value}), log=quiet)
    assert str(caught.value) == said
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_the_file_system_refuses_mid_run_is_one_line_and_a_rerun_resumes(tiny_beir, tiny_model_dir,
                                                                                     tmp_path, monkeypatch):
    """The output made read-only while pre-training ran: the checkpoint save died of a PermissionError traceback."""
    output = tmp_path / "out"
    settings = checkpointed_config(tiny_beir, output, tiny_model_dir)
    real_makedirs = os.makedirs

    def makedirs(path, *args, **kwargs):
        if Path(path).name == "checkpoint-2":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_makedirs(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "makedirs", makedirs)
        with pytest.raises(RetrieverError, match=rf"^cannot write {output}/checkpoints/checkpoint-2: permission "
                                                 rf"denied; make {output} writable and rerun the same command$"):
            pretrain(settings, log=quiet)
    assert pretrain(settings, log=quiet).resumed_from_step == 1
