"""`search`, `evaluate` and `mine` output paths: one that could never be written is refused before any work."""
from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from retriever.cli import main


@pytest.mark.parametrize("command, flag", [
    (["search", "{index}", "--queries", "{queries}"], "-o"),
    (["evaluate", "--index", "{index}", "--dataset", "{index}"], "--save-run"),
    (["evaluate", "--run", "{queries}", "--qrels", "{queries}"], "-o"),
    (["mine", "{index}", "--dataset", "{index}"], "-o"),
])
def test_an_output_under_a_file_or_onto_a_folder_is_refused_before_the_index_is_opened(tmp_path, command, flag):
    index = tmp_path / "not-an-index"  # never opened: the path check comes first
    index.mkdir()
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"_id": "q1", "text": "cat"}\n')
    args = [part.format(index=index, queries=queries) for part in command]
    for target, message in ((queries / "run.trec", "is a file, so"), (index, "is a directory")):
        result = CliRunner().invoke(main, [*args, flag, str(target)])
        assert result.exit_code == 2 and message in result.output, result.output
    assert queries.read_text() == '{"_id": "q1", "text": "cat"}\n'


def test_batch_search_names_standard_input_and_warns_of_empty_queries(tmp_path, tiny_beir, tiny_model_dir):
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False, lexical=None)
    common = ["search", str(tmp_path / "idx"), "--queries", "-", "-k", "2", "--device", "cpu", "--dtype", "fp32"]
    result = CliRunner().invoke(main, common, input='{"_id": "q1"}\n')
    assert result.exit_code == 1 and "error: standard input:1: missing text field 'text'" in result.output
    result = CliRunner().invoke(main, common, input='{"_id": "qe", "text": " "}\n{"_id": "q1", "text": "cat"}\n')
    assert result.exit_code == 0, result.output
    assert "warning: 1 of 2 queries has empty text (e.g. 'qe')" in result.output


def test_evaluate_and_mine_warn_of_empty_judged_queries(tmp_path, tiny_beir, tiny_model_dir):
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False, lexical=None)
    queries = tiny_beir / "queries.jsonl"
    queries.write_text(queries.read_text().replace('"hot lava rock"', '" "'))
    common = ["--dataset", str(tiny_beir), "--split", "test", "--device", "cpu", "--dtype", "fp32"]
    warnings = {"evaluate": "warning: 1 of 4 queries has empty text (e.g. 'q2')",
                "mine": "warning: 1 of the 4 queries split 'test' judges has empty text (e.g. 'q2'); it is skipped"}
    for command in (["evaluate", "--index", str(tmp_path / "idx")],
                    ["mine", str(tmp_path / "idx"), "--output", str(tmp_path / "negatives.jsonl")]):
        result = CliRunner().invoke(main, [*command, *common])
        assert result.exit_code == 0, result.output
        assert warnings[command[0]] in result.output
    assert "1 query of empty text skipped" in result.output
    assert '"q2"' not in (tmp_path / "negatives.jsonl").read_text()


@pytest.mark.parametrize("command, message", [
    (["search", "{index}", "--queries", "{queries}", "-o", "{queries}"], "--output .* is the --queries input"),
    (["search", "{index}", "--queries", "{queries}", "-o", "{index}/manifest.json"], "is a file of the INDEX input"),
    (["evaluate", "--run", "{run}", "--qrels", "{qrels}", "-o", "{run}"], "is the --run input"),
    (["evaluate", "--run", "{run}", "--qrels", "{qrels}", "-o", "{link}"], "is the --qrels input"),
    (["evaluate", "--index", "{index}", "--dataset", "{index}", "-o", "{run}", "--save-run", "{run}"],
     "--save-run and --output are the same file"),
    (["mine", "{index}", "--dataset", "{dataset}", "-o", "{dataset}/queries.jsonl"], "is a file of the --dataset input"),
    (["search", "{index}", "cat", "-o", "{run}"], "-o writes the run of --queries"),
    (["search", "{index}", "--queries", "{queries}", "--json"], "--json is for a single QUERY"),
])
def test_an_output_that_would_overwrite_an_input_is_refused_before_any_work(tmp_path, command, message):
    index, dataset = tmp_path / "not-an-index", tmp_path / "beir"  # never opened: the path check comes first
    for folder in (index, dataset):
        folder.mkdir()
    files = {"queries": tmp_path / "q.jsonl", "run": tmp_path / "run.trec", "qrels": tmp_path / "qrels.txt",
             "manifest": index / "manifest.json", "dataset_queries": dataset / "queries.jsonl"}
    for path in files.values():
        path.write_text("kept\n")
    (tmp_path / "link").symlink_to(files["qrels"])
    names = {"index": index, "dataset": dataset, "link": tmp_path / "link", **files}
    result = CliRunner().invoke(main, [part.format(**names) for part in command])
    assert result.exit_code == 2 and re.search(message, result.output), result.output
    assert all(path.read_text() == "kept\n" for path in files.values())


