"""The command line: one-line errors, exit codes, nothing half-written, and documented flags."""
from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from fixtures_processes import commands_in_one_process
from retriever.cli import main

BAD_CORPORA = {
    "malformed-json": (b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', "corpus.jsonl:2: malformed JSON"),
    "duplicate-id": (b'{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', "corpus.jsonl:2: duplicate id"),
    "missing-text": (b'{"_id": "a", "text": "x"}\n{"_id": "b"}\n', "corpus.jsonl:2: missing text field"),
    "invalid-utf8": (b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "\xff\xfe"}\n', "corpus.jsonl:2: invalid UTF-8"),
    "empty-file": (b"", "corpus.jsonl: the file holds no documents"),
}


def test_bad_corpus_fails_on_one_line_and_leaves_no_index(tmp_path, tiny_model_dir):
    """One process builds from each bad corpus in turn, each in its own folder."""
    runs = []
    for case, (content, _) in BAD_CORPORA.items():
        (tmp_path / case).mkdir()
        (tmp_path / case / "corpus.jsonl").write_bytes(content)
        runs.append((tmp_path / case, ["build", str(tmp_path / case / "corpus.jsonl"), "--output",
                                       str(tmp_path / case / "indexes" / "bad"), "--model", str(tiny_model_dir),
                                       "--device", "cpu"]))
    for (case, (_, expected)), (code, said, _) in zip(BAD_CORPORA.items(), commands_in_one_process(runs)):
        error_lines = [line for line in said if line.startswith("error:")]
        assert code == 1 and len(error_lines) == 1 and expected in error_lines[0], (case, said)
        assert not any("Traceback" in line for line in said), said
        output = tmp_path / case / "indexes" / "bad"
        assert not output.exists()
        assert not output.parent.exists() or not list(output.parent.iterdir())


def test_build_search_evaluate_round_trip(tmp_path, tiny_model_dir, tiny_beir):
    runner = CliRunner()
    index = tmp_path / "idx"
    common = ["--device", "cpu", "--dtype", "fp32"]
    result = runner.invoke(main, ["build", str(tiny_beir), "--output", str(index), "--model", str(tiny_model_dir),
                                  *common])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["search", str(index), "honey bee", "--json", "-k", "3", *common])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)["hits"]
    assert [h["rank"] for h in hits] == [1, 2, 3] and all("title" in h and "text" in h for h in hits)
    run_file = tmp_path / "run.trec"
    result = runner.invoke(main, ["search", str(index), "--queries", str(tiny_beir / "queries.jsonl"),
                                  "--output", str(run_file), "-k", "5", *common])
    assert result.exit_code == 0, result.output
    lines = run_file.read_text().splitlines()
    assert len(lines) == 4 * 5 and lines[0].split()[1] == "Q0" and lines[0].split()[3] == "1"
    metrics_file = tmp_path / "metrics.json"
    result = runner.invoke(main, ["evaluate", "--run", str(run_file), "--dataset", str(tiny_beir),
                                  "--output", str(metrics_file)])
    assert result.exit_code == 0, result.output
    from_run = json.loads(metrics_file.read_text())
    result = runner.invoke(main, ["evaluate", "--index", str(index), "--dataset", str(tiny_beir), "-k", "5",
                                  "--output", str(metrics_file), *common])
    assert result.exit_code == 0, result.output
    from_index = json.loads(metrics_file.read_text())
    assert from_index["mean"]["recall@5"] == pytest.approx(from_run["mean"]["recall@5"])
    assert "answer_recall" in from_index and "answer recall" in result.output


