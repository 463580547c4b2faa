"""A reader of standard output that goes away (`retriever search ... | head -1`): exit 0, quietly, files whole; one of
standard error, or standard error closed: the command does its work, with its own exit code."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_corpora import write_jsonl, write_tiny_beir

COMMON = ["--device", "cpu", "--dtype", "fp32"]


@pytest.fixture()
def flat_index(tmp_path, tiny_dense_build):
    return shutil.copytree(tiny_dense_build, tmp_path / "idx")


def _run_to_readers_that_leave(runs: list[tuple[list[str], int]]) -> list[tuple[int, str, list[str]]]:
    """Each CLI run (arguments, lines read) for real, all at once, with standard output to a pipe whose reader takes
    its lines, then closes it (0: closed before the command writes anything), as `| head -1` does. The pipes read
    from none are closed first: while another's lines are awaited, a short output would fit in its pipe unread."""
    processes = [subprocess.Popen([sys.executable, "-c", "from retriever.cli import main; main()", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for args, _ in runs]
    taken: list[list[str]] = [[] for _ in runs]
    for number in sorted(range(len(runs)), key=lambda number: runs[number][1] > 0):
        taken[number] = [processes[number].stdout.readline().decode() for _ in range(runs[number][1])]
        processes[number].stdout.close()
    stderrs = [process.stderr.read().decode() for process in processes]
    return [(process.wait(timeout=300), stderr, lines) for process, stderr, lines in zip(processes, stderrs, taken)]


SUMMARIES = ["search-lava", "search-lava-json", "info-json"]


@pytest.fixture(scope="module")
def readers_left(tmp_path_factory, tiny_dense_build) -> tuple[Path, dict[str, tuple[int, str, list[str]]]]:
    """The module's runs to readers that leave, by name, all started at once on one index copy and dataset (a launch
    per test cost seconds of imports each; each test checks its own runs), and the folder they wrote into."""
    root = tmp_path_factory.mktemp("readers-left")
    index, dataset = shutil.copytree(tiny_dense_build, root / "idx"), write_tiny_beir(root / "tiny-beir")
    queries = write_jsonl(root / "q.jsonl", [{"_id": f"q{i}", "text": "hot lava rock"} for i in range(2000)])
    batch = ["search", str(index), "--queries", str(queries), "-k", "12", *COMMON]
    runs = {"batch": (batch, 1), "dev-stdout": ([*batch, "-o", "/dev/stdout"], 1),
            "evaluate": (["evaluate", "--index", str(index), "--dataset", str(dataset), "-o", str(root / "metrics.json"),
                          "--save-run", str(root / "run.trec"), *COMMON], 0),
            "search-lava": (["search", str(index), "lava", *COMMON], 0),
            "search-lava-json": (["search", str(index), "lava", "--json", *COMMON], 0),
            "info-json": (["info", str(index), "--json"], 0)}
    return root, dict(zip(runs, _run_to_readers_that_leave(list(runs.values()))))


def _assert_quiet(code: int, stderr: str) -> None:
    assert code == 0, stderr
    for noise in ("Traceback", "Exception ignored", "BrokenPipe", "Aborted", "error:"):
        assert noise not in stderr, stderr


def test_a_batch_run_to_a_reader_that_leaves_after_one_line_exits_0_quietly(readers_left):
    """`retriever search IDX --queries Q | head -1` exited 1 with no message (click's handling of EPIPE)."""
    code, stderr, taken = readers_left[1]["batch"]
    assert taken[0].startswith("q0 Q0 ")  # the run's first line, then the reader left mid-run (24000 lines)
    _assert_quiet(code, stderr)


def test_a_single_query_or_summary_to_a_closed_pipe_exits_0_quietly(readers_left):
    for name in SUMMARIES:
        code, stderr, _ = readers_left[1][name]
        _assert_quiet(code, f"{name}: {stderr}")


def test_evaluate_still_writes_its_files_whole_when_its_table_has_no_reader(readers_left):
    """The table is printed before the files; its reader gone (`| true`), the command exited 1 with no metrics file
    and no run file."""
    root, (code, stderr, _) = readers_left[0], readers_left[1]["evaluate"]
    _assert_quiet(code, stderr)
    assert "ndcg@10" in json.loads((root / "metrics.json").read_text())["mean"]
    assert len((root / "run.trec").read_text().splitlines()) == 4 * 12


def test_a_run_written_to_dev_stdout_whose_reader_leaves_exits_0_quietly(readers_left):
    """`search --queries Q -o /dev/stdout | head -1` said 'error: cannot write /dev/stdout: broken pipe; check the
    disk' with exit 1 (and before that, refused the streamed run)."""
    code, stderr, taken = readers_left[1]["dev-stdout"]
    assert taken[0].startswith("q0 Q0 ")
    _assert_quiet(code, stderr)


def _finished(processes: list[subprocess.Popen]) -> list[subprocess.CompletedProcess]:
    """Each process waited for in turn: started together, their seconds of imports overlap."""
    done = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return done


def _run_with_stderr(runs: list[tuple[list[str], str]]) -> list[subprocess.CompletedProcess]:
    """Each CLI run for real, all at once, with standard error closed (``closed``: `2>&-`) or a pipe whose reader has
    left (``gone``: `2> >(exit)`); standard output is kept."""
    read, write = os.pipe()
    os.close(read)
    processes = []
    try:
        for args, stderr in runs:
            command = [sys.executable, "-c", "from retriever.cli import main; main()", *args]
            processes.append(subprocess.Popen(["sh", "-c", 'exec "$@" 2>&-', "sh", *command], stdout=subprocess.PIPE)
                             if stderr == "closed" else subprocess.Popen(command, stdout=subprocess.PIPE, stderr=write))
        return _finished(processes)
    finally:
        os.close(write)


def test_a_build_with_no_standard_error_builds_and_exits_0(tmp_path, tiny_beir, tiny_model_dir):
    """With standard error's reader gone, the first progress bar ended the build with exit 1 and nothing built."""
    from retriever.searching import Searcher

    ways = ["gone", "closed"]
    builds = _run_with_stderr([(["build", str(tiny_beir), "-o", str(tmp_path / stderr), "--model", str(tiny_model_dir),
                                 "--index-type", "flat", "--json", *COMMON], stderr) for stderr in ways])
    for stderr, done in zip(ways, builds):
        assert done.returncode == 0 and json.loads(done.stdout)["vectors"] == 12, stderr
        assert Searcher(tmp_path / stderr, device="cpu", dtype="fp32").index.ntotal == 12, stderr


def test_a_search_with_no_standard_error_writes_its_run_and_its_error_still_exits_1(tmp_path, flat_index):
    queries = write_jsonl(tmp_path / "q.jsonl", [{"_id": f"q{i}", "text": "hot lava rock"} for i in range(3)])
    (tmp_path / "bad.jsonl").write_text('{"_id": "q1"}\n')
    ways = ["gone", "closed"]
    runs = _run_with_stderr([(args, stderr) for stderr in ways for args in (
        ["search", str(flat_index), "--queries", str(queries), "-k", "2", *COMMON],
        ["search", str(flat_index), "--queries", str(tmp_path / "bad.jsonl"), *COMMON])])
    for stderr, done, failed in zip(ways, runs[::2], runs[1::2]):
        assert done.returncode == 0 and done.stdout.decode().splitlines()[5].startswith("q2 Q0 "), stderr
        assert len(done.stdout.splitlines()) == 6, stderr  # the run alone: no warning or progress line among its lines
        assert failed.returncode == 1 and failed.stdout == b"", stderr


def _run_with_stdout_closed(runs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Each CLI run for real, all at once, with descriptor 1 closed from the start (`>&-`)."""
    return _finished([subprocess.Popen(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-c",
                                        "from retriever.cli import main; main()", *args], stderr=subprocess.PIPE)
                      for args in runs])


CLOSED = "error: standard output is closed; nothing was written: redirect it to a file or give -o\n"


def test_a_closed_standard_output_is_an_error_unless_the_results_go_to_a_file(tmp_path, flat_index):
    """`retriever search IDX "q" >&-` and `evaluate ... >&-` exited 0 having printed nothing (a batch run, with an
    AttributeError traceback); with -o they do their work, and no file they open takes descriptor 1."""
    (tmp_path / "run.trec").write_text("q1 Q0 d6 1 2.0 t\nq1 Q0 d2 2 1.0 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d6 1\n")
    queries = write_jsonl(tmp_path / "q.jsonl", [{"_id": f"q{i}", "text": "hot lava rock"} for i in range(3)])
    scored = ["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels.txt")]
    refused = [scored, ["--version"], ["search", str(flat_index), "lava", *COMMON],
               ["search", str(flat_index), "--queries", str(queries), "-k", "2", *COMMON]]
    *dones, metrics, out = _run_with_stdout_closed([*refused, [*scored, "-o", str(tmp_path / "metrics.json")],
                                                    ["search", str(flat_index), "--queries", str(queries), "-k", "2",
                                                     "-o", str(tmp_path / "out.trec"), *COMMON]])
    for args, done in zip(refused, dones):
        said = CLOSED.replace(" or give -o", "") if args == ["--version"] else CLOSED  # -o only where it is a flag
        assert (done.returncode, done.stderr.decode()) == (1, said), args
    assert metrics.returncode == 0 and json.loads((tmp_path / "metrics.json").read_text())["mean"]["ndcg@10"] == 1.0
    assert out.returncode == 0, out.stderr.decode()
    assert [line.split()[0] for line in (tmp_path / "out.trec").read_text().splitlines()] == ["q0", "q0", "q1", "q1",
                                                                                              "q2", "q2"]


def test_json_on_a_closed_standard_output_is_refused_before_any_work(tmp_path, tiny_beir, tiny_model_dir):
    """`build ... --json >&-` built the whole folder, then exited 1 saying 'nothing was written': --json's summary
    cannot be printed, so it is refused as the flags are read; without --json the build does its work."""
    said = ("error: standard output is closed, so --json has nowhere to print; nothing was done: redirect standard "
            "output to a file or drop --json\n")
    build = ["build", str(tiny_beir), "-o", str(tmp_path / "idx"), "--model", str(tiny_model_dir), "--index-type",
             "flat", "--no-bm25", *COMMON]
    encode = ["encode", str(tiny_beir), "-o", str(tmp_path / "shards"), "--model", str(tiny_model_dir), *COMMON]
    for args, done in zip((build, encode), _run_with_stdout_closed([[*build, "--json"], [*encode, "--json"]])):
        assert (done.returncode, done.stderr.decode()) == (1, said), args
    assert not (tmp_path / "idx").exists() and not (tmp_path / "shards").exists()
    [done] = _run_with_stdout_closed([build])
    assert done.returncode == 0 and (tmp_path / "idx" / "manifest.json").is_file(), done.stderr.decode()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, where every write fails with ENOSPC")
def test_standard_output_on_a_full_disk_is_said_as_standard_output_not_as_a_file(tmp_path):
    """`retriever evaluate ... > FILE` on a full disk said "free some space (or choose another path) and rerun the same
    command (finished work is kept)": a path standard output does not have, and work it does not keep."""
    (tmp_path / "run.trec").write_text("q1 Q0 d6 1 2.0 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d6 1\n")
    with open("/dev/full", "wb") as full:
        done = subprocess.run([sys.executable, "-c", "from retriever.cli import main; main()", "evaluate", "--run",
                               str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels.txt")], stdout=full,
                              stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 1 and done.stderr.decode() == (
        "error: no space left on the device standard output goes to, so what was printed there is cut short; free "
        "some space or redirect standard output to another disk, and rerun the same command\n")
