"""`retriever train` and `retriever mine` from the command line (invoked on the command objects, which the
lead registers in the `retriever` group)."""
from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from fixtures_corpora import write_jsonl
from retriever.cli import main
from retriever.cli.training import COMMANDS, mine_command, train_command
from retriever.errors import RetrieverError
from retriever.training import TrainConfig, train

CPU = ["--device", "cpu", "--dtype", "fp32"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_every_flag_is_documented_with_its_default(command):
    context = click.Context(command, show_default=True)
    for param in command.params:
        if isinstance(param, click.Option):
            _, text = param.get_help_record(context)
            assert len(param.help or "") > 10, param.opts
            if not param.required and not param.is_flag:
                assert "default:" in text, f"{param.opts} does not say its default: {text}"
    result = CliRunner().invoke(command, ["--help"])
    assert result.exit_code == 0 and command.help


def test_mine_then_train_with_hard_negatives_then_build_and_evaluate(tmp_path, tiny_model_dir, tiny_beir):
    (tiny_beir / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td6\t1\nq2\td4\t1\nq3\td10\t1\n", encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(main, ["build", str(tiny_beir), "--output", str(tmp_path / "zero-shot"),
                                  "--model", str(tiny_model_dir), *CPU])
    assert result.exit_code == 0, result.output
    negatives = tmp_path / "negatives.jsonl"
    result = runner.invoke(mine_command, [str(tmp_path / "zero-shot"), "--dataset", str(tiny_beir), "--output",
                                          str(negatives), "--depth", "8", "--skip-top", "1", "--per-query", "4",
                                          *CPU], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [len(json.loads(line)["negatives"]) for line in negatives.read_text().splitlines()] == [4, 4, 4]
    model = tmp_path / "trained"
    result = runner.invoke(train_command, [
        "--dataset", str(tiny_beir), "--negatives", str(negatives), "--model", str(tiny_model_dir),
        "--output", str(model), "--towers", "untied", "--train-group-size", "3", "--queries-per-step", "3",
        "--grad-cache-chunk-size", "4", "--epochs", "2", "--learning-rate", "1e-3", "--dev-split", "test",
        "--passage-max-length", "32", "--json", *CPU], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["steps"] == 2 and set(summary["dev"]) == {"ndcg@10", "recall@100"}
    recorded = json.loads((model / "retriever.json").read_text())
    assert recorded["towers"] == "untied" and recorded["passage_max_length"] == 32
    assert recorded["training"]["train_group_size"] == 3
    assert recorded["training"]["negatives"] == negatives.name  # absolute paths are recorded as names
    index = tmp_path / "fine-tuned"
    assert runner.invoke(main, ["build", str(tiny_beir), "--output", str(index), "--model", str(model),
                                *CPU]).exit_code == 0
    result = runner.invoke(main, ["evaluate", "--index", str(index), "--dataset", str(tiny_beir), "-k", "100",
                                  "--metrics", "ndcg@10,recall@100", "--output", str(tmp_path / "m.json"), *CPU])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "m.json").read_text())["mean"] == pytest.approx(summary["dev"], abs=1e-6)