@pytest.mark.parametrize("command", [
    ["search", "{index}", "--queries", "{queries}", "-o", "{output}"],
    ["evaluate", "--index", "{index}", "--dataset", "{dataset}", "--save-run", "{output}"],
    ["evaluate", "--run", "{queries}", "--qrels", "{dataset}/qrels/test.tsv", "-o", "{output}"],
])
def test_an_output_in_a_collections_qrels_folder_is_refused_before_any_work(tmp_path, command):
    """Every .tsv in qrels/ is read as a split: a run saved there gave the collection a bogus split."""
    index, dataset = tmp_path / "not-an-index", tmp_path / "beir"  # never opened: the path check comes first
    (dataset / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        (dataset / name).write_text("kept\n")
    index.mkdir()
    output = dataset / "qrels" / "run.tsv"
    names = {"index": index, "dataset": dataset, "queries": dataset / "queries.jsonl", "output": output}
    result = CliRunner().invoke(main, [part.format(**names) for part in command])
    assert result.exit_code == 2 and result.output.startswith(f"error: {output}: the ") and "qrels folder" in \
        result.output and result.output.count("\n") == 1, result.output  # a bad flag: exit 2 (1 until round 14)
    assert result.output.rstrip().endswith(" --help`)"), result.output
    assert not output.exists()


def test_a_query_of_invisible_characters_is_refused_as_empty(tmp_path, tiny_beir, tiny_model_dir):
    """An empty QUERY (or one of invisible characters) is a bad argument, exit 2 with the --help pointer like any
    other; it exited 1 as if the index or the run had failed."""
    index = tmp_path / "idx"
    assert CliRunner().invoke(main, ["build", str(tiny_beir), "-o", str(index), "--model", str(tiny_model_dir),
                                     "--no-bm25"]).exit_code == 0
    for query in ("", "\u200b\u2060"):
        result = CliRunner().invoke(main, ["search", str(index), query])
        assert result.exit_code == 2 and "the QUERY argument is empty" in result.output, result.output
        assert "search --help`)" in result.output


@pytest.mark.parametrize("args, message", [
    (["cat", "--run-format", "jsonl"], "--run-format applies only with --queries"),
    (["cat", "--tag", "x", "--format", "tsv", "--id-field", "qid"], "--tag, --format, --id-field apply only with "
                                                                   "--queries"),
    (["--queries", "{queries}", "--run-format", "jsonl", "--tag", "x"], "--tag is the last column of a TREC run, "
                                                                       "and a JSONL run has no tag"),
    (["--queries", "{queries}", "--title-field", "head"], "--title-field names a passage's title, and a query has "
                                                          "none"),
    (["-"], "QUERY '-' is not standard input; give --queries - to read queries from it"),
    (["vitamin", "D", "--json"], "one QUERY is searched, and 1 more argument follows it ('D'); quote a query of "
                                 "several words (\"vitamin D\")"),
])
def test_search_refuses_run_flags_it_would_not_use(tmp_path, args, message):
    """`search IDX "cat" --run-format jsonl` printed the hits table, `--tag` went unwritten in a JSONL run and
    `--format`/`--*-field` were ignored for a single QUERY, all with exit 0; `--queries F --title-field head` was
    ignored too (probe round 13: the queries reader reads no title, so even a field in no record passed). A QUERY
    of '-' was searched as a dash ('holds no word the model knows'), and words unquoted were 'Got unexpected extra
    argument (D)' (probe round 17)."""
    index = tmp_path / "not-an-index"  # never opened: the flags are checked first
    index.mkdir()
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q1", "text": "cat"}\n')
    result = CliRunner().invoke(main, ["search", str(index), *(a.format(queries=queries) for a in args)])
    assert result.exit_code == 2 and message in result.output, result.output


def test_search_help_does_not_offer_the_title_field_it_refuses():
    """`search --help` listed `--title-field` ("read where a record has it", default title), which search always
    refuses, and the refusal sends the user to that help (probe round 14)."""
    result = CliRunner().invoke(main, ["search", "--help"])
    assert result.exit_code == 0 and "--text-field" in result.output and "--title-field" not in result.output


@pytest.mark.parametrize("tag", ["a b", "", "tab\there"])
def test_a_run_tag_a_trec_line_cannot_hold_is_a_usage_error_before_any_search(tmp_path, tag):
    """Without -o the whole run was searched (and held) before its first line refused the tag, exit 1."""
    index = tmp_path / "not-an-index"  # never opened: the tag is checked with the flags
    index.mkdir()
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q1", "text": "cat"}\n')
    result = CliRunner().invoke(main, ["search", str(index), "--queries", str(queries), "--tag", tag])
    assert result.exit_code == 2 and "Invalid value for '--tag'" in result.output, result.output


def test_the_summary_says_when_queries_got_fewer_hits_than_it_names(tmp_path, tiny_beir, tiny_model_dir):
    """An IVF probing 1 of 2 lists returns fewer than -k hits: the summary said `× top 12` for runs of 5 to 7."""
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index
    from retriever.runs import read_run

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("IVF2,Flat"), progress=False, lexical=None)
    run_file = tmp_path / "run.trec"
    common = ["search", str(tmp_path / "idx"), "--queries", str(tiny_beir), "-o", str(run_file), "--device", "cpu"]
    result = CliRunner().invoke(main, [*common, "-k", "50", "--nprobe", "1"])
    counts = [len(hits) for hits in read_run(run_file).values()]
    assert result.exit_code == 0 and max(counts) < 12, (result.output, counts)
    short = sum(count < 12 for count in counts)
    assert result.stderr.strip().endswith(f"wrote 4 queries × top 12 to {run_file}; {short} of them got fewer (as few "
                                          f"as {min(counts)}), all the search reached"), result.stderr
    result = CliRunner().invoke(main, [*common, "-k", "50", "--nprobe", "2"])
    assert result.stderr.strip().endswith(f"wrote 4 queries × top 12 to {run_file}"), result.stderr


