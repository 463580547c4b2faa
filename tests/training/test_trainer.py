"""The training loop: loss falls, dev scores match the index pipeline, and a killed run resumes from its last
checkpoint to the same weights."""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fixtures_training import contrastive_batch_loss, plant_pickles
from retriever.corpus import BeirDataset
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError
from retriever.evaluation import evaluate_index
from retriever.indexing import encode_and_index
from retriever.searching import Searcher
from retriever.training import TrainConfig, stack, train
from retriever.training.data import Collator, epoch_groups, load_beir_examples
from retriever.training.dual_encoder import DualEncoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def config(output: Path, dataset: Path, model: Path, **overrides) -> TrainConfig:
    values = dict(output=str(output), dataset=str(dataset), model=str(model), batch_size=4, learning_rate=1e-3,
                  device="cpu", dtype="fp32", progress=False,
                  encoder={"passage_max_length": 32, "query_max_length": 16})
    return TrainConfig(**{**values, **overrides})


def dataset_loss(model: DualEncoder, dataset: Path) -> float:
    examples = load_beir_examples(dataset, "train")
    batch = Collator(model.tokenizer, model.settings)(epoch_groups(examples, 0, seed=0, group_size=1))
    model.eval()
    with torch.no_grad():
        return contrastive_batch_loss(*model(query=batch["query"], passage=batch["passage"]), batch).item()


def test_loss_falls_and_dev_scores_match_the_index_pipeline(tmp_path, small_bert, train_beir):
    before = dataset_loss(DualEncoder.from_pretrained(str(small_bert), passage_max_length=32), train_beir)
    output = tmp_path / "model"
    result = train(config(output, train_beir, small_bert, epochs=6, dev_split="test"))
    after = dataset_loss(DualEncoder.from_pretrained(str(output)), train_beir)
    assert after < 0.7 * before, (before, after)
    assert result.steps == 12 and [h["epoch"] for h in result.history] == list(range(7))
    assert result.best_step == max((h for h in result.history[1:]), key=lambda h: h["ndcg@10"])["step"]
    recorded = json.loads((output / "retriever.json").read_text())
    assert recorded["training"]["steps"] == 12 and recorded["training"]["dev"]["best_step"] == result.best_step
    assert [p.name for p in (output / "checkpoints").iterdir()] == ["finished.json"]
    # the saved folder through encode -> flat index -> evaluate gives the dev scores recorded for it
    encoder = Encoder(EncoderSettings.for_model(str(output)), device="cpu", dtype="fp32")
    encode_and_index(train_beir, tmp_path / "index", encoder, progress=False)
    report, _ = evaluate_index(Searcher(tmp_path / "index", device="cpu", dtype="fp32"), BeirDataset.open(train_beir),
                               "test", k=100, metrics=("ndcg@10", "recall@100"), progress=False)
    assert report.evaluation.mean == pytest.approx(result.dev_scores, abs=1e-6)


RESUMABLE_RUN = """
import json, sys
from retriever.training import TrainConfig, train
result = train(TrainConfig(**json.loads(sys.argv[1])))
print(json.dumps(result.to_json()))
"""


def latest_step(output: Path) -> int:
    steps = [int(p.parent.name.split("-")[1]) for p in (output / "checkpoints").glob("checkpoint-*/run.json")]
    return max(steps, default=0)


def test_killed_run_resumes_from_its_last_checkpoint(tmp_path, small_bert, train_beir, capsys):
    output = tmp_path / "model"
    settings = config(output, train_beir, small_bert, epochs=20, batch_size=2, save_steps=4, warmup_ratio=0.2)
    arguments = [sys.executable, "-c", RESUMABLE_RUN, json.dumps(dataclasses.asdict(settings))]
    killed = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 60
    while latest_step(output) < 8 and killed.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    killed_at = latest_step(output)
    assert killed_at >= 8 and not (output / "config.json").exists()
    resumed = train(settings)  # the same call again, here in-process
    assert resumed.resumed_from_step == killed_at and resumed.steps == 80
    assert f"checkpoint-{killed_at} (step {killed_at})" in capsys.readouterr().err
    # an uninterrupted run of the same settings ends with the same weights
    uninterrupted = train(TrainConfig(**{**dataclasses.asdict(settings), "output": str(tmp_path / "straight")}))
    assert uninterrupted.steps == 80 and uninterrupted.resumed_from_step is None
    resumed_model = DualEncoder.from_pretrained(str(output))
    straight_model = DualEncoder.from_pretrained(str(tmp_path / "straight"))
    for (name, a), (_, b) in zip(resumed_model.query_model.state_dict().items(),
                                 straight_model.query_model.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    # rerunning a finished run does nothing; other settings in the same folder are refused
    again = train(settings)
    assert again.already_finished and again.steps == 80
    with pytest.raises(RetrieverError, match="other settings"):
        train(TrainConfig(**{**dataclasses.asdict(settings), "learning_rate": 5e-4}))


def test_planted_pickles_in_a_checkpoint_never_run(tmp_path, small_bert, train_beir, monkeypatch):
    """A checkpoint whose files would run code when unpickled: never loaded unsafely, whatever run.json says."""
    output = tmp_path / "model"
    settings = config(output, train_beir, small_bert, max_steps=3, save_steps=1)
    monkeypatch.setattr(stack.StackTrainer, "finish", lambda self, write_model, result: write_model())  # as if killed
    train(settings)
    shutil.rmtree(output / "checkpoints" / "checkpoint-3")  # killed before step 3: resuming loads step 2's states
    checkpoint = output / "checkpoints" / "checkpoint-2"
    marker = plant_pickles(checkpoint, tmp_path / "marker")
    with pytest.raises(RetrieverError, match="not plain tensors"):
        train(settings)
    assert not marker.exists()
    (checkpoint / "run.json").write_text("{}")  # a record that compares equal to nothing
    with pytest.raises(RetrieverError, match="not a run of this command"):
        train(settings)
    assert not marker.exists()


def test_model_folder_names_no_path_of_this_machine(tmp_path, small_bert, train_beir):
    output = tmp_path / "model"
    settings = config(output, train_beir, small_bert, max_steps=2, save_steps=1)
    train(settings)
    machine_paths = [str(p.resolve()) for p in (output, small_bert, train_beir)]
    for path in output.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".md", ".txt"):
            text = path.read_text(encoding="utf-8")
            assert not [p for p in machine_paths if p in text], path
    assert train(settings).already_finished  # the relative record still matches its own run


