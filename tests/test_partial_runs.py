"""`search --queries -o FILE` resumes after its last complete batch when rerun with the same inputs."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from retriever.cli import main

# Two queries a batch at -k 5 over the 12-document tiny index (queries_per_batch: BATCH_HITS // depth), each slowed
# down so a process can be killed between batches.
SLOW_SMALL_BATCHES = """
import sys, time
import retriever.search_runs as search_runs
import retriever.searching as searching
search_runs.BATCH_HITS = 10
rank = searching.Searcher.rank
def slow_rank(self, *args, **kwargs):
    time.sleep(0.3)
    return rank(self, *args, **kwargs)
searching.Searcher.rank = slow_rank
from retriever.cli import main
sys.argv = ["retriever", *sys.argv[1:]]
main()
"""


@pytest.fixture(scope="module")
def shared_index_and_queries(tmp_path_factory, tiny_flat_build):
    """One index (tiny_flat_build, the tiny corpus's) and queries file for the module's tests: they only read them (a
    test that changes the queries changes its own copy)."""
    from fixtures_corpora import write_jsonl

    root = tmp_path_factory.mktemp("partial-runs")
    words = ["cat", "lava", "rock", "river", "sun", "moon", "tree", "stone"]
    queries = write_jsonl(root / "queries.jsonl", [{"_id": f"q{i}", "text": f"{words[i % 8]} {words[i // 8]}"}
                                                   for i in range(20)])
    return tiny_flat_build, queries


@pytest.fixture()
def index_and_queries(shared_index_and_queries, tmp_path):
    index, queries = shared_index_and_queries
    return index, shutil.copy(queries, tmp_path / "queries.jsonl")


def searched_batches(monkeypatch) -> list[int]:
    """Small batches in this process too; returns the list each searched batch's size is appended to."""
    import retriever.search_runs as search_runs
    import retriever.searching as searching

    monkeypatch.setattr(search_runs, "BATCH_HITS", 10)
    sizes, rank = [], searching.Searcher.rank
    monkeypatch.setattr(searching.Searcher, "rank",
                        lambda self, texts, *args, **kwargs: sizes.append(len(texts)) or rank(self, texts, *args,
                                                                                              **kwargs))
    return sizes


def search_args(index, queries, output, *extra):
    return ["search", str(index), "--queries", str(queries), "-o", str(output), "-k", "5", "--device", "cpu",
            "--dtype", "fp32", *extra]


def kill_after(runs: list[tuple[list[str], Path, int]]) -> None:
    """Run each search (arguments, record, queries) in a process of its own, all at once (their seconds of imports and
    slowed batches overlap), and SIGKILL each once its ``record`` says its ``queries`` are done."""
    processes = [subprocess.Popen([sys.executable, "-c", SLOW_SMALL_BATCHES, *args], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
                 for args, _, _ in runs]
    try:
        waiting, deadline = set(range(len(runs))), time.monotonic() + 120
        while waiting and time.monotonic() < deadline:
            for number in sorted(waiting):
                _, record, queries = runs[number]
                if processes[number].poll() is not None:  # ended before its kill: fails below
                    waiting.discard(number)
                elif record.is_file() and json.loads(record.read_text() or "{}").get("queries", 0) >= queries:
                    processes[number].send_signal(signal.SIGKILL)
                    waiting.discard(number)
            time.sleep(0.05)
        for process in processes:
            process.wait(timeout=60)
            assert process.returncode == -signal.SIGKILL, process.stderr.read().decode()
        assert not waiting, "a search never reached its queries"
    finally:
        for process in processes:
            process.kill()
            process.wait()


KILLED_SEARCHES = {"trec-dense": ["--run-format", "trec", "--mode", "dense"],
                   "jsonl-hybrid": ["--run-format", "jsonl", "--mode", "hybrid"]}


@pytest.fixture(scope="module")
def killed_searches(shared_index_and_queries, tmp_path_factory) -> dict[str, Path]:
    """The folders killed searches left their partial runs in (data, record and the lock they held), each rerun on
    its own copy by the tests below: for each of KILLED_SEARCHES, new/sub/run.out after 6 queries (new/sub made by
    the search). One launch kills them all."""
    index, queries = shared_index_and_queries
    root = tmp_path_factory.mktemp("killed")
    runs = [(search_args(index, queries, root / name / "new" / "sub" / "run.out", *flags),
             root / name / "new" / "sub" / ".run.out.partial.json", 6) for name, flags in KILLED_SEARCHES.items()]
    kill_after(runs)
    return {name: root / name for name in KILLED_SEARCHES}


@pytest.mark.parametrize("case", KILLED_SEARCHES)
def test_a_killed_search_resumes_after_its_last_batch_into_the_same_bytes(tmp_path, index_and_queries, killed_searches,
                                                                           monkeypatch, case):
    """Batches of two queries (one in hybrid, which reads each engine 1000 deep)."""
    index, queries = index_and_queries
    shutil.copytree(killed_searches[case] / "new", tmp_path / "new")
    output = tmp_path / "new" / "sub" / "run.out"
    record = output.with_name(".run.out.partial.json")
    flags = KILLED_SEARCHES[case]
    done = json.loads(record.read_text())["queries"]
    assert not output.exists() and done >= 6 and output.with_name(".run.out.partial").is_file()
    sizes = searched_batches(monkeypatch)
    result = CliRunner().invoke(main, search_args(index, queries, output, *flags))
    assert result.exit_code == 0, result.output
    assert sum(sizes) == 20 - done and f"search ({done} already done)" in result.stderr, (sizes, result.stderr)
    assert sorted(os.listdir(output.parent)) == ["run.out"]  # the partial file and its record are gone
    whole = tmp_path / "whole.out"
    CliRunner().invoke(main, search_args(index, queries, whole, *flags))
    assert output.read_bytes() == whole.read_bytes()


# the flags of the killed search the reruns below start from (a search killed for them alone cost seconds of imports)
RERUN_FLAGS = KILLED_SEARCHES["trec-dense"]


@pytest.fixture()
def killed_run(killed_searches) -> Path:
    """The partial run (data and record) the trec-dense search left when killed (with its lock), under the name
    run.out: each rerun below reruns on its own copy, with RERUN_FLAGS and the one input it changes."""
    folder = killed_searches["trec-dense"] / "new" / "sub"
    assert {".run.out.partial", ".run.out.partial.json"} <= {path.name for path in folder.iterdir()}
    return folder


@pytest.mark.parametrize("changed", [["-k", "4"], ["--tag", "other"], ["--mode", "bm25"], ["queries"]])
def test_a_rerun_with_other_inputs_starts_over(tmp_path, index_and_queries, killed_run, monkeypatch, changed):
    index, queries = index_and_queries
    output = tmp_path / "run.out"
    for left in killed_run.iterdir():  # the partial run, its record and the lock the killed search held
        shutil.copy(left, tmp_path / left.name)
    if changed == ["queries"]:
        queries.write_text(queries.read_text().replace('"cat ', '"dog '))
        changed = []
    sizes = searched_batches(monkeypatch)
    result = CliRunner().invoke(main, search_args(index, queries, output, *RERUN_FLAGS, *changed))
    assert result.exit_code == 0, result.output
    assert sum(sizes) == 20 and "note: discarded the partial run" in result.stderr, (sizes, result.stderr)
    whole = tmp_path / "whole.out"
    CliRunner().invoke(main, search_args(index, queries, whole, *RERUN_FLAGS, *changed))
    assert output.read_bytes() == whole.read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".run")) == []