def test_search_then_evaluate_run_scores_as_evaluate_index_in_bf16(tmp_path, tiny_beir):
    """evaluate --index encodes only the judged queries; search --queries encodes the whole file, so in bf16 each
    judged query was batched with other mates and got other low bits of its vector (README: the third decimal).
    minilm: the tiny BERT's vectors did not move."""
    from fixtures_corpora import write_jsonl
    from fixtures_models import texts_of_many_lengths
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    texts = texts_of_many_lengths(60)
    write_jsonl(tiny_beir / "queries.jsonl", [{"_id": f"q{i}", "text": text} for i, text in enumerate(texts)])
    (tiny_beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{1 + i % 12}\t1\n" for i in range(0, 60, 3)), encoding="utf-8")
    encoder = Encoder(EncoderSettings.for_model("minilm"), device="cpu", dtype="bf16")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False, lexical=None)
    device = ["--device", "cpu", "--dtype", "bf16", "-k", "12"]
    run, saved = tmp_path / "run.trec", tmp_path / "saved.trec"
    result = CliRunner().invoke(main, ["search", str(tmp_path / "idx"), "--queries", str(tiny_beir / "queries.jsonl"),
                                       "-o", str(run), *device])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["evaluate", "--index", str(tmp_path / "idx"), "--dataset", str(tiny_beir),
                                       "--save-run", str(saved), *device])
    assert result.exit_code == 0, result.output
    judged = {f"q{i}" for i in range(0, 60, 3)}
    assert [line for line in run.read_text().splitlines() if line.split()[0] in judged] == \
        saved.read_text().splitlines()


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_evaluating_the_saved_run_prints_what_evaluate_index_printed_with_blank_queries(tmp_path, tiny_beir,
                                                                                      tiny_model_dir, mode):
    """A blank query gets no hits in bm25 and hybrid: `evaluate --index` kept it in its run with none and printed
    `0 missing from run`, while the TREC run --save-run wrote holds no line for it, so `evaluate --run` on that file
    printed `1 missing from run`: the same search, two counts."""
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    queries = tiny_beir / "queries.jsonl"
    queries.write_text(queries.read_text().replace('"hot lava rock"', '" "'))
    saved = tmp_path / "saved.trec"
    searched = CliRunner().invoke(main, ["evaluate", "--index", str(tmp_path / "idx"), "--dataset", str(tiny_beir),
                                         "--mode", mode, "--save-run", str(saved), "--device", "cpu", "--dtype",
                                         "fp32"])
    assert searched.exit_code == 0, searched.output
    assert not any(line.startswith("q2 ") for line in saved.read_text().splitlines())
    scored = CliRunner().invoke(main, ["evaluate", "--run", str(saved), "--qrels", str(tiny_beir / "qrels/test.tsv")])
    assert scored.exit_code == 0, scored.output

    def table(output: str) -> list[str]:  # the metrics and query counts, before notes and answer recall
        lines = output.splitlines()
        return lines[:next(i for i, line in enumerate(lines) if line.startswith("queries:")) + 1]

    assert "(1 missing from run, scored 0)" in table(scored.stdout)[-1]
    assert table(searched.stdout) == table(scored.stdout)