def dev_split_of(train_beir: Path, name: str, from_split: str) -> str:
    """A split named ``name`` judging the first two queries of ``from_split``."""
    lines = (train_beir / "qrels" / f"{from_split}.tsv").read_text().splitlines(keepends=True)
    (train_beir / "qrels" / f"{name}.tsv").write_text("".join(lines[:3]))
    return name


def test_dev_evaluation_draws_no_bar_under_no_progress(tmp_path, small_bert, train_beir, capsys):
    """`train --no-progress --dev-split dev` drew a `dev encode` bar at every evaluation all the same."""
    train(config(tmp_path / "model", train_beir, small_bert, max_steps=2, dev_split=dev_split_of(train_beir, "dev",
                                                                                                   "test")))
    err = capsys.readouterr().err
    assert "dev encode" not in err and "\r" not in err and "before training: ndcg@10" in err, err


def test_a_dev_split_holding_training_queries_under_another_name_is_warned_about(tmp_path, small_bert, train_beir,
                                                                                 capsys):
    """Only a dev split named as the training split was warned about: `--dev-split dev` judging training queries
    picked the weights kept by their fit, without a word."""
    train(config(tmp_path / "held-out", train_beir, small_bert, max_steps=2,
                 dev_split=dev_split_of(train_beir, "dev", "test")))
    assert "training queries too" not in capsys.readouterr().err
    train(config(tmp_path / "overlap", train_beir, small_bert, max_steps=2,
                 dev_split=dev_split_of(train_beir, "devover", "train")))
    assert "warning: 2 of the 2 dev queries (e.g. 'q0') are training queries too" in capsys.readouterr().err


def test_the_passages_a_step_holds_are_those_the_queries_can_bring(tmp_path, small_bert, train_beir, capsys):
    """`--train-group-size 50` with two hard negatives a query said `4 x 50 passages` a step; each step held 4 x 3."""
    negatives = tmp_path / "negatives.jsonl"
    negatives.write_text("".join(json.dumps({"query_id": f"q{i}", "negatives": ["d9", "d10"]}) + "\n"
                                 for i in range(8)))
    train(config(tmp_path / "model", train_beir, small_bert, max_steps=2, negatives=str(negatives),
                 train_group_size=50))
    assert "2 steps of 4 x 3 passages over 1 process," in capsys.readouterr().err


def test_the_queries_a_step_holds_are_those_the_data_has(tmp_path, small_bert, train_beir, capsys):
    """8 training queries at `--queries-per-step 32` said `1 epochs of 32 x 1 passages`; the one step held 8."""
    train(config(tmp_path / "model", train_beir, small_bert, batch_size=32))
    assert "1 epoch of 8 x 1 passages over 1 process," in capsys.readouterr().err


def test_a_start_model_better_on_dev_than_every_trained_step_is_said_and_recorded(tmp_path, small_bert, train_beir,
                                                                                capsys):
    """The start model is evaluated on dev before training, but only trained steps competed to be kept: a run whose
    every step scored worse than it (here a learning rate that wrecks the weights) kept its best trained step
    without a word, and the user shipped a model worse than the one they started from."""
    result = train(config(tmp_path / "worse", train_beir, small_bert, epochs=2, learning_rate=10.0, dev_split="test"))
    start, *trained = [h["ndcg@10"] for h in result.history]
    assert result.history[0]["step"] == 0 and trained and start > max(trained)  # the situation, not assumed
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"warning: no trained step beat the start model on dev beir/test (ndcg@10 {start:.4f} before "
                       f"training, {max(trained):.4f} at step {result.best_step}, the weights kept); the start model "
                       f"{small_bert} is better there: use it, or retrain with a lower --learning-rate")
    recorded = json.loads((tmp_path / "worse" / "retriever.json").read_text())["training"]["dev"]
    assert recorded["start_model_better"] is True and result.start_model_better is True
    train(config(tmp_path / "better", train_beir, small_bert, epochs=2, dev_split="test"))
    assert "no trained step beat" not in capsys.readouterr().err
    recorded = json.loads((tmp_path / "better" / "retriever.json").read_text())["training"]["dev"]
    assert recorded["start_model_better"] is False


