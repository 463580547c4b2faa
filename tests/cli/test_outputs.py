"""A Ctrl-C that comes once a command's output files are complete: exit 0, saying the files are whole; SIGTERM to a
training run, said as Ctrl-C is."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from retriever.cli import main


@pytest.fixture()
def flat_index(tmp_path, tiny_dense_build):
    return shutil.copytree(tiny_dense_build, tmp_path / "idx")


def test_a_sigint_after_the_search_run_is_renamed_exits_0(tmp_path, tiny_beir, flat_index):
    """A real SIGINT, sent by the process to itself right after the run file is in place (as the warnings after
    it are made), exited 130 saying to rerun, as if the run were lost."""
    run = tmp_path / "run.trec"
    code = ("import signal\n"
            "import retriever.evaluation as evaluation\n"
            "def interrupted(*_, **__):\n"
            "    signal.raise_signal(signal.SIGINT)  # to the main thread: os.kill let any thread take it\n"
            "    return None\n"
            "evaluation.unknown_words_warning = interrupted\n"
            "from retriever.cli import main\n"
            "main()\n")
    result = subprocess.run([sys.executable, "-c", code, "search", str(flat_index), "--queries",
                             str(tiny_beir / "queries.jsonl"), "-o", str(run), "-k", "3", "--device", "cpu",
                             "--dtype", "fp32"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"interrupted (Ctrl-C) after {run} was written whole" in result.stderr
    assert len(run.read_text().splitlines()) == 12


def _raise_after(monkeypatch, module, name: str) -> None:
    """``module.name`` does its work, then Ctrl-C arrives."""
    original = getattr(module, name)

    def then_interrupted(*args, **kwargs):
        result = original(*args, **kwargs)
        raise KeyboardInterrupt
    monkeypatch.setattr(module, name, then_interrupted)


def test_evaluate_interrupted_after_its_files_exits_0_and_before_them_130(monkeypatch, tmp_path, tiny_beir,
                                                                          flat_index):
    import retriever.cli.evaluating as evaluating
    import retriever.evaluation as evaluation

    common = ["evaluate", "--index", str(flat_index), "--dataset", str(tiny_beir), "--device", "cpu", "--dtype",
              "fp32", "--save-run", str(tmp_path / "run.trec"), "-o", str(tmp_path / "metrics.json")]
    with monkeypatch.context() as patch:
        # the table printed and the metrics written, the run not yet in place (it goes last, so a run that cannot
        # be written leaves the metrics)
        _raise_after(patch, evaluating, "write_json")
        result = CliRunner().invoke(main, common)
    assert result.exit_code == 130 and (tmp_path / "metrics.json").is_file(), result.output
    assert not (tmp_path / "run.trec").exists() and "ndcg@10" in result.output
    assert f"{tmp_path / 'metrics.json'} was written whole; rerun for the rest" in result.output
    _raise_after(monkeypatch, evaluation, "evaluate_index")
    result = CliRunner().invoke(main, common)
    assert result.exit_code == 0 and (tmp_path / "run.trec").is_file(), result.output


def test_mine_interrupted_after_its_file_exits_0(monkeypatch, tmp_path, tiny_beir, flat_index):
    import retriever.training as training

    _raise_after(monkeypatch, training, "mine_negatives")
    output = tmp_path / "negatives.jsonl"
    result = CliRunner().invoke(main, ["mine", str(flat_index), "--dataset", str(tiny_beir), "--split", "test",
                                       "-o", str(output), "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0 and output.is_file(), result.output
    assert f"interrupted (Ctrl-C) after {output} was written whole" in result.output


def test_an_interrupt_before_an_old_output_is_replaced_still_exits_130(monkeypatch, tmp_path, tiny_beir,
                                                                        flat_index):
    """An output left by an earlier run is not this run's: it does not count as written."""
    import retriever.training as training

    output = tmp_path / "negatives.jsonl"
    output.write_text("{}\n")
    monkeypatch.setattr(training, "mine_negatives", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    result = CliRunner().invoke(main, ["mine", str(flat_index), "--dataset", str(tiny_beir), "-o", str(output)])
    assert result.exit_code == 130 and "rerun the same command" in result.output, result.output


def test_evaluate_names_every_file_it_wrote(tmp_path, tiny_beir, flat_index):
    """`-o` was announced ("wrote metrics.json") and --save-run was not."""
    run, metrics = tmp_path / "run.trec", tmp_path / "metrics.json"
    result = CliRunner().invoke(main, ["evaluate", "--index", str(flat_index), "--dataset", str(tiny_beir), "--device",
                                       "cpu", "--dtype", "fp32", "--save-run", str(run), "-o", str(metrics)])
    assert result.exit_code == 0 and f"wrote {run}\n" in result.stderr and f"wrote {metrics}\n" in result.stderr


def test_evaluate_prints_its_table_before_the_saved_run_is_put_in_place(monkeypatch, tmp_path, tiny_beir,
                                                                        flat_index):
    """--save-run was renamed into place before the table printed: a Ctrl-C between them exited 0 saying the work was
    done, with no table. The table now comes first; a Ctrl-C right after it leaves no run (nor its temporary)."""
    import retriever.cli.evaluating as evaluating
    import retriever.evaluation as evaluation

    run = tmp_path / "run.trec"
    common = ["evaluate", "--index", str(flat_index), "--dataset", str(tiny_beir), "--device", "cpu", "--dtype",
              "fp32", "--save-run", str(run)]
    with monkeypatch.context() as patch:
        _raise_after(patch, evaluation, "evaluate_index")  # the run just put in place
        result = CliRunner().invoke(main, common)
    assert result.exit_code == 0 and run.is_file() and "ndcg@10" in result.stdout, result.output
    run.unlink()
    _raise_after(monkeypatch, evaluating, "echo_result")  # the table just printed
    result = CliRunner().invoke(main, common)
    assert result.exit_code == 130 and "ndcg@10" in result.stdout and "rerun the same command" in result.output
    assert not run.exists() and not list(tmp_path.glob(".run.trec*"))


def test_a_full_disk_says_work_is_kept_only_by_a_command_that_resumes(monkeypatch, tmp_path, tiny_beir, flat_index):
    """Every full disk ended "rerun the same command (finished work is kept)": evaluate and mine keep nothing (a rerun
    starts over), so only a command that resumes, such as a search into a file, says its work is kept."""
    import errno
    import os

    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    (tmp_path / "qrels").write_text("q1 0 d1 1\n")
    dense = ["--device", "cpu", "--dtype", "fp32"]
    for command in (["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels")],
                    ["mine", str(flat_index), "--dataset", str(tiny_beir), "--split", "test", *dense]):
        result = CliRunner().invoke(main, [*command, "-o", "/dev/full"])
        said = result.stderr.splitlines()[-1]  # after the progress bars
        assert result.exit_code == 1 and said.startswith("error: no space left on the device writing /dev/full"), said
        assert said.endswith("rerun the same command (it starts over: nothing of this run is kept)"), said

    def full(_):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    run = tmp_path / "searched.trec"
    result = CliRunner().invoke(main, ["search", str(flat_index), "--queries", str(tiny_beir / "queries.jsonl"),
                                       "-o", str(run), "-k", "3", *dense])
    said = result.stderr.splitlines()[-1]
    assert result.exit_code == 1 and said.startswith(f"error: no space left on the device writing {run}"), said
    assert said.endswith("rerun the same command (finished work is kept)"), said