def test_a_hybrid_query_of_no_known_word_says_how_it_was_ranked(tmp_path, tiny_beir, tiny_model_dir):
    """Hybrid ranks a query of no word the model knows by BM25 alone (a batch run warns of it): given one QUERY that
    BM25 finds no term in either, "?!" printed nothing at all and exited 0, where bm25 mode says why."""
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    common = ["search", str(tmp_path / "idx"), "--mode", "hybrid", "--device", "cpu", "--dtype", "fp32"]
    result = CliRunner().invoke(main, [*common, "?!"])
    assert result.exit_code == 0 and result.stdout == "", result.output
    assert result.stderr == ("no hits: the query holds no word the model knows, so hybrid ranks it by BM25 alone, "
                             "and BM25 returns only passages that share a term with the query (stopwords and words "
                             "under two characters are not terms)\n")
    result = CliRunner().invoke(main, [*common, "лава 🐝 ?"])
    assert result.exit_code == 0 and "no hits" in result.stderr
    result = CliRunner().invoke(main, [*common, "lava"])
    assert result.exit_code == 0 and "d4" in result.stdout and result.stderr == "", result.output
    result = CliRunner().invoke(main, [*common, "?!", "--json"])  # it gave {"hits": []} and no word of why
    assert result.exit_code == 0 and json.loads(result.stdout) == {"query": "?!", "hits": [], "note": (
        "no hits: the query holds no word the model knows, so hybrid ranks it by BM25 alone, and BM25 returns only "
        "passages that share a term with the query (stopwords and words under two characters are not terms)")}
    assert "note" not in json.loads(CliRunner().invoke(main, [*common, "lava", "--json"]).stdout)


def test_hits_show_control_and_bidi_characters_as_escapes_not_obeyed(tmp_path, tiny_model_dir):
    """A passage's ESC sequences reached the terminal as they were (clearing it, recolouring what followed), and a
    right-to-left override showed the title 'evil\\u202egnp.exe' as 'evilexe.png'; a newline in a title broke the
    table's line. Search results are shown with them escaped; JSON keeps the text as it is."""
    import json

    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d\u202e1", "title": "evil\u202egnp.exe\nsecond line",
                                  "text": "lava \x1b[2J cleared \x1b]0;title\x07 \u2066x\u2069"}) + "\n"
                      + json.dumps({"_id": "d2", "text": "other"}) + "\n", encoding="utf-8")
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(corpus, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    result = CliRunner().invoke(main, ["search", str(tmp_path / "idx"), "lava", "--mode", "bm25", "--device", "cpu"],
                                color=True)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == [
        "     lava \\u001b[2J cleared \\u001b]0;title\\u0007 \\u2066x\\u2069"]
    assert result.stdout.splitlines()[0].endswith("d\\u202e1  evil\\u202egnp.exe second line")
    result = CliRunner().invoke(main, ["search", str(tmp_path / "idx"), "lava", "--mode", "bm25", "--json"])
    assert json.loads(result.stdout)["hits"][0]["title"] == "evil\u202egnp.exe\nsecond line"


def test_a_run_on_standard_output_says_when_queries_got_fewer_hits(tmp_path, tiny_beir, tiny_model_dir):
    """BM25 returns only passages sharing a term: a run on standard output of queries that share none printed nothing
    at all and exited 0 (a run into a file says so in its summary)."""
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    common = ["search", str(tmp_path / "idx"), "--queries", "-", "--mode", "bm25", "-k", "3", "--format", "tsv"]
    result = CliRunner().invoke(main, common, input="q1\tzebra\nq2\tlava\n")
    assert result.exit_code == 0 and result.stdout.startswith("q2 Q0 d4 1 "), result.output
    assert "searched 2 queries × top 3; 2 of them got fewer (as few as 0), all the search reached" in result.stderr
    result = CliRunner().invoke(main, [*common, "-k", "1"], input="q1\tthe lava\nq2\thot lava rock\n")
    assert "fewer" not in result.stderr and "searched" not in result.stderr, result.stderr


def test_a_malformed_queries_file_is_refused_before_the_index_opens(tmp_path, monkeypatch):
    """`search INDEX --queries bad.jsonl` loaded the index and its model (seconds; more for a large index) before the
    queries file's first line was read and refused (probe round 18)."""
    from retriever.cli import searching

    opened = []
    monkeypatch.setattr(searching, "open_searcher", lambda *args: opened.append(args))
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q1", "text": "cat"}\n{"_id": "q2", "text": }\n')
    result = CliRunner().invoke(main, ["search", str(tmp_path), "--queries", str(queries)])
    assert result.exit_code == 1 and f"{queries}:2: malformed JSON" in result.output, result.output
    assert not opened