class SafetensorError(Exception):
    """As safetensors' own: not an OSError, the errno only in its text."""


@pytest.mark.parametrize("failure", [
    RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 43968 vs 43856"),  # torch.save's
    SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
])
def test_a_disk_filling_while_a_checkpoint_is_saved_is_one_line_and_a_rerun_resumes(tmp_path, small_bert, train_beir,
                                                                                     monkeypatch, failure):
    """torch.save's short write (a RuntimeError naming no errno) or safetensors' error on a full disk: tracebacks."""
    output = tmp_path / "model"
    settings = config(output, train_beir, small_bert, max_steps=4, save_steps=2)
    real_save = torch.save

    def save(state, path, *args, **kwargs):
        if "checkpoint-4" in str(path):
            raise failure
        return real_save(state, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(RetrieverError) as caught:
        train(settings)
    assert str(caught.value).startswith(f"no space left on the device writing {output}; free some space")
    monkeypatch.setattr(torch, "save", real_save)
    result = train(settings)
    assert (result.steps, result.resumed_from_step) == (4, 2)


@pytest.mark.parametrize("refusal", [(errno.EACCES, "Permission denied"), (errno.EROFS, "Read-only file system")])
def test_a_checkpoint_the_file_system_refuses_mid_run_is_one_line_and_a_rerun_resumes(tmp_path, small_bert, train_beir,
                                                                                     monkeypatch, refusal):
    """The output made read-only, or its mount remounted read-only after disk errors, while the run trained: the
    Trainer's checkpoint save died of a PermissionError traceback."""
    output = tmp_path / "model"
    settings = config(output, train_beir, small_bert, max_steps=4, save_steps=2)
    real_makedirs = os.makedirs

    def makedirs(path, *args, **kwargs):
        if "checkpoint-4" in str(path):
            raise OSError(*refusal, str(path))
        return real_makedirs(path, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", makedirs)
    with pytest.raises(RetrieverError) as caught:
        train(settings)
    assert str(caught.value) == (f"cannot write {output}/checkpoints/checkpoint-4: {refusal[1].lower()}; make {output} "
                                 "writable and rerun the same command")
    monkeypatch.setattr(os, "makedirs", real_makedirs)
    result = train(settings)
    assert (result.steps, result.resumed_from_step) == (4, 2)


@pytest.mark.parametrize("split", ["test", "heldout"])
def test_a_dev_split_that_is_test_under_another_name_is_warned_about(tmp_path, small_bert, train_beir, capsys, split):
    """`--dev-split test` warned that selecting checkpoints on it leaks it, but a split whose qrels file is test's
    under another name (a link) selected on the reported queries without a word, where `--split` now warns."""
    from retriever.training.trainer import _load_dev

    (train_beir / "qrels" / "heldout.tsv").symlink_to(train_beir / "qrels" / "test.tsv")
    _load_dev(config(tmp_path / "model", train_beir, small_bert, dev_split=split), [])
    assert (f"warning: selecting checkpoints on the {split!r} split, whose queries results are reported on, tunes the "
            "model on them") in capsys.readouterr().err
    _load_dev(config(tmp_path / "model", train_beir, small_bert, dev_split=dev_split_of(train_beir, "dev", "test")), [])
    assert "warning" not in capsys.readouterr().err



def test_one_training_query_and_one_dev_query_are_said_in_the_singular(tmp_path, small_bert, train_beir, capsys):
    """The log said "on 1 queries: 1 steps of ..." and "dev set ...: 1 queries"."""
    header, first = (train_beir / "qrels" / "test.tsv").read_text().splitlines(keepends=True)[:2]
    (train_beir / "qrels" / "onedev.tsv").write_text(header + first)
    lines = tmp_path / "one.jsonl"
    lines.write_text(json.dumps({"query": "cat", "positives": ["a cat sat"], "negatives": ["a dog ran"]}) + "\n")
    settings = config(tmp_path / "model", train_beir, small_bert, train_jsonl=str(lines), train_group_size=2,
                      max_steps=1, dev_split="onedev", dev_dataset=str(train_beir))
    train(dataclasses.replace(settings, dataset=None))
    err = capsys.readouterr().err
    assert ") on 1 query: 1 step of 1 x 2 passages over 1 process, cpu" in err, err
    assert f"dev set {train_beir.name}/onedev: 1 query, " in err and "model (1 step, " in err, err
