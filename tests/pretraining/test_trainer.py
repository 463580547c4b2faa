"""The pre-training loop: learning, exact resume from checkpoints, and refusing mismatched reruns."""
from __future__ import annotations

import json
import re
import shutil

import pytest
from transformers import AutoModel

from fixtures_training import plant_pickles
from pretraining.configs import config
from retriever.errors import RetrieverError
from retriever.pretraining import PretrainConfig, pretrain
from retriever.training import stack

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCES = ["the cat sat on the old mat by the fire", "a dog ran to the river with a ball",
             "the bee makes honey from a flower", "lava from the volcano is hot rock"]


def quiet(message: str) -> None:
    pass


@pytest.fixture()
def repeated_corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    rows = [{"_id": f"d{i}", "title": "", "text": SENTENCES[i % len(SENTENCES)]} for i in range(40)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_loss_falls_on_a_tiny_corpus(repeated_corpus, tiny_model_dir, tmp_path):
    result = pretrain(config(repeated_corpus, tmp_path / "out", tiny_model_dir, max_steps=50), log=quiet)
    losses = [record["loss"] for record in result.history]
    assert all(r["loss"] == pytest.approx(r["head_mlm"] + r["backbone_mlm"], rel=1e-5) for r in result.history)
    assert result.steps == 50 and len(losses) == 50
    assert sum(losses[-5:]) / 5 < 0.75 * sum(losses[:5]) / 5, losses
    assert all(record["head_mlm"] > 0 and record["backbone_mlm"] > 0 for record in result.history)
    assert result.tokens_per_second > 0
    assert type(AutoModel.from_pretrained(result.output)).__name__ == "BertModel"
    assert (result.output / "model.pt").is_file() and (result.output / "condenser.json").is_file()
    assert (result.output / "tokenizer.json").is_file()


def test_resume_continues_exactly_where_the_checkpoint_left_off(tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    output = tmp_path / "out"
    settings = config(tiny_beir, output, tiny_model_dir, max_steps=6, save_steps=2, batch_size=4)
    monkeypatch.setattr(stack.StackTrainer, "finish", lambda self, write_model, result: write_model())  # as if killed
    straight = pretrain(settings, log=quiet)
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == ["checkpoint-4", "checkpoint-6"]
    shutil.rmtree(output / "checkpoints" / "checkpoint-6")  # as if killed after step 5
    resumed = pretrain(settings, log=quiet)
    assert resumed.resumed_from_step == 4 and resumed.steps == 6
    assert resumed.history == straight.history  # same batches, masks and dropout: bit-identical losses
    monkeypatch.undo()
    pretrain(settings, log=quiet)  # ends the run: finished.json, checkpoints dropped
    again = pretrain(settings, log=quiet)
    assert again.already_finished and again.steps == 6
    assert [p.name for p in (output / "checkpoints").iterdir()] == ["finished.json"]


def test_planted_pickles_in_a_checkpoint_never_run(tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    output = tmp_path / "out"
    settings = config(tiny_beir, output, tiny_model_dir, max_steps=3, save_steps=1, batch_size=4)
    monkeypatch.setattr(stack.StackTrainer, "finish", lambda self, write_model, result: write_model())
    pretrain(settings, log=quiet)
    shutil.rmtree(output / "checkpoints" / "checkpoint-3")  # killed before step 3: resuming loads step 2's states
    checkpoint = output / "checkpoints" / "checkpoint-2"
    marker = plant_pickles(checkpoint, tmp_path / "marker")
    with pytest.raises(RetrieverError, match="not plain tensors"):
        pretrain(settings, log=quiet)
    (checkpoint / "run.json").write_text("{}")
    with pytest.raises(RetrieverError, match="not a run of this command"):
        pretrain(settings, log=quiet)
    plant_pickles(output, marker)  # the written Condenser folder, its model.pt head included, as a warm start
    with pytest.raises(RetrieverError, match="cannot read the Condenser head"):
        pretrain(config(tiny_beir, tmp_path / "other", output, max_steps=1), log=quiet)
    assert not marker.exists()


def test_epochs_size_the_run_and_cocondenser_adds_a_finite_span_loss(tiny_beir, tiny_model_dir, tmp_path):
    result = pretrain(config(tiny_beir, tmp_path / "out", tiny_model_dir, epochs=2, cocondenser=True), log=quiet)
    assert result.steps == 6  # 12 documents, 4 per step (8 sequences = 2 spans each), 2 epochs
    for record in result.history:
        assert 0 < record["span"] < 100
        assert record["loss"] == pytest.approx(record["head_mlm"] + record["backbone_mlm"] + record["span"],
                                               rel=1e-5)


def test_an_epochs_last_step_of_one_span_passage_is_left_out(tiny_beir, tiny_model_dir, tmp_path):
    """5 passages in steps of 4 left each epoch a last step of one passage, whose spans could pick only each other:
    span loss 0.0 at that step, logged among the others (and as the run's last loss), and the step counted."""
    corpus = tmp_path / "five.jsonl"
    corpus.write_text("".join((tiny_beir / "corpus.jsonl").read_text().splitlines(keepends=True)[:5]))
    said = []
    result = pretrain(config(corpus, tmp_path / "out", tiny_model_dir, epochs=2, cocondenser=True), log=said.append)
    assert result.steps == 2 and all(record["span"] > 0.01 for record in result.history), result.history
    assert "the last step of each epoch would hold one passage (5 in steps of 4)" in "\n".join(said), said


def test_rerun_with_other_settings_is_refused(tiny_beir, tiny_model_dir, tmp_path):
    output = tmp_path / "out"
    pretrain(config(tiny_beir, output, tiny_model_dir, max_steps=1), log=quiet)
    with pytest.raises(RetrieverError, match="max_length 32 -> 64"):
        pretrain(config(tiny_beir, output, tiny_model_dir, max_steps=2, max_length=64), log=quiet)


def test_output_must_not_be_an_unrelated_folder(tiny_beir, tiny_model_dir, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's file")
    with pytest.raises(RetrieverError, match="holds no training run"):
        pretrain(config(tiny_beir, tmp_path / "mine", tiny_model_dir, max_steps=1), log=quiet)
    assert [path.name for path in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def test_the_sequences_a_step_holds_are_those_the_corpus_has(tmp_path, tiny_model_dir):
    """A corpus of 2 blocks at `--sequences-per-step 32` said `steps of 32 sequences`; each step held 2."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n" for i, text in enumerate(SENTENCES)))
    lines = []
    pretrain(config(corpus, tmp_path / "out", tiny_model_dir, batch_size=32, max_steps=1, warmup_ratio=0),
             log=lines.append)
    blocks = re.search(r"(\d+) blocks, 1 step of (\d+) sequences", "\n".join(lines))  # it said "1 steps of"
    assert blocks and blocks[1] == blocks[2] and int(blocks[1]) < 32, lines
    assert any(line.startswith(f"wrote {tmp_path / 'out'}: 1 step, loss ") for line in lines), lines
    assert any(" tokens over 1 process, " in line for line in lines), lines  # it said "over 1 process(es)"


def test_max_steps_overrides_epochs_as_in_train(tmp_path):
    """`pretrain` took the lesser of --max-steps and --epochs while `train` (HF's TrainingArguments) lets max steps
    override epochs; both follow HF now, so 50 steps over a corpus of 2 steps an epoch are 50 steps."""
    from retriever.pretraining.trainer import run_steps

    settings = dict(corpus=str(tmp_path / "corpus.jsonl"), output=str(tmp_path / "out"))
    assert run_steps(PretrainConfig(**settings, epochs=1, max_steps=50), 10, 5, quiet) == 50
    assert run_steps(PretrainConfig(**settings, epochs=3), 10, 5, quiet) == 6
    assert run_steps(PretrainConfig(**settings), 10, 5, quiet) == 2