def test_ctrl_c_before_any_batch_leaves_no_folder_and_no_partial_file(tmp_path, index_and_queries, monkeypatch):
    import retriever.searching as searching

    index, queries = index_and_queries

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(searching.Searcher, "rank", interrupted)
    result = CliRunner().invoke(main, search_args(index, queries, tmp_path / "new" / "sub" / "run.trec"))
    assert result.exit_code == 130, result.output
    assert not (tmp_path / "new").exists()


def test_a_run_streamed_into_a_pipe_by_name_is_written(tmp_path):
    """`search -o /dev/stdout` or `-o FIFO` (written in place, batch by batch) was refused as 'a run must be a
    mapping ..., not a StreamedRun' before its first line."""
    import threading

    from retriever.partial_runs import write_search_run

    fifo = tmp_path / "run.pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.extend(fifo.read_text().splitlines()), daemon=True)
    reader.start()

    def search(start, progress):
        yield {"q1": {"d1": 2.0, "d2": 1.0}}
        yield {"q2": {"d3": 0.5}}
    assert write_search_run(search, 2, fifo, "trec", "t", 2, "") == "; 1 of them got fewer (as few as 1), all the " \
                                                                    "search reached"
    reader.join(10)
    assert received == ["q1 Q0 d1 1 2.0 t", "q1 Q0 d2 2 1.0 t", "q2 Q0 d3 1 0.5 t"]


def test_a_run_for_standard_output_is_printed_batch_by_batch_not_held_whole(capsys):
    """`search --queries F > run.trec` held every hit of the run until the last batch (2,000 queries × 1000 hits: 338
    MB more peak memory than -o run.trec, so a large query set ran out of memory); each batch is printed once its
    lines are checked, as -o /dev/stdout streams them."""
    from retriever.partial_runs import write_search_run

    printed: list[str] = []

    def search(start, progress):
        yield {"q1": {"d1": 2.0, "d2": 1.0}}
        printed.append(capsys.readouterr().out)  # what standard output got before the second batch was searched
        yield {"q2": {"d3": 0.5}}
    assert write_search_run(search, 2, None, "trec", "t", 2, "") == "; 1 of them got fewer (as few as 1), all the " \
                                                                    "search reached"
    assert printed == ["q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n"] and capsys.readouterr().out == "q2 Q0 d3 1 0.5 t\n"


