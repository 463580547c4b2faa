"""`encode`, `index` and `build` refuse bad outputs and settings in one line, before any encoding."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixtures_corpora import write_jsonl
from fixtures_processes import commands_in_one_process
from retriever.cli import main


def _one_line_error(arguments: list[str], expected: str) -> None:
    """The command, run here (a process of its own cost seconds of imports), exits 1 with one error line and no
    traceback: an exception the CLI did not turn into its line would be the runner's, with no such line."""
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (result.exception, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], result.stderr


# (an unknown --bm25-stemmer or --bm25-stopwords is a usage error, exit 2: tests/cli/test_hybrid_cli.py)
BUILD_REFUSALS = ["victim-folder", "victim-file", "shards-file", "dot-not-an-index"]


def _refused_build(folder: Path, case: str) -> tuple[str, list[str], str]:
    """The output, extra flags and expected error of one refused build in ``folder`` (made here, with its corpus)."""
    folder.mkdir()
    write_jsonl(folder / "c.jsonl", [{"_id": "a", "text": "hello world"}, {"_id": "b", "text": "bye"}])
    output, extra = "out", []
    if case == "victim-folder":
        (folder / "out").mkdir()
        (folder / "out" / "notes.txt").write_text("mine")
        extra, expected = ["--overwrite"], "out: exists and is not an index folder"
    elif case == "victim-file":
        (folder / "out").write_text("mine")
        extra, expected = ["--overwrite"], "out: exists and is not an index folder"
    elif case == "shards-file":
        (folder / "out.shards").write_text("mine")
        expected = "out.shards: is a file where the build keeps its shards folder"
    else:
        output, extra, expected = ".", ["--overwrite"], f"{folder}: exists and is not an index folder"
    return output, extra, expected


def test_build_refuses_before_encoding(tmp_path, tiny_model_dir):
    """Each case's build runs in its own folder (its working directory), one process running them in turn."""
    runs, expectations = [], []
    for case in BUILD_REFUSALS:
        folder = tmp_path / case
        output, extra, expected = _refused_build(folder, case)
        expectations.append((case, folder, expected, sorted(p.name for p in folder.iterdir())))
        runs.append((folder, ["build", str(folder / "c.jsonl"), "-o", output, "--model", str(tiny_model_dir),
                              "--device", "cpu", *extra]))
    for (case, folder, expected, before), (code, said, _) in zip(expectations, commands_in_one_process(runs)):
        errors = [line for line in said if line.startswith("error:")]
        assert code == 1 and not any("Traceback" in line for line in said), (case, said)
        assert len(errors) == 1 and expected in errors[0], (case, said)
        assert not any("encode w0/1" in line for line in said), f"{case}: refused only after encoding"
        assert sorted(p.name for p in folder.iterdir()) == before, case
        if case.startswith("victim"):
            assert (folder / "out" / "notes.txt" if case == "victim-folder" else folder / "out").read_text() == "mine"


@pytest.mark.parametrize("command", ["build", "index"])
@pytest.mark.parametrize("index_type, said", [
    ("Flatt", "Invalid value for '--index-type': FAISS cannot read 'Flatt' as an index type (could not parse index "
              "string Flatt); give flat, hnsw, ivfpq, ivf-ondisk or a FAISS factory string"),
    ("IVF,Flat", "Invalid value for '--index-type': FAISS cannot read 'IVF,Flat' as an index type"),
    ("IDMap,Flat", "--index-type 'IDMap,Flat': IDMap indexes are not supported")])
def test_an_index_type_faiss_cannot_read_is_a_usage_error_before_the_model_or_shards_are_read(
        tmp_path, tiny_model_dir, monkeypatch, command, index_type, said):
    """Exit 1, and for `build` only once the model had loaded (4.6 s with the default model); `index` read the
    shards first (here an empty folder, which it would have refused)."""
    import retriever.encoder

    monkeypatch.setattr(retriever.encoder, "load_model", None)  # a model loading fails the test with a TypeError
    write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}])
    source = (["build", str(tmp_path / "c.jsonl"), "--model", str(tiny_model_dir)] if command == "build"
              else ["index", str(tmp_path), "--corpus", str(tmp_path / "c.jsonl")])
    result = CliRunner().invoke(main, [*source, "-o", str(tmp_path / "out"), "--index-type", index_type])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {said}") and result.stderr.count("\n") == 1, result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["c.jsonl"]


