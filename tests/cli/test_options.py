"""Shared click options: renamed flags keep their old spelling, hidden from --help, for one release."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from retriever.cli import main

RENAMED = [  # (command, new flag, old flag, parameter)
    ("encode", "--worker-index", "--shard-index", "worker_index"),
    ("encode", "--num-workers", "--num-shards", "num_workers"),
    ("train", "--queries-per-step", "--batch-size", "queries_per_step"),
    ("pretrain", "--sequences-per-step", "--batch-size", "sequences_per_step"),
]


def required_args(command: str, tmp_path) -> list[str]:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a"}\n')
    return {"encode": [str(corpus), "--output", str(tmp_path / "out")],
            "train": ["--output", str(tmp_path / "model")],
            "pretrain": [str(corpus), "--output", str(tmp_path / "model")]}[command]


@pytest.mark.parametrize("command, new, old, parameter", RENAMED)
def test_old_spelling_still_parses_to_the_new_parameter(tmp_path, command, new, old, parameter):
    for flag in (new, old):
        context = main.commands[command].make_context(command, [*required_args(command, tmp_path), flag, "3"])
        assert context.params[parameter] == 3, flag


@pytest.mark.parametrize("command, new, old, parameter", RENAMED)
def test_help_shows_only_the_new_spelling(command, new, old, parameter):
    result = CliRunner().invoke(main, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert new in result.output
    if old == "--batch-size":  # encode keeps --batch-size for texts per forward pass; train/pretrain hide it
        assert "--batch-size" not in result.output
    else:
        assert old not in result.output


def test_every_encoder_setting_has_a_flag():
    from retriever.encoder_settings import OVERRIDABLE

    assert set(OVERRIDABLE) <= {param.name for param in main.commands["train"].params}


def test_a_title_field_named_but_in_no_record_is_an_error(tmp_path, tiny_model_dir):
    """`encode --title-field heading` on a corpus without that key encoded every passage untitled, exit 0."""
    args = required_args("encode", tmp_path)
    result = CliRunner().invoke(main, ["encode", *args, "--title-field", "heading", "--model", str(tiny_model_dir),
                                       "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "corpus.jsonl: no title field 'heading' in any record" in result.stderr
    assert not list((tmp_path / "out").glob("done-*"))


@pytest.mark.parametrize("args", [["search", "{index}", "--queries", "{queries}", "-o"],
                                  ["evaluate", "--run", "{queries}", "--qrels", "{queries}", "-o"],
                                  ["evaluate", "--index", "{index}", "--dataset", "{index}", "--save-run"]])
def test_an_output_file_ending_in_a_slash_is_refused_not_written_as_the_folders_name(tmp_path, args):
    """`search --queries Q -o runs/` wrote a file named runs (Path drops the slash), exit 0."""
    index = tmp_path / "not-an-index"  # never opened: the flags are checked first
    index.mkdir()
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q1", "text": "cat"}\n')
    target = f"{tmp_path / 'runs'}/"
    result = CliRunner().invoke(main, [a.format(index=index, queries=queries) for a in args] + [target])
    assert result.exit_code == 2 and f"{target} ends in a slash, so it names a folder" in result.output, result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("tail", ["/.", "/..", "/./"])
def test_an_output_file_ending_in_a_dot_component_is_refused_as_a_folder(tmp_path, tail):
    """`evaluate -o new/.` wrote a file named new (Path drops the dot); `-o new/..` failed after the work, 'device or
    resource busy'."""
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\n")
    target = f"{tmp_path / 'new'}{tail}"
    result = CliRunner().invoke(main, ["evaluate", "--run", str(run), "--qrels", str(run), "-o", target])
    assert result.exit_code == 2 and f"{target} ends in " in result.output, result.output
    assert "so it names a folder; give the path of a file in it" in result.output and not (tmp_path / "new").exists()


@pytest.mark.parametrize("command", ["train", "build", "encode"])
@pytest.mark.parametrize("flag", ["--passage-max-length", "--query-max-length"])
def test_a_max_length_that_leaves_a_text_no_token_of_its_own_is_refused_when_parsed(command, flag):
    """0 holds no token of any text; the special tokens a model's tokenizer adds are counted when it loads
    (`tests/test_max_lengths.py`), since a parse-time floor of 3 assumed two of them for every model."""
    result = CliRunner().invoke(main, [command, flag, "0"])
    assert result.exit_code == 2 and f"'{flag}': 0 is less than 1: a max length counts a text's" in result.output, \
        result.output
    assert f"'{flag}'" not in CliRunner().invoke(main, [command, flag, "2"]).output