@pytest.mark.parametrize("damage", [{"queries": 999}, {"queries": -2, "bytes": -1}, {"queries": True},
                                    {"short": 3, "fewest": "x"}])
def test_a_damaged_partial_record_is_named_and_the_run_starts_over(tmp_path, index_and_queries, killed_run,
                                                                    monkeypatch, damage):
    """Its counts were trusted once they were whole numbers: `queries` 999 of 20 wrote only the partial lines as the
    run (exit 0), a negative byte count was a traceback, `True` counted as 1."""
    index, queries = index_and_queries
    output = tmp_path / "run.out"
    for left in killed_run.iterdir():
        shutil.copy(left, tmp_path / left.name)
    record = tmp_path / ".run.out.partial.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), **damage}))
    sizes = searched_batches(monkeypatch)
    result = CliRunner().invoke(main, search_args(index, queries, output, *RERUN_FLAGS))
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and f"{record}: damaged" in notes[0] and sum(sizes) == 20, (sizes, result.stderr)
    assert len(output.read_text().splitlines()) == 20 * 5


@pytest.mark.parametrize("name", [".run.trec.partial", ".run.trec.partial.json"])
def test_a_folder_where_the_partial_run_goes_is_refused_before_the_search(tmp_path, index_and_queries, monkeypatch,
                                                                          name):
    """A folder named as the partial file was an IsADirectoryError traceback; one named as its record failed only
    once the first batch was searched ('cannot write …: is a folder')."""
    index, queries = index_and_queries
    (tmp_path / name).mkdir()
    sizes = searched_batches(monkeypatch)
    result = CliRunner().invoke(main, search_args(index, queries, tmp_path / "run.trec"))
    assert result.exit_code == 1 and sizes == [] and "Traceback" not in result.output, result.output
    assert result.stderr.startswith(f"error: {tmp_path / name}: is not a file") and result.stderr.count("\n") == 1
    assert (tmp_path / name).is_dir() and not (tmp_path / "run.trec").exists()


@pytest.mark.parametrize("output", ["file", "pipe", "stdout"])
def test_a_trec_run_in_which_no_query_got_a_hit_is_refused_not_written_empty(tmp_path, output, capsys):
    """A search whose every query got no hit (BM25 over words the collection lacks) wrote an empty TREC run, which
    `evaluate --run` then refused as empty ("check that retrieval produced output"), as trec_eval does: the tool
    wrote what it refused. It is refused, nothing written; a JSONL run, a line per query, is written and read."""
    import threading

    from retriever.errors import RetrieverError
    from retriever.partial_runs import write_search_run
    from retriever.runs import read_run

    def search(start, progress):
        yield {"q1": {}, "q2": {}}
        yield {"q3": {}}
    path = {"file": tmp_path / "run.trec", "pipe": tmp_path / "run.pipe", "stdout": None}[output]
    if output == "pipe":
        os.mkfifo(path)
        threading.Thread(target=path.read_text, daemon=True).start()
    with pytest.raises(RetrieverError) as refused:
        write_search_run(search, 3, path, "trec", "t", 5, "key")
    named, unwritten = ("", "nothing written") if path is None else (f" {path}", f"{path} is not written")
    assert str(refused.value).startswith(f"cannot write run{named}: none of its 3 queries got a hit, so a TREC run "
                                         "file would hold no line"), refused.value
    assert str(refused.value).endswith(f"; {unwritten}; a JSONL run (search --run-format jsonl) keeps queries without "
                                       "hits"), refused.value
    assert capsys.readouterr().out == "" and sorted(os.listdir(tmp_path)) == (["run.pipe"] if output == "pipe" else [])
    if output == "file":
        write_search_run(search, 3, tmp_path / "run.jsonl", "jsonl", "t", 5, "key")
        assert read_run(tmp_path / "run.jsonl") == {"q1": {}, "q2": {}, "q3": {}}


def test_a_search_matching_nothing_says_so_rather_than_write_a_run_evaluate_refuses(tmp_path, index_and_queries):
    index, queries = index_and_queries
    queries.write_text('{"_id": "q1", "text": "zyzzyva quux"}\n')
    result = CliRunner().invoke(main, search_args(index, queries, tmp_path / "run.trec", "--mode", "bm25"))
    assert result.exit_code == 1 and f"error: cannot write run {tmp_path / 'run.trec'}: its 1 query got no hit, so a " \
                                      "TREC run file would hold no line" in result.stderr, result.output
    assert sorted(os.listdir(tmp_path)) == ["queries.jsonl"]