def test_index_tunes_target_recall_on_a_queries_file(tmp_path, tiny_model_dir, tiny_beir):
    runner = CliRunner()
    shards, index = tmp_path / "shards", tmp_path / "idx"
    result = runner.invoke(main, ["encode", str(tiny_beir), "--output", str(shards), "--model", str(tiny_model_dir),
                                  "--device", "cpu"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["index", str(shards), "--corpus", str(tiny_beir), "--output", str(index),
                                  "--index-type", "hnsw", "--target-recall", "0.9", "--tuning-queries", "3",
                                  "--tuning-queries-file", str(tiny_beir)])
    assert result.exit_code == 0, result.output
    tuning = json.loads((index / "manifest.json").read_text())["index"]["tuning"]
    assert tuning["queries"] == "given queries" and tuning["sample_queries"] == 3


def test_search_with_other_pooling_is_refused(tmp_path, tiny_model_dir, tiny_beir):
    runner = CliRunner()
    index = tmp_path / "idx"
    runner.invoke(main, ["build", str(tiny_beir), "--output", str(index), "--model", str(tiny_model_dir),
                         "--device", "cpu"], catch_exceptions=False)
    result = runner.invoke(main, ["search", str(index), "honey", "--pooling", "cls", "--device", "cpu"])
    assert result.exit_code == 2  # a flag the index cannot take is a usage error, as build's --nlist with hnsw
    assert "different encoder" in result.output and "pooling 'cls'" in result.output
    assert "drop --pooling" in result.output and "search --help`)" in result.output, result.output
    for flags, message in ((["--nprobe", "4"], "--nprobe applies to IVF indexes, and this index is flat"),
                           (["--ef-search", "8"], "--ef-search applies to HNSW indexes, and this index is flat"),
                           (["--no-normalize"], "drop --no-normalize"),
                           (["--mode", "bm25", "--nprobe", "4"], "mode bm25 searches the BM25 part alone; drop "
                                                                 "--nprobe")):
        for command in (["search", str(index), "honey"], ["evaluate", "--index", str(index), "--dataset",
                                                          str(tiny_beir)]):
            result = runner.invoke(main, [*command, *flags, "--device", "cpu"])
            assert result.exit_code == 2 and message in result.output, result.output  # they exited 1
            assert f"{command[0]} --help`)" in result.output, result.output


def all_commands():
    yield "retriever", main
    for name, command in main.commands.items():
        yield f"retriever {name}", command


@pytest.mark.parametrize("name, command", list(all_commands()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_flag_has_help(name, command):
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help and len(param.help) > 10, f"{name} {param.opts} has no help"
    assert command.help, f"{name} has no description"
    result = CliRunner().invoke(main, [*name.split()[1:], "--help"])
    assert result.exit_code == 0


def test_search_and_evaluate_rank_tied_passages_alike(tmp_path, tiny_model_dir):
    """Four identical passages tie exactly and each is the one relevant passage of its own query: `evaluate`'s
    per-query MRR is 1/rank of that passage in `search`'s output only if both commands order the tie the same.
    Indexed in docid-descending order, so FAISS's own tie order (label descending) is not trec_eval's."""
    from fixtures_corpora import write_jsonl

    tied = ["t4", "t3", "t2", "t1"]
    dataset = tmp_path / "tied"
    (dataset / "qrels").mkdir(parents=True)
    write_jsonl(dataset / "corpus.jsonl", [{"_id": d, "title": "", "text": "honey bee flower"} for d in tied]
                + [{"_id": "o1", "title": "", "text": "volcano lava"}, {"_id": "o2", "title": "", "text": "ice"}])
    write_jsonl(dataset / "queries.jsonl", [{"_id": f"q{d}", "text": "honey bee flower"} for d in tied])
    (dataset / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{d}\t{d}\t1\n" for d in tied), encoding="utf-8")
    runner, cpu, index = CliRunner(), ["--device", "cpu", "--dtype", "fp32"], tmp_path / "idx"
    built = runner.invoke(main, ["build", str(dataset), "--output", str(index), "--model", str(tiny_model_dir), *cpu])
    assert built.exit_code == 0, built.output
    searched = runner.invoke(main, ["search", str(index), "honey bee flower", "--json", "-k", "6", *cpu])
    assert searched.exit_code == 0, searched.output
    hits = json.loads(searched.stdout)["hits"]
    assert len({h["score"] for h in hits if h["id"] in tied}) == 1  # they do tie
    rank = {h["id"]: h["rank"] for h in hits}
    evaluated = runner.invoke(main, ["evaluate", "--index", str(index), "--dataset", str(dataset), "-k", "6",
                                     "--metrics", "mrr@10", "--output", str(tmp_path / "metrics.json"), *cpu])
    assert evaluated.exit_code == 0, evaluated.output
    per_query = json.loads((tmp_path / "metrics.json").read_text())["per_query"]
    assert {d: per_query[f"q{d}"]["mrr@10"] for d in tied} == pytest.approx({d: 1 / rank[d] for d in tied})


@pytest.mark.parametrize("arguments, code", [(["pretrain", "{corpus}", "-o", "{output}", "--model", "minilm"], 1),
                                             (["pretrain", "{corpus}", "-o", "{output}", "--cocondenser",
                                               "--sequences-per-step", "2"], 2),
                                             (["train", "--no-such-flag"], 2)])
def test_under_torchrun_only_rank_zero_prints_errors(monkeypatch, tmp_path, arguments, code):
    """Every torchrun process meets the same error: rank 0 says it once, the others exit with its code silently,
    after waiting to be stopped: torchrun stops every process once one fails, so one that left first had rank 0
    stopped before it printed (a launch failed without an error line, most launches on a loaded machine)."""
    import retriever.cli

    waits = []
    monkeypatch.setattr(retriever.cli.time, "sleep", waits.append)
    (tmp_path / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{broken\n')
    arguments = [a.format(corpus=tmp_path / "corpus.jsonl", output=tmp_path / "out") for a in arguments]
    for rank, printed in (("0", True), ("1", False)):
        waits.clear()
        result = CliRunner().invoke(main, arguments, env={"RANK": rank, "LOCAL_RANK": rank})
        assert result.exit_code == code, result.output
        assert ("rror" in result.output) == printed, (rank, result.output)
        assert "Traceback" not in result.output
        assert waits == [] if printed else len(waits) == 1 and waits[0] >= retriever.cli.UNHEARD_WAIT_SECONDS


def test_under_torchrun_a_process_waits_twice_as_long_as_it_took_to_reach_its_unprinted_error(monkeypatch):
    """Rank 1 waited 30 s for torchrun to stop it; on a loaded machine importing torch to reach the error took half a
    minute or more, rank 0 at times over 30 s more, so rank 0 was stopped before it printed: no error line (a flaky
    test)."""
    import retriever.cli

    waits, clock = [], [1000.0, 1045.0]  # the command starts; it meets its error 45 s later
    monkeypatch.setattr(retriever.cli.time, "sleep", waits.append)
    monkeypatch.setattr(retriever.cli.time, "monotonic", lambda: clock.pop(0) if len(clock) > 1 else clock[0])
    result = CliRunner().invoke(main, ["train", "--no-such-flag"], env={"RANK": "1", "LOCAL_RANK": "1"})
    assert result.exit_code == 2 and "rror" not in result.output
    assert waits == [90.0]


def evaluate_raising(monkeypatch, tmp_path, error: BaseException):
    """`retriever evaluate` whose evaluation raises ``error``: how the CLI says a failure from anywhere."""
    import retriever.evaluation as evaluation  # `evaluate` imports it as it runs, so it meets the replacement

    def fails(*_, **__):
        raise error

    monkeypatch.setattr(evaluation, "evaluate_run_file", fails)
    (tmp_path / "run").write_text("q Q0 d 1 1.0 t\n")
    return CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run"), "--qrels", str(tmp_path / "run")])


@pytest.mark.parametrize("error, shown", [
    (OSError(errno.ENOSPC, "No space left on device", "idx/docstore.arrow"),
     "no space left on the device writing idx/docstore.arrow"),
    (RuntimeError("Error in faiss::FileIOWriter: write error in .part-00003.faiss.tmp-9 (No space left on device)"),
     "no space left on the device (Error in faiss::FileIOWriter: write error in .part-00003.faiss.tmp-9"),
    (OSError("84305 requested and 4064 written"),  # numpy's np.save on a full disk: no errno (a traceback)
     "no space left on the device (84305 requested and 4064 written)"),
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 43968 vs 43856"),  # torch.save's
     "no space left on the device ([enforce fail at inline_container.cc:672] . unexpected pos 43968 vs 43856)"),
    (type("SafetensorError", (Exception,), {})("Error while serializing: I/O error: No space left on device (os "
                                               "error 28)"),  # not an OSError: a traceback
     "no space left on the device (Error while serializing: I/O error: No space left on device (os error 28))"),
])
def test_a_full_disk_anywhere_is_one_line(monkeypatch, tmp_path, error, shown):
    result = evaluate_raising(monkeypatch, tmp_path, error)
    assert result.exit_code == 1 and result.output.startswith(f"error: {shown}"), result.output
    assert result.output.strip().endswith("free some space (or choose another path) and rerun the same command "
                                          "(it starts over: nothing of this run is kept)")
    assert result.output.count("\n") == 1


@pytest.mark.parametrize("error, shown", [
    (MemoryError(), "out of memory (MemoryError)"),
    (MemoryError("malloc of size 64 failed"), "out of memory (malloc of size 64 failed)"),  # Arrow's
    (RuntimeError("Error in faiss::IndexIVF: std::bad_alloc"),
     "out of memory (Error in faiss::IndexIVF: std::bad_alloc)"),
    (OSError(errno.ENOMEM, "Cannot allocate memory"), "out of memory ([Errno 12] Cannot allocate memory)"),
    (RuntimeError("Error in void faiss::OnDiskInvertedLists::do_mmap() at /project/faiss/faiss/invlists/OnDiskInverted"
                  "Lists.cpp:285: Error: 'ptro != MAP_FAILED' failed: could not mmap i.ivfdata: Cannot allocate memory"),
     "out of memory ('ptro != MAP_FAILED' failed: could not mmap i.ivfdata: Cannot allocate memory)"),
])
def test_memory_running_out_anywhere_is_one_line(monkeypatch, tmp_path, error, shown):
    """As a full disk: a limit of the machine (e.g. `ulimit -v`), said in one line with what to do (a traceback);
    FAISS's reason without the C++ function and source line it prefixes, as opening an index says it."""
    result = evaluate_raising(monkeypatch, tmp_path, error)
    assert result.exit_code == 1 and result.output.startswith(f"error: {shown}; free some memory"), result.output
    assert "ulimit -v" in result.output and result.output.count("\n") == 1


def test_info_shows_the_bm25_part_and_the_tuned_fusion(tmp_path, tiny_model_dir, tiny_beir):
    import shutil

    runner = CliRunner()
    index = tmp_path / "idx"
    result = runner.invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                  "--no-bm25", "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["info", str(index)])
    assert result.exit_code == 0 and f"bm25:     none (add one with `retriever bm25 {index}`)" in result.output
    result = runner.invoke(main, ["bm25", str(index), "--bm25-k1", "1.2", "--bm25-b", "0.75"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["info", str(index)])
    assert "bm25:     k1=1.2 b=0.75 (lucene), stemmer english, stopwords en, 12 documents, " in result.output
    assert "fusion:   none recorded (hybrid uses rrf rrf_k=60" in result.output
    shutil.move(tiny_beir / "qrels" / "test.tsv", tiny_beir / "qrels" / "train.tsv")  # tuning refuses test queries
    result = runner.invoke(main, ["bm25", str(index), "--overwrite", "--bm25-stopwords", "none",
                                  "--tune-fusion-on", str(tiny_beir)])
    assert result.exit_code == 0, result.output
    manifest = json.loads((index / "manifest.json").read_text())
    fusion, tuned = manifest["fusion"], manifest["fusion"]["tuned"]
    result = runner.invoke(main, ["info", str(index), "--json"])
    summary = json.loads(result.output)
    assert summary["bm25"] == {"k1": 0.9, "b": 0.4, "method": "lucene", "stemmer": "english", "stopwords": None,
                               "documents": 12, "vocabulary": manifest["lexical"]["vocabulary"],
                               "terms": manifest["lexical"]["vocabulary"] - 1, "damage": None,  # less bm25s's ""
                               "current_splitting": True}
    assert summary["fusion"] == {"method": fusion["method"], "rrf_k": fusion["rrf_k"], "alpha": fusion["alpha"],
                                 "depth": fusion["depth"], "tuned": {
                                     "dataset": "tiny-beir", "split": "train", "queries": 4, "metric": "ndcg@10",
                                     "score": tuned["score"], "untuned_rrf": tuned["untuned_rrf"]}, "damage": None}
    result = runner.invoke(main, ["info", str(index)])
    setting = f"alpha={fusion['alpha']:g}" if fusion["method"] == "convex" else f"rrf_k={fusion['rrf_k']:g}"
    assert (f"fusion:   {fusion['method']} {setting}, depth {fusion['depth']}, tuned on tiny-beir train "
            f"(4 queries, ndcg@10 {tuned['score']}; untuned RRF {tuned['untuned_rrf']})") in result.output
    assert "stopwords none" in result.output


def test_ctrl_c_is_one_line_and_the_shells_exit_code(monkeypatch, tmp_path):
    """click said `Aborted!` with exit 1, the code of a failed command, so a script could not tell the two apart."""
    result = evaluate_raising(monkeypatch, tmp_path, KeyboardInterrupt())
    assert result.exit_code == 130 and result.output.startswith("error: interrupted (Ctrl-C); "), result.output
    assert result.output.count("\n") == 1


@pytest.mark.parametrize("module, arguments, shown", [
    ("retriever.corpus", ["serve", "--help"], "error: interrupted (Ctrl-C) while starting; nothing was done\n"),
    ("retriever.info", ["info", "."], "error: interrupted (Ctrl-C); outputs are written under their names only "),
])
def test_ctrl_c_while_the_commands_import_is_one_line_and_130(module, arguments, shown):
    """Modules take seconds to import on a loaded machine (torch, FAISS); a Ctrl-C then, as `serve` started, was a
    KeyboardInterrupt traceback through importlib. The interrupt is raised here as one import starts: one the CLI
    makes to list its commands, or one a command makes for its work."""
    code = ("import sys\n"
            "class Interrupt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name == {module!r}:\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "from retriever.cli import main\n"
            "main()\n")
    result = subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True, timeout=120)
    assert result.returncode == 130 and result.stderr.startswith(shown) and result.stderr.count("\n") == 1, \
        result.stderr


HELP_AND_USAGE_ERRORS = [(["--help"], 0), *(([name, "--help"], 0) for name in sorted(main.commands)),
                         (["serch"], 2), (["search", "--k", "many", "idx", "q"], 2), (["build", "--index-type"], 2)]


def test_help_and_usage_errors_import_no_heavy_library(tmp_path, tiny_flat_build):
    """Every command, even `--help` or a typo, took seconds before answering: importing the CLI imported torch,
    transformers and FAISS. Only the work itself imports them now, and only what it uses: scoring a run file
    (`evaluate --run`) and a bm25 search need no model, so neither torch nor transformers (both imported torch, through
    the searcher and its device check)."""
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n")
    (tmp_path / "qrels.tsv").write_text("q1\td2\t1\n")
    (tmp_path / "q.jsonl").write_text('{"_id": "q1", "text": "honey"}\n')
    shutil.copytree(tiny_flat_build, tmp_path / "idx")
    without_model = [(["evaluate", "--run", "run.trec", "--qrels", "qrels.tsv"], 0),
                     (["search", "idx", "honey", "--mode", "bm25"], 0),
                     (["search", "idx", "--queries", "q.jsonl", "--mode", "bm25", "-o", "run.out"], 0)]
    runs = [*HELP_AND_USAGE_ERRORS, *without_model]
    answers = commands_in_one_process([(tmp_path, arguments) for arguments, _ in runs])
    assert [(code, imported) for code, _, imported in answers[:len(HELP_AND_USAGE_ERRORS)]] == \
        [(code, []) for _, code in HELP_AND_USAGE_ERRORS]
    for (arguments, _), (code, _, imported) in zip(without_model, answers[len(HELP_AND_USAGE_ERRORS):]):
        assert code == 0 and not {"torch", "transformers"} & set(imported), (arguments, code, imported)


@pytest.mark.parametrize("command", ["encode", "build"])
@pytest.mark.parametrize("name, said", [("a" * 300, "bytes long"), ("bad\udcff\udcfename", "is not valid UTF-8")])
def test_an_output_name_the_file_system_or_arrow_cannot_take_is_one_line_and_leaves_nothing(tmp_path, tiny_model_dir,
                                                                                            tiny_beir, command, name,
                                                                                            said):
    """A name over the file system's 255 bytes (an ENAMETOOLONG traceback) or holding bytes that are not UTF-8
    (Arrow's UnicodeEncodeError traceback once the first shard was written, as FAISS takes UTF-8 paths too)."""
    before = sorted(tmp_path.iterdir())
    result = CliRunner().invoke(main, [command, str(tiny_beir), "--model", str(tiny_model_dir), "--device", "cpu",
                                       "-o", str(tmp_path / name)])
    assert result.exit_code == 1 and result.output.startswith("error: ") and said in result.output, result.output
    assert result.output.count("\n") == 1 and sorted(tmp_path.iterdir()) == before


def test_a_name_too_long_anywhere_is_one_line(tmp_path):
    """`evaluate -o`, `search -o` or `mine -o` into a folder whose name is over the file system's limit: an
    ENAMETOOLONG traceback (a file's own name too long is refused with its limit, `tests/cli/test_options.py`)."""
    (tmp_path / "run").write_text("q Q0 d 1 1.0 t\n")
    result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run"), "--qrels", str(tmp_path / "run"),
                                       "-o", str(tmp_path / ("m" * 300) / "m.json")])
    assert result.exit_code == 1 and result.output.startswith("error: "), result.output
    assert "longer than the file system takes" in result.output and result.output.count("\n") == 1
