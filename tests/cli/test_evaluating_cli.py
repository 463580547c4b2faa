"""`evaluate`'s flags: the ones it refuses, --metrics and --relevance-level."""
from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from retriever.cli import main


def test_evaluate_run_refuses_flags_only_an_index_search_uses(tmp_path):
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    scored = ["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels.txt")]
    result = CliRunner().invoke(main, [*scored, "--mode", "hybrid", "--alpha", "0.9", "-k", "5"])
    assert result.exit_code == 2 and "-k, --mode, --alpha apply only with --index" in result.output, result.output
    assert CliRunner().invoke(main, scored).exit_code == 0


def test_evaluate_refuses_qrels_it_would_ignore(tmp_path, tiny_beir):
    """`--index` with `--qrels`, and `--run` with both `--qrels` and `--dataset`, scored on other judgments than
    the ones given, exit 0."""
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    index = tmp_path / "not-an-index"  # never opened: the flags are checked first
    index.mkdir()
    for args, message in (
            (["--index", str(index), "--dataset", str(tiny_beir)], "--qrels applies only with --run"),
            (["--run", str(tmp_path / "run.trec"), "--dataset", str(tiny_beir)], "--qrels or --dataset/--split, "
                                                                                   "not both")):
        result = CliRunner().invoke(main, ["evaluate", *args, "--qrels", str(tmp_path / "qrels.txt")])
        assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("beside", [None, "corpus.jsonl.gz"])
def test_a_run_is_scored_on_a_dataset_holding_its_qrels_without_the_corpus(tmp_path, tiny_beir, beside):
    """`evaluate --run R --dataset D` reads only D/qrels/SPLIT.tsv, yet was refused when D lacked corpus.jsonl or
    queries.jsonl (`missing corpus.jsonl; not a BEIR folder`, or to gunzip the hub's corpus.jsonl.gz, gigabytes for
    MS MARCO) (probe round 20). Evaluating an index still needs both."""
    dataset = tmp_path / "judgments-only"
    (dataset / "qrels").mkdir(parents=True)
    (dataset / "qrels" / "test.tsv").write_bytes((tiny_beir / "qrels" / "test.tsv").read_bytes())
    if beside:
        (dataset / beside).write_bytes(b"\x1f\x8b\x08\x00")
    (tmp_path / "run.trec").write_text("q1 Q0 d6 1 2.0 t\nq2 Q0 d1 1 1.0 t\n")
    result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run.trec"), "--dataset", str(dataset),
                                       "--metrics", "recall@1"])
    assert result.exit_code == 0 and "recall@1    0.2500" in result.output, result.output
    result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run.trec"), "--dataset", str(dataset),
                                       "--split", "dev"])
    assert result.exit_code == 1 and "no qrels for split 'dev' (available: test)" in result.output, result.output
    result = CliRunner().invoke(main, ["evaluate", "--index", str(tmp_path), "--dataset", str(dataset)])
    assert result.exit_code == 1 and "corpus.jsonl" in result.output, result.output


def test_evaluate_refuses_a_split_its_qrels_file_makes_unused(tmp_path):
    """`evaluate --run R --qrels Q --split dev` scored Q, the --split unread, exit 0."""
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels",
                                       str(tmp_path / "qrels.txt"), "--split", "dev"])
    assert result.exit_code == 2 and "--split names a qrels file of --dataset" in result.output, result.output


def test_evaluate_relevance_level_counts_lower_grades_as_not_relevant_for_binary_measures_only(tmp_path):
    """trec_eval's -l (TREC DL scores with -l 2) had no counterpart: a grade-1 document counted as relevant."""
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq1 0 d2 2\n")
    scores = {}
    for level in ("1", "2"):
        out = tmp_path / f"l{level}.json"
        result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels",
                                           str(tmp_path / "qrels.txt"), "--metrics", "mrr@10,ndcg@10,recall@1",
                                           "--relevance-level", level, "-o", str(out)])
        assert result.exit_code == 0, result.output
        scores[level] = json.loads(out.read_text())["mean"]
    assert scores["1"]["mrr@10"] == 1.0 and scores["2"]["mrr@10"] == 0.5
    assert scores["1"]["recall@1"] == 0.5 and scores["2"]["recall@1"] == 0.0
    assert scores["1"]["ndcg@10"] == scores["2"]["ndcg@10"] < 1
    result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels",
                                       str(tmp_path / "qrels.txt"), "--relevance-level", "0"])
    assert result.exit_code == 2 and "--relevance-level" in result.output, result.output


@pytest.mark.parametrize("metrics, message", [("bogus@3", "unknown metric 'bogus@3'"), (",", "no metric given"),
                                             ("ndcg@10,prec@5", "unknown metric 'prec@5'"),
                                             ("ndcg_cut_10", "unknown metric 'ndcg_cut_10': ndcg_cut_10 is trec_eval's "
                                                             "name for ndcg@10; write ndcg@10")])
def test_an_unknown_metric_is_a_usage_error(tmp_path, metrics, message):
    """It exited 1 without the --help pointer every other bad flag gets (probe round 9); before any search."""
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 x\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["evaluate", "--run", str(run), "--qrels", str(run), "--metrics", metrics])
    assert result.exit_code == 2 and f"Invalid value for '--metrics': {message}" in result.output, result.output