def test_bm25_on_a_folder_without_its_doc_store_is_one_line(tmp_path, tiny_dense_build):
    """A copy of the session's build without BM25 (a `build --no-bm25` process here cost seconds of imports)."""
    shutil.copytree(tiny_dense_build, tmp_path / "idx")
    (tmp_path / "idx" / "docstore.parquet").unlink()
    _one_line_error(["bm25", str(tmp_path / "idx")], "docstore.parquet: missing; the index folder is damaged")


def test_encode_into_a_file_is_one_line(tmp_path, tiny_model_dir):
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}])
    (tmp_path / "afile").write_text("mine")
    _one_line_error(["encode", str(corpus), "-o", str(tmp_path / "afile"), "--model", str(tiny_model_dir)],
                    "afile: is a file, not a folder")
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("output", ["", "  "])
def test_encode_into_an_empty_output_name_is_a_usage_error(tmp_path, tiny_model_dir, monkeypatch, output):
    """`encode c.jsonl -o "$SHARDS"` with SHARDS unset wrote the shards and done marker into the working folder, exit 0:
    an empty path is the current folder to pathlib (probe round 17)."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}])
    result = CliRunner().invoke(main, ["encode", "c.jsonl", "-o", output, "--model", str(tiny_model_dir)])
    assert result.exit_code == 2 and "Invalid value for '--output' / '-o': the name is empty (an unset shell " \
        "variable?); give the folder's name, or . for the working folder" in result.output, result.output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["c.jsonl"]



@pytest.mark.parametrize("command", ["build", "index"])
def test_build_or_index_into_an_empty_output_name_is_a_usage_error(tmp_path, monkeypatch, command):
    """`build c.jsonl -o "$INDEX"` with INDEX unset was read as the working folder (pathlib's '.'): refused as
    "exists and is not an index folder" naming that folder, and built into it where it was empty (session 21)."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}])
    (tmp_path / "shards").mkdir()
    first = ["build", "c.jsonl"] if command == "build" else ["index", "shards", "--corpus", "c.jsonl"]
    before = sorted(path.name for path in tmp_path.iterdir())
    result = CliRunner().invoke(main, [*first, "-o", ""])
    assert result.exit_code == 2 and "Invalid value for '--output' / '-o': the name is empty" in result.output, \
        result.output
    assert sorted(path.name for path in tmp_path.iterdir()) == before


@pytest.mark.parametrize("command", ["encode", "build", "index"])
def test_dash_as_an_output_folder_is_refused_not_made(tmp_path, monkeypatch, command):
    """`build c.jsonl -o -` made a folder named '-' (exit 0), where `-o -` is standard output for `search` and
    refused by the other commands writing files."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}])
    (tmp_path / "shards").mkdir()
    first = {"encode": ["encode", "c.jsonl"], "build": ["build", "c.jsonl"],
             "index": ["index", "shards", "--corpus", "c.jsonl"]}[command]
    result = CliRunner().invoke(main, [*first, "-o", "-"])
    assert result.exit_code == 2 and "Invalid value for '--output' / '-o': '-' is not standard output here: this " \
        "command writes a folder; give its name (./- for a folder named '-')" in result.output, result.output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["c.jsonl", "shards"]


FLAG_PAIRS = [
    (["build", "--index-type", "ivf-ondisk", "--ray", "--parallel-parts", "2"],
     "--parallel-parts sets worker processes on this machine; with --ray, parts are Ray tasks"),
    (["index", "--index-type", "ivf-ondisk", "--ray", "--parallel-parts", "2"],
     "--parallel-parts sets worker processes on this machine; with --ray, parts are Ray tasks"),
    (["index", "--ray"], "--ray fills the parts of an ivf-ondisk index"),
    (["encode", "--worker-index", "2", "--num-workers", "2"],
     "Invalid value for '--worker-index': 2 is not below --num-workers 2 (workers are numbered 0 to 1)"),
    (["encode", "--ray-workers", "4"], "--ray-workers is used only with --ray"),
    (["build", "--ray-cpus-per-worker", "2"], "--ray-cpus-per-worker is used only with --ray"),
    (["index", "--index-type", "ivf-ondisk", "--ray-workers", "2"], "--ray-workers is used only with --ray"),
]


def test_flag_pairs_that_cannot_go_together_are_usage_errors_before_encoding(tmp_path, tiny_model_dir):
    """`build --ray --parallel-parts` encoded the whole corpus, then refused the pair with exit code 1; the other
    pairs were refused with exit code 1 too, where a bad flag is a usage error (exit code 2). They are refused
    before torch and transformers load (seconds)."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}, {"_id": "b", "text": "bye"}])
    runs = []
    for number, (args, _) in enumerate(FLAG_PAIRS):
        command, *flags = args
        folder = tmp_path / str(number)
        folder.mkdir()
        source = ["index", str(folder), "--corpus", str(corpus)] if command == "index" else [command, str(corpus)]
        model = [] if command == "index" else ["--model", str(tiny_model_dir)]
        runs.append((folder, [*source, "--output", str(folder / "out"), *model, *flags]))
    for number, ((args, expected), (code, said, imported)) in enumerate(zip(FLAG_PAIRS,
                                                                             commands_in_one_process(runs))):
        assert code == 2 and len(said) == 1 and said[0].startswith(f"error: {expected}"), said
        assert said[0].endswith(f"retriever {args[0]} --help`)"), said
        assert "torch" not in imported and "transformers" not in imported, (args, imported)
        assert not (tmp_path / str(number) / "out").exists() and not (tmp_path / str(number) / "out.shards").exists()


@pytest.mark.parametrize("index_type, flags", [
    ("flat", ["--hnsw-m", "8"]), ("hnsw", ["--nlist", "64"]), ("flat", ["--ef-construction", "40"]),
    ("hnsw", ["--pq-m", "4"]), ("ivfpq", ["--ondisk-codes", "fp16"]), ("ivfpq", ["--part-size", "4"]),
    ("hnsw", ["--parallel-parts", "2"]), ("HNSW8,Flat", ["--hnsw-m", "16"]), ("hnsw", ["--refine-k-factor", "3"]),
    ("flat", ["--train-size", "5"]), ("hnsw", ["--train-size", "5"]),
])
def test_a_build_flag_the_index_type_does_not_use_is_refused(tmp_path, index_type, flags):
    """`--nlist 64 --index-type hnsw` built the default graph and exited 0, the flag ignored without a word."""
    result = CliRunner().invoke(main, ["index", str(tmp_path), "--corpus", str(tmp_path), "-o", str(tmp_path / "i"),
                                       "--index-type", index_type, *flags])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {flags[0]} is used only by ") and result.stderr.count("\n") == 1
    assert f"not by --index-type {index_type!r}; drop it or choose an index type that uses it" in result.stderr


@pytest.mark.parametrize("command", ["build", "index"])
@pytest.mark.parametrize("index_type", ["HNSW8,Flat", "SQfp16", "Flat"])
def test_train_size_with_a_factory_string_that_trains_nothing_is_refused(tmp_path, tiny_model_dir, command,
                                                                         index_type):
    """As with flat/hnsw: `--train-size 5 --index-type 'HNSW8,Flat'` built the graph and exited 0, the flag ignored.
    FAISS builds the string to tell, so the check waits for the vectors' width, still before any encoding."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}, {"_id": "b", "text": "bye"}])
    model = ["--model", str(tiny_model_dir), "--device", "cpu", "--dtype", "fp32"]
    if command == "index":
        assert CliRunner().invoke(main, ["encode", str(corpus), "-o", str(tmp_path / "shards"), *model]).exit_code == 0
    source = ["index", str(tmp_path / "shards"), "--corpus", str(corpus)] if command == "index" else \
        ["build", str(corpus), *model]
    result = CliRunner().invoke(main, [*source, "-o", str(tmp_path / "out"), "--index-type", index_type,
                                       "--train-size", "5"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: --train-size is used only by an index that is trained") \
        and result.stderr.count("\n") == 1, result.stderr
    assert f"not by --index-type {index_type!r}, which trains nothing; drop it" in result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.shards").exists()


@pytest.mark.parametrize("index_type, flags", [
    ("hnsw", ["--hnsw-m", "8", "--ef-construction", "40"]), ("HNSW8,Flat", ["--ef-construction", "40"]),
    ("ivfpq", ["--nlist", "2", "--pq-m", "4"]), ("ivf-ondisk", ["--nlist", "2", "--part-size", "4",
                                                               "--parallel-parts", "1", "--ondisk-codes", "fp16"]),
    ("IVF2,PQ4,RFlat", ["--refine-k-factor", "3"]), ("ivfpq", ["--train-size", "5"]),
    ("IVF2,Flat", ["--train-size", "5"]),
    ("hnsw", ["--target-recall", "0.9", "--tuning-queries", "5"]),
])
def test_build_flags_the_index_type_uses_pass_the_check(tmp_path, index_type, flags):
    result = CliRunner().invoke(main, ["index", str(tmp_path), "--corpus", str(tmp_path), "-o", str(tmp_path / "i"),
                                       "--index-type", index_type, *flags])
    assert result.exit_code == 1 and "is used only by" not in result.stderr, result.output  # refused later: no shards


@pytest.mark.parametrize("flags", [["--tuning-queries", "5"], ["--tuning-queries-file", "QUERIES"]])
def test_a_tuning_flag_without_target_recall_is_refused(tmp_path, flags):
    """`--tuning-queries 5` without --target-recall built the index untuned and exited 0; `--tuning-queries-file`
    loaded the model and encoded the queries before the library refused them, with exit code 1."""
    queries = write_jsonl(tmp_path / "q.jsonl", [{"_id": "q1", "text": "hello"}])
    flags = [str(queries) if flag == "QUERIES" else flag for flag in flags]
    result = CliRunner().invoke(main, ["index", str(tmp_path), "--corpus", str(queries), "-o", str(tmp_path / "i"),
                                       "--index-type", "hnsw", *flags])
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"error: {flags[0]} is used only with --target-recall (what recall is measured on); add "
                             "--target-recall or drop it (see `main index --help`)\n")


@pytest.mark.parametrize("command", [["index", "SHARDS", "--corpus", "FIFO", "-o", "OUT"],
                                     ["build", "FIFO", "-o", "OUT"]])
def test_a_fifo_corpus_is_refused_before_it_is_read(tmp_path, command):
    """The second read of a FIFO (build and index read the corpus twice) waited for ever (probe round 9)."""
    import os
    import threading

    (tmp_path / "shards").mkdir()
    os.mkfifo(tmp_path / "c.jsonl")
    paths = {"SHARDS": tmp_path / "shards", "FIFO": tmp_path / "c.jsonl", "OUT": tmp_path / "out"}
    results = []
    arguments = [str(paths.get(a, a)) for a in command]
    run = threading.Thread(target=lambda: results.append(CliRunner().invoke(main, arguments)), daemon=True)
    run.start()
    run.join(60)
    assert results, f"`retriever {command[0]}` is still waiting on the FIFO"
    assert results[0].exit_code == 1 and "is a pipe or a device, not a file" in results[0].output


@pytest.mark.parametrize("ray", [False, True])
def test_encode_of_a_pipe_without_format_is_refused_before_the_model_or_ray(tmp_path, monkeypatch, ray):
    """A pipe (`encode /dev/stdin`) has no name to tell its format by: the refusal came after the model loaded,
    and with --ray after Ray started (about 10 s)."""
    import os

    import retriever.cli.indexing as cli_indexing
    from retriever.encoder_settings import EncoderSettings

    def loaded(*args, **kwargs):
        raise AssertionError("the model or Ray was loaded before the format was refused")

    monkeypatch.setattr(cli_indexing, "passage_encoder", loaded)
    monkeypatch.setattr(EncoderSettings, "for_model", loaded)
    os.mkfifo(tmp_path / "corpus")
    result = CliRunner().invoke(main, ["encode", str(tmp_path / "corpus"), "-o", str(tmp_path / "out"),
                                       *(["--ray"] if ray else [])])
    assert result.exit_code == 1 and not isinstance(result.exception, AssertionError), result.output
    assert (f"{tmp_path / 'corpus'}: a pipe or device has no file name to tell its format by; pass --format jsonl "
            "or tsv") in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change", ["moved", "replaced"])
def test_index_tuning_on_queries_when_the_shards_model_is_gone_names_what_index_takes(tmp_path, tiny_beir, change):
    """`index --tuning-queries-file` loads the shards' model to encode the queries; when it had moved away (or been
    replaced) the advice said to pass --model, a flag `index` does not have."""
    from fixtures_models import make_tiny_bert
    from retriever.corpus_encoding import encode_corpus
    from retriever.encoder import Encoder, EncoderSettings

    model = make_tiny_bert(tmp_path / "model", seed=2)
    encode_corpus(tiny_beir, tmp_path / "shards", Encoder(EncoderSettings(model=str(model)), device="cpu",
                                                          dtype="fp32"), shard_size=6, progress=False)
    model.rename(tmp_path / "model-away")
    if change == "replaced":
        make_tiny_bert(tmp_path / "model", seed=3)
    result = CliRunner().invoke(main, ["index", str(tmp_path / "shards"), "--corpus", str(tiny_beir), "-o",
                                       str(tmp_path / "idx"), "--index-type", "hnsw", "--target-recall", "0.9",
                                       "--tuning-queries-file", str(tiny_beir)])
    assert result.exit_code == 1 and "--model" not in result.output, result.output
    assert ("put the model the shards were encoded with back where they record it, or drop --tuning-queries-file "
            "(--target-recall then tunes on held-out passages, which needs no model)") in result.output
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("corpus", ["c.dat", "fifo"])
def test_build_refuses_a_corpus_it_cannot_read_before_the_model_or_ray(tmp_path, monkeypatch, corpus):
    """`build` of a file whose name tells no format, or of a pipe (read twice), was refused only after the model
    loaded (with --ray, after Ray started)."""
    import os

    import retriever.cli.indexing as cli_indexing
    from retriever.encoder_settings import EncoderSettings

    def loaded(*args, **kwargs):
        raise AssertionError("the model or Ray was loaded before the corpus was refused")

    monkeypatch.setattr(cli_indexing, "passage_encoder", loaded)
    monkeypatch.setattr(EncoderSettings, "for_model", loaded)
    path = tmp_path / corpus
    os.mkfifo(path) if corpus == "fifo" else path.write_text('{"_id": "a", "text": "hello"}\n')
    result = CliRunner().invoke(main, ["build", str(path), "-o", str(tmp_path / "out"), "--ray"])
    assert result.exit_code == 1 and not isinstance(result.exception, AssertionError), result.output
    assert ("is a pipe or a device, not a file" if corpus == "fifo" else "cannot tell the format from the "
            "extension; pass --format jsonl, tsv or parquet") in result.output


@pytest.mark.parametrize("command", ["encode", "build"])
def test_a_pyserini_corpus_without_field_flags_is_refused_before_the_model_naming_its_keys(tmp_path, monkeypatch,
                                                                                          command):
    """A Pyserini JSONL corpus ({"id", "contents"}) under the default _id/text was refused only once the model had
    loaded (with --ray, once Ray had started), and the error did not say which keys the records hold."""
    import retriever.cli.indexing as cli_indexing
    from retriever.encoder_settings import EncoderSettings

    def loaded(*args, **kwargs):
        raise AssertionError("the model or Ray was loaded before the corpus was refused")

    monkeypatch.setattr(cli_indexing, "passage_encoder", loaded)
    monkeypatch.setattr(EncoderSettings, "for_model", loaded)
    path = tmp_path / "pyserini.jsonl"
    path.write_text('{"id": "a", "contents": "hello"}\n')
    result = CliRunner().invoke(main, [command, str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1 and not isinstance(result.exception, AssertionError), result.output
    assert "pyserini.jsonl:1: missing id field '_id' (its keys: contents, id); pass --id-field" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, said", [(["--id-field", "pid", "--text-field", "pid"], "--text-field both name 'pid'"),
                                         (["--id-field", "title"], "--title-field both name 'title'")])
def test_an_id_field_that_is_also_the_text_or_title_field_is_a_usage_error(tmp_path, flags, said):
    """`encode --id-field pid --text-field pid` was taken: every passage's text was its id, encoded without a word."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"pid": "a", "title": "t", "text": "hello"}\n')
    result = CliRunner().invoke(main, ["encode", str(path), "-o", str(tmp_path / "out"), *flags])
    assert result.exit_code == 2 and f"--id-field and {said}" in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_a_tuning_queries_file_keyed_otherwise_does_not_send_the_user_to_the_corpus_flags(tmp_path):
    """A --tuning-queries-file whose queries are keyed 'id' said to pass --id-field, which build and index apply to
    the corpus, not to that file (probe round 16)."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "d1", "text": "hello"}])
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q1", "text": "hello"}])
    result = CliRunner().invoke(main, ["build", str(corpus), "-o", str(tmp_path / "i"), "--index-type", "hnsw",
                                       "--target-recall", "0.9", "--tuning-queries-file", str(queries)])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {queries}:1: missing id field '_id' (its keys: id, text); "), result.stderr
    assert "pass --id-field" not in result.stderr and "rename the keys" in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["build", "index"])
def test_an_output_folder_past_the_systems_path_limit_says_so_not_that_a_name_is_too_long(tmp_path, command):
    """500 folders of 8 letters as -o: 'a name in the path is longer than the file system takes (often 255 bytes)',
    where no name is; the whole path is past PATH_MAX (4096 bytes on Linux), as `-o FILE` already said."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "hello world"}])
    target = str(tmp_path / "/".join(["abcdefgh"] * 500) / "idx")
    source = ["build", str(corpus)] if command == "build" else ["index", str(tmp_path), "--corpus", str(corpus)]
    result = CliRunner().invoke(main, [*source, "-o", target, "--no-bm25"])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr[-300:]
    assert "bytes long as an absolute path, and the names made in it add up to 100 more; the system takes paths of " \
           "at most" in result.stderr and "choose a shorter --output" in result.stderr, result.stderr[-300:]
    assert not (tmp_path / "abcdefgh").exists()