def test_train_from_jsonl_with_a_corpus(tmp_path, tiny_model_dir, tiny_beir):
    data = write_jsonl(tmp_path / "train.jsonl", [{"query": "honey bee", "positives": ["d6"], "negatives": ["d1"]},
                                                  {"query": "lava", "positives": ["d4"]}])
    result = CliRunner().invoke(train_command, [
        "--train-jsonl", str(data), "--corpus", str(tiny_beir), "--model", str(tiny_model_dir), "--output",
        str(tmp_path / "m"), "--pooling", "cls", "--no-normalize", "--max-steps", "2", "--batch-size", "2",
        "--train-group-size", "2", *CPU], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    recorded = json.loads((tmp_path / "m" / "retriever.json").read_text())
    assert recorded["pooling"] == "cls" and recorded["normalize"] is False
    assert recorded["training"]["temperature"] == 1.0 and recorded["training"]["steps"] == 2


@pytest.mark.parametrize("arguments, message", [
    (["--train-jsonl", "{jsonl}", "--dataset", "{beir}"], "either --dataset"),
    (["--dataset", "{beir}", "--corpus", "{beir}"], "--corpus resolves document ids"),
    (["--train-jsonl", "{jsonl}", "--dev-split", "test"], "--dev-split needs"),
    # without --dev-split these were ignored: no dev evaluation, the last weights kept, exit 0
    (["--dataset", "{beir}", "--dev-dataset", "{beir}"], "--dev-dataset and --dev-max-docs go with --dev-split"),
    (["--dataset", "{beir}", "--dev-max-docs", "5"], "--dev-dataset and --dev-max-docs go with --dev-split"),
    (["--dataset", "{beir}", "--dev-split", ""], "--dev-split is empty"),  # "$DEV" unset: no dev evaluation, exit 0
    (["--train-jsonl", "{jsonl}", "--negatives", "{jsonl}"], "--negatives goes with --dataset"),
    (["--dataset", "{beir}", "--format", "tsv"], "describe --corpus, which is not given"),
    (["--dataset", "{beir}", "--queries-per-step", "1"], "a training step holds one query and one passage"),
    (["--dataset", "{beir}", "--queries-per-step", "3", "--world-size", "2"],
     "--queries-per-step 3 does not split over 2 processes: it must be a multiple of 2; use 2 or 4"),
])
def test_conflicting_data_flags_are_refused(tmp_path, tiny_beir, monkeypatch, arguments, message):
    """A bad flag combination is a usage error (exit 2, one line, the --help pointer), as the README says, before
    anything is read; these exited 1 as if a run had failed (a step that does not split over torchrun's processes
    only once the model and data had loaded). The library raises the same line."""
    jsonl = write_jsonl(tmp_path / "t.jsonl", [{"query": "q", "positives": ["p"]}])
    arguments = [a.format(jsonl=jsonl, beir=tiny_beir) for a in arguments]
    if "--world-size" in arguments:  # as torchrun tells its processes
        monkeypatch.setenv("WORLD_SIZE", arguments.pop(arguments.index("--world-size") + 1))
        arguments.remove("--world-size")
    result = CliRunner().invoke(main, ["train", *arguments, "--output", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.output.startswith("error: ") and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.rstrip().endswith("train --help`)")
    assert not (tmp_path / "out").exists()
    flags = {"--train-jsonl": "train_jsonl", "--dataset": "dataset", "--corpus": "corpus", "--dev-split": "dev_split",
             "--dev-dataset": "dev_dataset", "--dev-max-docs": "dev_max_docs", "--negatives": "negatives",
             "--format": "corpus_format", "--queries-per-step": "batch_size"}
    settings = {flags[flag]: int(value) if value.isdigit() else value
                for flag, value in zip(arguments[::2], arguments[1::2])}
    with pytest.raises(RetrieverError) as refused:
        train(TrainConfig(output=str(tmp_path / "out"), **settings))
    assert f"error: {refused.value} (see" in result.output


def test_report_to_tensorboard_logs_loss_learning_rate_speed_and_dev_metrics(tmp_path, tiny_model_dir, tiny_beir):
    pytest.importorskip("tensorboard", reason="--report-to tensorboard needs the optional tensorboard package")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    output = tmp_path / "m"
    result = CliRunner().invoke(train_command, [
        "--dataset", str(tiny_beir), "--split", "test", "--model", str(tiny_model_dir), "--output", str(output),
        "--max-steps", "2", "--queries-per-step", "2", "--dev-split", "test", "--report-to", "tensorboard", *CPU],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    events = EventAccumulator(str(output / "tensorboard"))
    events.Reload()
    assert {"train/loss", "train/learning_rate", "train/examples_per_second", "eval/ndcg@10"} <= \
        set(events.Tags()["scalars"])


@pytest.mark.parametrize("flags, shown", [([], True), (["--no-progress"], False)])
def test_train_takes_no_progress_like_pretrain(tmp_path, tiny_beir, monkeypatch, flags, shown):
    from types import SimpleNamespace

    import retriever.training
    from retriever.cli.pretrain import pretrain_command

    seen = []
    monkeypatch.setattr(retriever.training, "train", lambda config: seen.append(config) or SimpleNamespace(
        output=tmp_path / "m", steps=0, best_step=None, dev_scores=None, start_model_better=None, seconds=0.0))
    result = CliRunner().invoke(train_command, ["--dataset", str(tiny_beir), "--output", str(tmp_path / "m"),
                                                *flags], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert seen[0].progress is shown
    options = {command.name: next(p for p in command.params if p.name == "progress")
               for command in (train_command, pretrain_command)}
    assert options["train"].to_info_dict() == options["pretrain"].to_info_dict()


@pytest.mark.parametrize("flag, value", [("--learning-rate", "nan"), ("--learning-rate", "inf"),
                                         ("--temperature", "nan"), ("--weight-decay", "nan"),
                                         ("--weight-decay", "inf"), ("--warmup-ratio", "nan"),
                                         ("--max-grad-norm", "nan")])
def test_non_finite_numbers_are_refused_at_parse_time(tmp_path, tiny_beir, flag, value):
    """click's FloatRange lets nan (and inf, without an upper bound) through; either trained a NaN model."""
    output = tmp_path / "out"
    result = CliRunner().invoke(main, ["train", "--dataset", str(tiny_beir), "--output", str(output), flag, value])
    assert result.exit_code == 2 and f"Invalid value for '{flag}': '{value}' is not a finite number." in result.output
    assert not output.exists()


def test_an_output_that_cannot_be_created_is_one_line(tmp_path, tiny_beir, tiny_model_dir):
    (tmp_path / "afile").write_text("a file")  # a model that exists: a missing one is refused as the flags are read
    result = CliRunner().invoke(main, ["train", "--dataset", str(tiny_beir), "--output", str(tmp_path / "afile" / "x"),
                                       "--model", str(tiny_model_dir), *CPU])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert "cannot be created" in result.output and "choose another --output" in result.output


def test_mine_takes_the_model_of_an_index_that_moved_away_from_it(tmp_path, tiny_model_dir, tiny_beir):
    """The moved index's error said to pass --model, which mine did not have."""
    import shutil

    (tiny_beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td6\t1\n", encoding="utf-8")
    model = tmp_path / "project" / "model"
    shutil.copytree(tiny_model_dir, model)
    index = tmp_path / "project" / "idx"
    assert CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(model),
                                     *CPU]).exit_code == 0
    model.rename(tmp_path / "model-elsewhere")
    mine = ["mine", str(index), "--dataset", str(tiny_beir), "-o", str(tmp_path / "neg.jsonl"), *CPU]
    result = CliRunner().invoke(main, mine)
    assert result.exit_code == 1 and "moved away from its model" in result.stderr
    result = CliRunner().invoke(main, [*mine, "--model", str(tmp_path / "model-elsewhere")])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "neg.jsonl").read_text().count("\n") == 1


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize("value", ["1e-45", "0.00005", "-1"])
def test_a_temperature_too_low_to_train_is_refused_at_parse_time(tmp_path, tiny_beir, command, value):
    """`--temperature 1e-45` was taken, then training diverged (1/τ is inf in fp32) with advice to lower
    --learning-rate; the line now names the flag, the value, the bound and what to give."""
    data = ["--dataset", str(tiny_beir)] if command == "train" else [str(tiny_beir)]
    output = tmp_path / "out"
    result = CliRunner().invoke(main, [command, *data, "--output", str(output), "--temperature", value,
                                       "--model", str(tmp_path / "no-model")])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert line.count("\n") == 0 and f"--temperature {float(value):g} is below 0.0001" in line, line
    assert "give at least 0.0001" in line and not output.exists()


@pytest.mark.parametrize("value", ["0.0001", "0.001", "0.01"])
def test_temperatures_in_use_are_taken(tmp_path, tiny_beir, monkeypatch, value):
    from types import SimpleNamespace

    import retriever.training

    seen = []
    monkeypatch.setattr(retriever.training, "train", lambda config: seen.append(config) or SimpleNamespace(
        output=tmp_path / "m", steps=0, best_step=None, dev_scores=None, start_model_better=None, seconds=0.0))
    result = CliRunner().invoke(train_command, ["--dataset", str(tiny_beir), "--output", str(tmp_path / "m"),
                                                "--temperature", value], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert seen[0].temperature == float(value)


def test_mine_into_the_datasets_qrels_folder_is_one_line(tmp_path, tiny_beir):
    output = tiny_beir / "qrels" / "negs.tsv"
    result = CliRunner().invoke(main, ["mine", str(tmp_path), "--dataset", str(tiny_beir), "--split", "test",
                                       "-o", str(output)])
    assert result.exit_code == 2 and result.output.startswith(f"error: {output}: ") and result.output.count("\n") == 1
    assert not output.exists()  # a bad -o is a usage error, as search's and evaluate's (exit 1 until round 14)


def test_epochs_with_max_steps_is_refused_before_any_work(tmp_path, tiny_beir, tiny_model_dir):
    """HF's max_steps overrides num_train_epochs, so `--epochs 3 --max-steps 5` trained 5 steps and ignored
    --epochs without a word; refused (as `pretrain` refuses it), before any model loads."""
    result = CliRunner().invoke(train_command, ["--dataset", str(tiny_beir), "--output", str(tmp_path / "out"),
                                                "--model", str(tiny_model_dir), "--epochs", "3",
                                                "--max-steps", "5"])
    assert result.exit_code == 2, result.output
    assert "--epochs" in result.output and "--max-steps" in result.output and "one of them" in result.output
    assert not (tmp_path / "out").exists()


def test_the_train_summary_says_whether_the_start_model_was_better_on_dev(tmp_path, tiny_beir, monkeypatch):
    """The run record held start_model_better, but the JSON line train prints (what scripts read) did not."""
    from types import SimpleNamespace

    import retriever.training

    monkeypatch.setattr(retriever.training, "train", lambda config: SimpleNamespace(
        output=tmp_path / "m", steps=4, best_step=2, dev_scores={"ndcg@10": 0.3}, start_model_better=True,
        seconds=1.0))
    result = CliRunner().invoke(train_command, ["--dataset", str(tiny_beir), "--output", str(tmp_path / "m"),
                                                "--dev-split", "test", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["start_model_better"] is True and summary["best_step"] == 2


@pytest.mark.parametrize("command, keys", [("train", {"model", "steps", "best_step", "dev", "start_model_better",
                                                      "seconds"}),
                                           ("pretrain", {"model", "steps", "resumed_from_step", "loss_start",
                                                         "loss_end", "tokens_per_second", "seconds"})])
def test_train_and_pretrain_print_on_stdout_only_with_json(tmp_path, tiny_beir, monkeypatch, command, keys):
    """They printed a JSON line on stdout on every run, where `build`, `index`, `encode` and `bm25` print nothing
    there unless --json (their summary line is on stderr)."""
    from types import SimpleNamespace

    import retriever.pretraining
    import retriever.training

    done = SimpleNamespace(output=tmp_path / "m", steps=3, best_step=None, dev_scores=None, start_model_better=None,
                           seconds=1.0, history=[{"loss": 2.0}, {"loss": 1.5}], resumed_from_step=None,
                           tokens_per_second=10.0)
    monkeypatch.setattr(retriever.training, "train", lambda config: done)
    monkeypatch.setattr(retriever.pretraining, "pretrain", lambda config: done)
    data = ["--dataset", str(tiny_beir)] if command == "train" else [str(tiny_beir)]
    quiet = CliRunner().invoke(main, [command, *data, "--output", str(tmp_path / "m")], catch_exceptions=False)
    assert quiet.exit_code == 0 and quiet.stdout == "", quiet.output
    loud = CliRunner().invoke(main, [command, *data, "--output", str(tmp_path / "m"), "--json"],
                              catch_exceptions=False)
    assert loud.exit_code == 0, loud.output
    summary = json.loads(loud.stdout)
    assert set(summary) == keys and summary["model"] == str(tmp_path / "m") and summary["steps"] == 3


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize("flags, seconds", [([], 1800), (["--ddp-timeout", "120"], 120)])
def test_ddp_timeout_is_a_flag_of_train_and_pretrain(tmp_path, tiny_beir, monkeypatch, command, flags, seconds):
    """A torchrun process stopped (not dead) held the others for torch's 30 minutes, and nothing could change it."""
    from types import SimpleNamespace

    import retriever.pretraining
    import retriever.training

    seen = []
    done = SimpleNamespace(output=tmp_path / "m", steps=0, best_step=None, dev_scores=None, start_model_better=None,
                           seconds=0.0, history=[], resumed_from_step=None, tokens_per_second=0.0)
    monkeypatch.setattr(retriever.training, "train", lambda config: seen.append(config) or done)
    monkeypatch.setattr(retriever.pretraining, "pretrain", lambda config: seen.append(config) or done)
    data = ["--dataset", str(tiny_beir)] if command == "train" else [str(tiny_beir)]
    result = CliRunner().invoke(main, [command, *data, "--output", str(tmp_path / "m"), *flags],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert seen[0].ddp_timeout == seconds
    refused = CliRunner().invoke(main, [command, *data, "--output", str(tmp_path / "m"), "--ddp-timeout", "0"])
    assert refused.exit_code == 2 and "--ddp-timeout" in refused.output


def test_mine_counts_one_left_out_query_in_the_singular(tmp_path, tiny_beir, monkeypatch):
    """It said "1 judged queries left out" and "1 judged only non-relevant left out"."""
    import retriever.training
    from retriever.training.mining import MiningResult

    monkeypatch.setattr(retriever.training, "mine_negatives", lambda *args, **kwargs: MiningResult(
        negatives=4, queries=2, output=tmp_path / "n.jsonl", queries_without_negatives=0, queries_left_out=1,
        queries_without_positives=1, seconds=1.0))
    (tmp_path / "index").mkdir()
    result = CliRunner().invoke(mine_command, [str(tmp_path / "index"), "--dataset", str(tiny_beir), "-o",
                                               str(tmp_path / "n.jsonl")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert ("; 1 judged query left out, not in queries.jsonl; 1 query judged only non-relevant left out, with no "
            "positive to train on") in result.stderr


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize("name, said", [("-", "'-' is not standard output here"), ("", "the name is empty"),
                                        (" ", "the name is empty")])
def test_an_output_named_dash_or_nothing_is_a_usage_error(tmp_path, tiny_beir, monkeypatch, command, name, said):
    """`-o -` trained into a folder named '-', and `-o ''` (an unset variable) into the working folder, as `build`
    did before it took OutputFolder."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    data = ["--dataset", str(tiny_beir)] if command == "train" else [str(tiny_beir)]
    result = CliRunner().invoke(main, [command, *data, "--output", name])
    assert result.exit_code == 2 and said in result.output, result.output
    assert not any(work.iterdir())


def test_mine_per_query_above_what_depth_leaves_is_a_usage_error(tmp_path):
    """It quietly wrote fewer negatives than asked; the bound is checked as the flags are read."""
    result = CliRunner().invoke(main, ["mine", str(tmp_path), "--dataset", str(tmp_path), "-o", str(tmp_path / "n"),
                                       "--depth", "10", "--skip-top", "2", "--per-query", "9"])
    assert result.exit_code == 2 and "--per-query 9 is more than the 8 ranks --depth 10 leaves after --skip-top 2" \
        in result.output, result.output
    assert not (tmp_path / "n").exists()