def test_a_ctrl_c_says_whether_the_rerun_keeps_the_work(monkeypatch, tmp_path, tiny_beir, flat_index):
    """Every Ctrl-C ended "(finished work is kept where it resumes)", leaving the user to guess whether the command
    resumes: a search into a file does (its partial run), mine does not (a rerun starts over)."""
    import retriever.cli.searching as searching
    import retriever.training as training

    def interrupt(*_, **__):
        raise KeyboardInterrupt
    monkeypatch.setattr(training, "mine_negatives", interrupt)
    monkeypatch.setattr(searching, "open_searcher", interrupt)
    for command, kept in ((["mine", str(flat_index), "--dataset", str(tiny_beir), "-o", str(tmp_path / "neg.jsonl")],
                           "(it starts over: nothing of this run is kept)"),
                          (["search", str(flat_index), "--queries", str(tiny_beir / "queries.jsonl"), "-o",
                            str(tmp_path / "run.trec")], "(finished work is kept)")):
        result = CliRunner().invoke(main, command)
        said = result.output.splitlines()[-1]
        assert result.exit_code == 130 and said.endswith(f"so rerun the same command {kept}"), said


KEPT = {"flat": "(it starts over: nothing of this run is kept)", "ivf-ondisk": "(finished work is kept)"}


