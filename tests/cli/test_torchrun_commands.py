"""Under torchrun only the commands that share their work over its processes run; any other ran whole in each."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from retriever.cli import main

REFUSAL = ("error: `encode` does not run under torchrun, whose 2 processes would each run all of it; run it without "
           "torchrun (only train and pretrain share their work over processes; encode and build split it with "
           "--worker-index and --num-workers, or --ray)")


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_command_that_does_not_share_its_work_is_refused_in_every_process(monkeypatch, tmp_path, rank):
    """`torchrun --nproc_per_node 2 -m retriever encode` ran two copies of the encode into one folder: the one the
    folder's lock refused failed the launch (silently on rank 1), and torchrun killed the copy that was encoding."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("LOCAL_RANK", rank)
    monkeypatch.setattr("retriever.cli.UNHEARD_WAIT_SECONDS", 0)  # rank 1 waits for torchrun to stop it
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a cat"}\n')
    result = CliRunner().invoke(main, ["encode", str(corpus), "--output", str(tmp_path / "shards")])
    assert result.exit_code == 2  # in every process, before anything is read or written
    assert result.output.strip().splitlines() == ([REFUSAL] if rank == "0" else [])  # printed once a machine
    assert not (tmp_path / "shards").exists()


def test_the_training_commands_still_run_under_torchrun(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for command in ("train", "pretrain"):
        result = CliRunner().invoke(main, [command, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output


def test_a_world_size_that_is_no_number_leaves_other_commands_alone(monkeypatch, tmp_path):
    """`WORLD_SIZE=two` in the environment made every command, `info` and `--help` included, a ValueError traceback;
    only train and pretrain launch processes from it, and they refuse it in one line."""
    monkeypatch.setenv("WORLD_SIZE", "two")
    assert CliRunner().invoke(main, ["encode", "--help"]).exit_code == 0
    result = CliRunner().invoke(main, ["train", "--dataset", str(tmp_path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.output.startswith("error: WORLD_SIZE is 'two' in the environment, not a "
                                                              "process count"), result.output