def test_index_encodes_its_tuning_queries_on_the_device_and_dtype_given(tmp_path, tiny_beir, tiny_model_dir,
                                                                        monkeypatch):
    """`index --tune-fusion-on D` (and --tuning-queries-file) had no --device/--dtype, so its queries were always
    encoded with auto (bf16 on a CPU with native bf16), while `build` and `bm25` pass theirs on."""
    import retriever.encoder
    import retriever.fusion_tuning as fusion_tuning
    from retriever.corpus_encoding import encode_corpus
    from retriever.encoder import Encoder, EncoderSettings

    calls, recorded_encoder = [], retriever.encoder.recorded_encoder
    monkeypatch.setattr(fusion_tuning, "tune_and_record", lambda *args, **kwargs: calls.append(kwargs))
    monkeypatch.setattr(retriever.encoder, "recorded_encoder", lambda *args, **kwargs: (
        calls.append({"device": args[3], "dtype": args[4]}), recorded_encoder(*args, **kwargs))[1])
    for split, judged in [("train", "q1\td6"), ("test", "q3\td10")]:  # a tuning split apart from the test queries
        (tiny_beir / "qrels" / f"{split}.tsv").write_text(f"query-id\tcorpus-id\tscore\n{judged}\t1\n")
    encode_corpus(tiny_beir, tmp_path / "shards", Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu",
                                                          dtype="fp32"), progress=False)
    index = ["index", str(tmp_path / "shards"), "--corpus", str(tiny_beir), "-o", str(tmp_path / "idx")]
    result = CliRunner().invoke(main, [*index, "--dtype", "fp32"])
    assert result.exit_code == 2 and "--dtype sets how the queries of --tune-fusion-on" in result.output, result.output
    result = CliRunner().invoke(main, [*index, "--tune-fusion-on", str(tiny_beir), "--device", "cpu", "--dtype",
                                       "fp16"])
    assert result.exit_code == 1 and "fp16" in result.output and not (tmp_path / "idx").exists(), result.output
    result = CliRunner().invoke(main, [*index, "--index-type", "hnsw", "--target-recall", "0.5",
                                       "--tuning-queries-file", str(tiny_beir), "--tune-fusion-on", str(tiny_beir),
                                       "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    assert [(call["device"], call["dtype"]) for call in calls] == [("cpu", "fp32")] * 2