def test_metrics_given_in_several_flags_or_separated_by_spaces_are_all_scored(tmp_path):
    """`--metrics ndcg@10 --metrics recall@5`, as trec_eval's `-m` repeats, scored only recall@5 (click kept the last
    flag), and `--metrics "ndcg@10 recall@5"` was refused as one unknown metric (probe round 16)."""
    run, qrels = tmp_path / "run.trec", tmp_path / "qrels.txt"
    run.write_text("q1 Q0 d1 1 2.0 x\nq1 Q0 d2 2 1.0 x\n", encoding="utf-8")
    qrels.write_text("q1 0 d2 1\n", encoding="utf-8")
    for metrics in (["--metrics", "ndcg@10", "--metrics", "recall@1,mrr@10"], ["--metrics", "ndcg@10 recall@1\tmrr@10"],
                    ["--metrics", "ndcg@10,", "--metrics", " recall@1 , mrr@10"]):
        result = CliRunner().invoke(main, ["evaluate", "--run", str(run), "--qrels", str(qrels), *metrics,
                                           "-o", str(tmp_path / "m.json")])
        assert result.exit_code == 0, result.output
        assert list(json.loads((tmp_path / "m.json").read_text())["mean"]) == ["ndcg@10", "recall@1", "mrr@10"]
    result = CliRunner().invoke(main, ["evaluate", "--run", str(run), "--qrels", str(qrels), "--metrics", "ndcg@10",
                                       "--metrics", "ndcg@10"])
    assert result.exit_code == 2 and "metric list has duplicates" in result.output, result.output


def test_qrels_are_read_from_standard_input_with_a_dash(tmp_path):
    """`zcat qrels.gz | retriever evaluate --run R --qrels -` said "File '-' does not exist", though `--run -` reads
    standard input; both from it is refused, as one stream cannot hold two files."""
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n")
    result = CliRunner().invoke(main, ["evaluate", "--run", str(run), "--qrels", "-", "--metrics", "mrr@10"],
                                input="q1 0 d2 1\n")
    assert result.exit_code == 0 and "mrr@10    0.5000" in result.output, result.output
    bad = CliRunner().invoke(main, ["evaluate", "--run", str(run), "--qrels", "-"], input="q1 0 d2 x\n")
    assert bad.exit_code == 1 and "standard input:1: relevance 'x'" in bad.output, bad.output
    both = CliRunner().invoke(main, ["evaluate", "--run", "-", "--qrels", "-"], input="")
    assert both.exit_code == 2 and "--run and --qrels cannot both read standard input" in both.output, both.output


def test_evaluate_index_refuses_a_missing_split_before_the_index_opens(tiny_beir, tmp_path, monkeypatch):
    """`evaluate --index I --dataset D --split dve` loaded the index and its model (seconds; more for a large index)
    before saying D has no qrels for split 'dve' (probe round 18)."""
    from retriever.cli import evaluating

    opened = []
    monkeypatch.setattr(evaluating, "open_searcher", lambda *args: opened.append(args))
    result = CliRunner().invoke(main, ["evaluate", "--index", str(tmp_path), "--dataset", str(tiny_beir),
                                       "--split", "dve"])
    assert result.exit_code == 1 and "no qrels for split 'dve' (available: test)" in result.output, result.output
    assert not opened


def test_scores_are_written_when_the_run_of_hitless_queries_is_refused(tiny_flat_build, tmp_path):
    """`evaluate --index I --mode bm25 --save-run R -o M` where no query gets a hit: the table was printed, then the
    empty TREC run was refused and -o was never written, though the scores were known; -o is written before the
    run, and the refusal names the run file it did not write."""
    import shutil

    dataset = shutil.copytree(tiny_flat_build.parent / "tiny-beir", tmp_path / "d")
    (dataset / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": "zzyzx qwvx"}) + "\n"
                                                   for i in range(1, 5)), encoding="utf-8")
    run, scores = tmp_path / "r.trec", tmp_path / "m.json"
    result = CliRunner().invoke(main, ["evaluate", "--index", str(tiny_flat_build), "--dataset", str(dataset),
                                       "--mode", "bm25", "--save-run", str(run), "-o", str(scores)])
    assert result.exit_code == 1 and not run.exists(), result.output
    assert json.loads(scores.read_text())["mean"]["ndcg@10"] == 0.0
    assert f"wrote {scores}\nerror: cannot write run {run}: none of its 4 queries got a hit" in result.output
    assert f"; {run} is not written; " in result.output


def test_a_run_and_qrels_whose_ids_open_with_brackets_are_scored_as_trec_eval_scores_them(tmp_path):
    """A run whose first query id was '[q1]' was refused as a JSON array, and qrels opening '{q2}' as invalid JSON,
    though trec_eval reads any token as an id. By hand: [q1]'s relevant d2 ranks 2nd (reciprocal rank 1/2, nDCG
    1/log2(3)), {q2}'s d9 ranks 1st (1 and 1)."""
    (tmp_path / "run.trec").write_text("[q1] Q0 d1 1 0.5 t\n[q1] Q0 d2 2 0.4 t\n{q2} Q0 d8 2 1.0 t\n"
                                       "{q2} Q0 d9 1 2.0 t\n")
    (tmp_path / "qrels.txt").write_text("{q2} 0 d9 1\n[q1] 0 d2 1\n")
    out = tmp_path / "m.json"
    result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels",
                                       str(tmp_path / "qrels.txt"), "--metrics", "mrr@10,ndcg@10", "-o", str(out)])
    assert result.exit_code == 0, result.output
    scores = json.loads(out.read_text())
    assert scores["mean"]["mrr@10"] == pytest.approx((1 / 2 + 1) / 2)
    assert scores["mean"]["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1) / 2)
