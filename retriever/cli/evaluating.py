"""`retriever evaluate`: score a run file, or search an index on a BEIR split and score that."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from retriever.cli.hybrid import mode_options
from retriever.cli.options import check_outputs_apart, check_run_suffix, flags_given, report_truncation
from retriever.cli.output_params import OutputFile
from retriever.cli.outputs import expect_outputs
from retriever.cli.searching import configure_batch_threads, open_searcher, searcher_options
from retriever.cli.stdin import read_stdin
from retriever.cli.stdout import check_stdout_open, echo_result
from retriever.corpus import BeirDataset
from retriever.errors import RetrieverError
from retriever.files import write_json
from retriever.metric_names import DEFAULT_METRICS, parse_metric_list
from retriever.wording import agree

if TYPE_CHECKING:
    from retriever.evaluation_report import EvaluationReport


# evaluate's flags that only searching an index uses
INDEX_ONLY = ("k", "save_run", "device", "dtype", "nprobe", "ef_search", "model", "pooling", "normalize", "mode",
              "fusion", "alpha", "rrf_k", "fusion_depth")


def _metric_names(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """--metrics parsed while the flags are, so a misspelt metric is a usage error (exit 2) like any bad flag. The flag
    may be repeated, as trec_eval's -m is: click kept only the last one."""
    try:
        return parse_metric_list(",".join(value))
    except RetrieverError as error:
        raise click.BadParameter(str(error), ctx, param) from None


@click.command("evaluate")
@click.option("--run", "run_path", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
              default=None, help="A TREC or JSONL run file to score (needs --qrels or --dataset/--split), or - for "
                                 "standard input (`retriever search ... | retriever evaluate --run - ...`).")
@click.option("--qrels", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path), default=None,
              help="Judgments: TREC qrels, BEIR TSV, or JSON ({query id: {doc id: grade}}, or a {query_id, doc_id, "
                   "relevance} or MTEB's {query-id, corpus-id, score} judgment a line); - for standard input.")
@click.option("--index", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="An index folder to search with the --dataset queries.")
@click.option("--dataset", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A BEIR folder (queries.jsonl, qrels/<split>.tsv).")
@click.option("--split", default="test", show_default=True, help="Which qrels/<split>.tsv to use.")
@click.option("--k", "-k", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Search depth with --index.")
@click.option("--metrics", multiple=True, default=[",".join(DEFAULT_METRICS)], show_default=True,
              callback=_metric_names, help="Metrics separated by commas or spaces, and the flag may be repeated: "
                                           "recall@k, mrr@k, ndcg@k, map@k.")
@click.option("--relevance-level", type=click.IntRange(min=1), default=1, help="Lowest grade recall, MRR and MAP "
              "count as relevant (trec_eval's -l; TREC DL uses 2); nDCG keeps every grade.")
@click.option("--output", "-o", type=OutputFile(), default=None,
              help="Write the per-query and mean metrics as JSON here.")
@click.option("--save-run", type=OutputFile(), default=None,
              help="With --index: also write the TREC run file here.")
@searcher_options()
@mode_options()
def evaluate_command(run_path, qrels, index, dataset, split, k, metrics, relevance_level, output, save_run, device,
                     dtype, nprobe, ef_search, model, pooling, normalize, mode, fusion_overrides):
    """Score a run file, or an index on a BEIR split: Recall@k, MRR@10, nDCG@10, MAP@1000 (+ answer recall).

    \b
    Example:
      retriever evaluate --index indexes/scifact --dataset ../shared/datasets/scifact --split test
      retriever evaluate --run run.trec --dataset ../shared/datasets/scifact --split test
    """
    from retriever.evaluation import evaluate_index, evaluate_run_file

    check_outputs_apart({"--output": output, "--save-run": save_run},
                        {"--run": None if str(run_path) == "-" else run_path,
                         "--qrels": None if str(qrels) == "-" else qrels, "--index": index, "--dataset": dataset})
    check_run_suffix(save_run, "trec", "--save-run")
    expect_outputs(save_run, output)
    check_stdout_open(output)
    if (run_path is None) == (index is None):
        raise click.UsageError("give either --run (with --qrels or --dataset) or --index with --dataset")
    if run_path is not None:
        unused = flags_given(INDEX_ONLY)
        if unused:
            verb = agree(len(unused), "applies", "apply")
            raise click.UsageError(f"{', '.join(unused)} {verb} only with --index; --run scores the run as it is")
        if (qrels is None) == (dataset is None):
            raise click.UsageError("--run needs --qrels or --dataset/--split, not both")
        if qrels is not None and flags_given(("split",)):
            raise click.UsageError("--split names a qrels file of --dataset; --qrels gives the judgments itself, so "
                                   "drop --split (or use --dataset D --split S)")
        if str(run_path) == str(qrels) == "-":
            raise click.UsageError("--run and --qrels cannot both read standard input; give one of them as a file")
        # a run is scored on the split's qrels alone: a collection without corpus.jsonl (the hub's corpus.jsonl.gz,
        # or judgments fetched without the corpus) was refused, as evaluating an index must refuse it
        qrels_path = qrels or BeirDataset(dataset).qrels_path(split)
        if str(qrels_path) == "-":
            report = read_stdin(".qrels", lambda path: evaluate_run_file(run_path, path, metrics, relevance_level))
        elif str(run_path) == "-":
            report = read_stdin(".run", lambda path: evaluate_run_file(path, qrels_path, metrics, relevance_level))
        else:
            report = evaluate_run_file(run_path, qrels_path, metrics, relevance_level)
    else:
        if dataset is None or qrels is not None:
            raise click.UsageError("--index needs --dataset (a BEIR folder), whose qrels/<split>.tsv it is scored "
                                   "on; --qrels applies only with --run")
        collection = BeirDataset.open(dataset)
        collection.qrels_path(split)  # a misspelt split is refused before the index and model load, not after
        searcher = open_searcher(index, device, dtype, model, pooling, normalize, mode, fusion_overrides)
        configure_batch_threads(searcher.mode)
        # --save-run is written batch by batch as the queries are searched, and put in place after the table is
        # printed and -o written: a Ctrl-C that finds it whole finds them done too, and a run that cannot be written
        # (no query got a hit, a full disk) leaves the scores written
        report, _ = evaluate_index(searcher, collection, split, k, nprobe, ef_search, metrics,
                                   relevance_level=relevance_level, save_run=save_run,
                                   on_report=lambda done: _show_and_write(done, output))
        report_truncation(searcher.loaded_encoder)
    if run_path is not None:
        _show_and_write(report, output)
    if save_run:
        click.echo(f"wrote {save_run}", err=True)


def _show_and_write(report: EvaluationReport, output: Path | None) -> None:
    """The table on standard output, then the scores into -o: the table first, so a Ctrl-C after -o finds the work
    done."""
    echo_result(report.table(), in_file=bool(output))
    if output:
        write_json(output, report.to_json())
        click.echo(f"wrote {output}", err=True)


COMMANDS = [evaluate_command]