def _index_failing(monkeypatch, tmp_path, index_type: str, fails) -> str:
    """The last line of `index --index-type INDEX_TYPE` whose build_index is ``fails``."""
    import retriever.indexing as indexing

    monkeypatch.setattr(indexing, "build_index", fails)
    (tmp_path / "shards").mkdir(exist_ok=True)
    (tmp_path / "c.jsonl").write_text('{"_id": "a", "text": "x"}\n')
    result = CliRunner().invoke(main, ["index", str(tmp_path / "shards"), "--corpus", str(tmp_path / "c.jsonl"), "-o",
                                       str(tmp_path / "out"), "--index-type", index_type])
    assert result.exit_code == 1, result.output
    return result.output.splitlines()[-1]


@pytest.mark.parametrize("index_type", list(KEPT))
def test_index_says_work_is_kept_only_for_the_type_whose_parts_are_kept(monkeypatch, tmp_path, index_type):
    """`index` always said "(finished work is kept)": only ivf-ondisk keeps its parts; the building folder of any
    other type is deleted when the build fails, so its rerun starts over."""
    from retriever.errors import out_of_memory

    def fails(*_, **__):
        raise out_of_memory("(test)")
    said = _index_failing(monkeypatch, tmp_path, index_type, fails)
    assert said.endswith(f"rerun the same command {KEPT[index_type]}"), said


@pytest.mark.parametrize("index_type", list(KEPT))
def test_a_folder_that_cannot_be_moved_into_place_says_whether_the_rerun_keeps_the_work(monkeypatch, tmp_path,
                                                                                        index_type):
    """Its line ended "rerun the same command (finished work is kept)" from every caller, though the building folder
    of an `index` of a type other than ivf-ondisk is deleted, so its rerun starts over; the CLI now adds which."""
    import retriever.folders as folders

    def refused(*_):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(folders, "_replace_folder", refused)
    said = _index_failing(monkeypatch, tmp_path, index_type,
                          lambda *_, **__: folders.replace_folder(tmp_path / ".out.building", tmp_path / "out"))
    assert said.startswith(f"error: {tmp_path / 'out'}: cannot move the finished folder into place"), said
    assert said.endswith(f"writable and rerun the same command {KEPT[index_type]}"), said


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize("rank", ["0", "1"])
def test_sigterm_to_a_training_run_says_it_resumes_once_and_exits_143(monkeypatch, tmp_path, tiny_beir, command,
                                                                      rank):
    """A scheduler's stop (Slurm, Kubernetes, torchrun passing it on) ended train and pretrain with 143 and nothing
    said, where Ctrl-C says the rerun resumes; under torchrun the machine's first process says it, as for Ctrl-C. A
    real SIGTERM, raised in this process while the run trains; the test's own handler, there before, stands for the
    default that ended the process, and comes back after the command."""
    import retriever.pretraining
    import retriever.training

    class Unheard(Exception):
        pass

    def default(signum, frame):
        raise Unheard("SIGTERM reached the handler the command found")

    stopping = []

    def trains(config):
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:  # torchrun passes on a SIGTERM its workers had from a scheduler: while the run stops it is ignored
            stopping.append(signal.getsignal(signal.SIGTERM))
        raise AssertionError("the run went on after SIGTERM")
    monkeypatch.setattr(retriever.training, "train", trains)
    monkeypatch.setattr(retriever.pretraining, "pretrain", trains)
    monkeypatch.setenv("LOCAL_RANK", rank)
    before = signal.signal(signal.SIGTERM, default)
    try:
        data = ["--dataset", str(tiny_beir)] if command == "train" else [str(tiny_beir)]
        result = CliRunner().invoke(main, [command, *data, "--output", str(tmp_path / "m")])
        handler_after = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert result.exit_code == 143, (result.output, result.exception)
    said = ("error: interrupted (SIGTERM); outputs are written under their names only when complete, so rerun the "
            "same command (finished work is kept)\n")
    assert result.output == (said if rank == "0" else "")
    assert stopping == [signal.SIG_IGN] and handler_after is default
