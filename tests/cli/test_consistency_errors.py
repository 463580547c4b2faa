"""Every subcommand's usage errors are one line naming the flag or argument, as its other errors are."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from retriever.cli import main


def _one_line_usage_error(args: list[str]) -> str:
    result = CliRunner().invoke(main, args, prog_name="retriever")
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout == "" and "Usage:" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("command", sorted(main.commands))
def test_an_unknown_flag_is_one_line_naming_it_and_where_the_flags_are(command):
    """click printed the usage line, a hint, a blank line and `Error: …`: four lines for one mistake."""
    line = _one_line_usage_error([command, "--no-such-flag"])
    assert "No such option '--no-such-flag'" in line and f"(see `retriever {command} --help`)" in line


@pytest.mark.parametrize("args, names", [
    (["search", "/no/such/index", "a query"], "Invalid value for 'INDEX': Directory '/no/such/index' does not exist"),
    (["search", ".", "q", "-k", "0"], "Invalid value for '--k' / '-k': 0 is not in the range x>=1"),
    (["build", "."], "Missing option '--output' / '-o'"),
    (["evaluate"], "give either --run (with --qrels or --dataset) or --index with --dataset"),
    (["info"], "Missing argument 'INDEX'"),
    (["nosuch"], "No such command 'nosuch'"),
    (["--verison"], "No such option '--verison'"),
])
def test_bad_arguments_and_commands_are_one_line(args, names):
    assert names in _one_line_usage_error(args)


def test_a_bare_command_still_prints_its_help():
    result = CliRunner().invoke(main, [])
    assert "Commands:" in result.output and "demo" in result.output


def _count_refused(tmp_path, beir, command: str, flag: str, value: str, bound: str) -> None:
    """``command`` with ``flag value`` is a one-line usage error naming the bound, nothing written, --help says it."""
    data = ["--dataset", str(beir)] if command == "train" else [str(beir)]
    line = _one_line_usage_error([command, *data, "-o", str(tmp_path / "out"), flag, value])
    assert f"{flag} must be a whole number {bound}" in line and f"not {value}" in line, line
    assert not (tmp_path / "out").exists()
    help_text = " ".join(CliRunner().invoke(main, [command, "--help"], terminal_width=200).output.split())
    assert {"--seed": "0<=x<=4294967295", "--ddp-timeout": "1<=x<=31536000", "--save-steps": "x>=0"}[flag] in help_text


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_seed_numpy_cannot_take_is_one_line_before_loading(tmp_path, tiny_beir, command, seed):
    """It was a `ValueError: Seed must be between 0 and 2**32 - 1` traceback once the model had loaded, then an
    error of exit 1, as if a run had failed, with the bound in no --help; now a usage error (exit 2)."""
    _count_refused(tmp_path, tiny_beir, command, "--seed", seed, "from 0 to 4294967295 (the seeds numpy takes)")


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize("flag, value, bound", [("--ddp-timeout", str(10**13), "from 1 to 31536000 (a year"),
                                                ("--save-steps", "-1", "of at least 0 (0: ")])
def test_a_count_outside_its_bound_is_a_usage_error_naming_the_bound(tmp_path, tiny_beir, command, flag, value, bound):
    """--ddp-timeout past a year was an error of exit 1 (its bound was the library's alone, in no --help); each
    count's bound is now one table (`choices.COUNT_BOUNDS`) that the CLI's ranges and the library's check read."""
    _count_refused(tmp_path, tiny_beir, command, flag, value, bound)


@pytest.mark.parametrize("args, command", [(["build", "--index-type"], "build"), (["search", "-k"], "search")])
def test_a_flag_missing_its_value_says_where_the_flags_are(args, command):
    """click raises "requires an argument" without a context, so the line lacked the (see … --help) the others have."""
    line = _one_line_usage_error(args)
    assert "requires an argument" in line and line.endswith(f"(see `retriever {command} --help`)")


@pytest.mark.parametrize("args, ours", [(["search", ".", "--queries", ".", "--hits", "5"], "-k"),
                                        (["evaluate", "--hits", "5"], "-k"),
                                        (["search", ".", "--topics", "q.tsv"], "--queries"),
                                        (["search", ".", "--output-format", "trec"], "--run-format")])
def test_pyserinis_spelling_of_a_flag_is_told_ours(args, ours):
    """`search --hits 1000`, as Pyserini spells the depth, said only "No such option '--hits'"."""
    flag = args[-2]
    line = _one_line_usage_error(args)
    assert f"No such option '{flag}' (Pyserini's {flag} is {ours} here)" in line, line


def test_a_flag_pyserini_has_and_a_command_lacks_is_not_given_a_counterpart():
    assert "Pyserini" not in _one_line_usage_error(["info", ".", "--hits", "5"])