@pytest.mark.parametrize("length", [230, 300])
def test_an_output_file_name_too_long_with_its_temporary_suffix_says_so_not_that_the_folder_is_unwritable(tmp_path,
                                                                                                          length):
    """`search -o NAME` of 216–255 bytes said 'nothing can be created in . (File name too long)', blaming the folder,
    where NAME plus the suffix of the temporary file made beside it is what is too long."""
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q1", "text": "cat"}\n')
    result = CliRunner().invoke(main, ["search", str(tmp_path), "--queries", str(queries),
                                       "-o", str(tmp_path / ("r" * length))])
    assert result.exit_code == 2 and f"the name is {length} bytes long" in result.output, result.output
    assert "so it may be at most" in result.output and "nothing can be created" not in result.output


@pytest.mark.parametrize("args, message", [
    (["search", "IDX", "--queries", "Q", "-o", "run.jsonl"],
     "-o run.jsonl names a JSONL file, but the run is written as TREC lines (--run-format trec); add --run-format "
     "jsonl, or name the file for its format (run.trec)"),
    (["search", "IDX", "--queries", "Q", "-o", "run.trec", "--run-format", "jsonl"],
     "-o run.trec names a TREC file, but the run is written as JSONL (--run-format jsonl)"),
    (["evaluate", "--index", "IDX", "--dataset", "IDX", "--save-run", "run.json"],
     "--save-run run.json names a JSONL file, but the run is written as TREC lines"),
])
def test_a_run_file_named_for_the_other_format_is_refused_before_any_work(tmp_path, monkeypatch, args, message):
    """`search -o run.jsonl` wrote TREC lines into run.jsonl with exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "IDX").mkdir()  # not an index: the check comes before it is opened
    (tmp_path / "Q").write_text('{"_id": "q1", "text": "cat"}\n')
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / args[args.index("-o" if "-o" in args else "--save-run") + 1]).exists()


@pytest.mark.parametrize("args", [["search", "{dir}", "--queries", "{queries}", "-o"],
                                  ["evaluate", "--run", "{queries}", "--qrels", "{queries}", "-o"],
                                  ["mine", "{dir}", "--dataset", "{dir}", "-o"]])
@pytest.mark.parametrize("target, said", [("loop", "{target} goes through a symbolic link that leads back to itself"),
                                           ("loop/run.trec", "{target} goes through a symbolic link that leads back"),
                                           ("gone/run.trec", "{tmp}/gone is a symbolic link to nowhere, which does "
                                                             "not exist, so {target} cannot be created under it")])
def test_an_output_through_a_symlink_loop_or_a_link_to_nothing_is_named_in_one_line(tmp_path, args, target, said):
    """`-o LINK` where LINK leads back to itself: a `RuntimeError: Symlink loop` traceback (Path.resolve), or for
    `mine` 'cannot be created (File exists)'; `-o GONE/run.trec` under a link to a missing folder was a
    `FileExistsError` traceback once the work was done."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "gone").symlink_to("nowhere")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q1", "text": "cat"}\n')
    result = CliRunner().invoke(main, [a.format(dir=tmp_path / "dir", queries=queries) for a in args]
                                + [str(tmp_path / target)])
    assert result.exit_code == 2 and isinstance(result.exception, (SystemExit, type(None))), result.output
    assert said.format(target=tmp_path / target, tmp=tmp_path) in result.output, result.output
    assert not (tmp_path / "nowhere").exists()


def test_an_output_path_past_the_systems_path_limit_says_so_not_that_a_name_is_too_long(tmp_path):
    """500 folders of 8 letters: 'a name in the path is longer than the file system takes (often 255 bytes)', where
    no name is; the whole path is past PATH_MAX (4096 bytes on Linux)."""
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\n")
    target = str(tmp_path / "/".join(["abcdefgh"] * 500) / "m.json")
    result = CliRunner().invoke(main, ["evaluate", "--run", str(run), "--qrels", str(run), "-o", target])
    assert result.exit_code == 2 and "the system takes paths of at most" in result.output, result.output[-300:]
    assert "a name in the path" not in result.output and not (tmp_path / "abcdefgh").exists()
