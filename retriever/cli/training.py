"""`retriever train` and `retriever mine`."""
from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import click

from retriever.choices import (COUNT_BOUNDS, DDP_TIMEOUT, MIN_TEMPERATURE, REPORT_TO, check_count,
                               check_temperature)
from retriever.cli.hybrid import mode_options
from retriever.cli.searching import moved_model_option
from retriever.cli.options import (FiniteRange, check_outputs_apart, compose, corpus_options, device_options,
                                   encoder_options, fields_from, flags_given, json_option, renamed_option,
                                   runtime_options)
from retriever.cli.output_params import OutputFile, OutputFolder
from retriever.cli.outputs import expect_outputs, mark_resumable, stop_on_sigterm
from retriever.errors import RetrieverError

EXISTING_DIR = click.Path(exists=True, file_okay=False, path_type=Path)
EXISTING_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def report_to_option():
    return click.option("--report-to", type=click.Choice(REPORT_TO), default="none", show_default=True,
                        help="Also log loss, learning rate and dev metrics to TensorBoard in OUTPUT/tensorboard "
                             "(needs the tensorboard package).")


def progress_option():
    return click.option("--progress/--no-progress", default=True, show_default=True,
                        help="Show a progress bar with the loss, learning rate and examples/s on stderr.")


def ddp_timeout_option():
    return click.option("--ddp-timeout", type=CountRange("ddp_timeout"), default=DDP_TIMEOUT, show_default=True,
                        help="Under torchrun, seconds a process waits for the others at a synchronisation before the "
                             "run fails: a process stopped (not dead) holds the others this long.")


class CountRange(click.IntRange):
    """A whole-number setting of `train` or `pretrain` within its bound (`COUNT_BOUNDS`, which --help shows); beyond
    it, the library's line (flag, bound, why) is the usage error, so both refuse alike (the seed's and --ddp-timeout's
    bounds were the library's alone: exit 1, as if a run had failed)."""

    def __init__(self, setting: str) -> None:
        self.setting = setting
        super().__init__(min=COUNT_BOUNDS[setting].least, max=COUNT_BOUNDS[setting].most)

    def convert(self, value, param, ctx) -> int:
        try:
            return check_count(self.setting, click.INT.convert(value, param, ctx))
        except RetrieverError as error:
            raise click.UsageError(str(error), ctx) from None


class TemperatureRange(FiniteRange):
    """τ of `train` and `pretrain`: finite and at least the library's floor, whose line (flag, value, floor, what to
    give) is the usage error."""

    def __init__(self) -> None:
        super().__init__(min=MIN_TEMPERATURE)

    def convert(self, value, param, ctx) -> float:
        number = FiniteRange().convert(value, param, ctx)
        try:
            check_temperature(number)
        except RetrieverError as error:
            raise click.UsageError(str(error), ctx) from None
        return number


def temperature_option(default: float | None, what: str, then: str) -> Callable:
    """--temperature, its help saying ``what`` it is, then the floor, then ``then``."""
    return click.option("--temperature", type=TemperatureRange(), default=default, show_default=default is not None,
                        help=f"{what}, at least {MIN_TEMPERATURE:g} (under it the softmax is a hard max){then}")


def optimizer_options(learning_rate: float) -> Callable:
    """AdamW, its schedule and clipping: the training stack's flags, the same for `train` and `pretrain`."""
    return compose(
        click.option("--learning-rate", type=FiniteRange(min=0, min_open=True), default=learning_rate,
                     show_default=True, help="AdamW peak learning rate."),
        click.option("--warmup-ratio", type=FiniteRange(0, 1, max_open=True), default=0.1, show_default=True,
                     help="Share of steps with linear warmup (rounded up; its first step runs at learning rate 0, "
                          "as in Hugging Face's schedule); then linear decay to 0."),
        click.option("--weight-decay", type=FiniteRange(min=0), default=0.01, show_default=True,
                     help="AdamW weight decay (not on biases and LayerNorm)."),
        click.option("--max-grad-norm", type=FiniteRange(min=0), default=1.0, show_default=True,
                     help="Clip the gradient norm to this (0 = no clipping)."),
    )


def run_length_options(passes_over: str, epochs_default: int | None) -> Callable:
    """--epochs and --max-steps, read by HF TrainingArguments' rule (max_steps overrides num_train_epochs) in both
    commands (`layout.planned_steps`). Giving both is refused: --epochs would go unused, and `pretrain` once
    took whichever ended first, so an old command line would now train another length without a word."""
    def refuse_both(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if len(flags_given(("epochs", "max_steps"))) == 2:
                raise click.UsageError("--epochs and --max-steps both set how long to train, and --max-steps "
                                       "overrides --epochs (as in Hugging Face's Trainer); give one of them")
            return function(*args, **kwargs)
        return wrapper
    return compose(
        click.option("--epochs", type=CountRange("epochs"), default=epochs_default, show_default=False,
                     help=f"Passes over {passes_over}. [default: 1; give this or --max-steps]"),
        click.option("--max-steps", type=CountRange("max_steps"), default=None,
                     help="Optimizer steps to train, in place of --epochs (passing over the data as often as they "
                          "need). [default: --epochs x the steps of a pass]"),
        refuse_both,
    )


@click.command("train")
@click.option("--dataset", type=EXISTING_DIR, default=None,
              help="BEIR folder to train on: queries of --split with qrels score > 0, their judged passages as "
                   "positives. [default: none; give this or --train-jsonl]")
@click.option("--split", default="train", show_default=True, help="qrels/<split>.tsv of --dataset to train on.")
@click.option("--train-jsonl", type=EXISTING_FILE, default=None,
              help='Instead of --dataset: JSONL lines {"query", "positives", "negatives"?, "query_id"?}; any other '
                   "key is refused. A string item is a passage id when --corpus is given and the passage text when "
                   'not; an object {"text", "title"?, "id"?} is always a text (any other key is refused but '
                   'Tevatron\'s "docid", an id). [default: none]')
@click.option("--corpus", type=click.Path(exists=True, path_type=Path), default=None,
              help="Corpus (BEIR folder, JSONL, TSV, Parquet) in which --train-jsonl passage ids are looked up. "
                   "[default: none: strings in --train-jsonl are passage texts]")
@click.option("--negatives", type=EXISTING_FILE, default=None,
              help='Hard negatives for --dataset: JSONL {"query_id", "negatives": [doc ids]}, as `retriever mine` '
                   "writes; used when --train-group-size > 1. [default: none: in-batch negatives only]")
@encoder_options(towers=True)
@click.option("--output", "-o", type=OutputFolder(file_okay=False), required=True,
              help="Model folder to write (checkpoints go in OUTPUT/checkpoints; rerun the same command to resume).")
@run_length_options("the training queries (one sampled positive per query per pass)", 1)
@renamed_option("--queries-per-step", "--batch-size", type=CountRange("batch_size"), default=32, show_default=True,
                help="Queries per optimizer step; each brings --train-group-size passages, all shared as negatives.")
@click.option("--train-group-size", type=CountRange("train_group_size"), default=1, show_default=True,
              help="Passages per query: 1 positive + N-1 hard negatives sampled afresh each epoch from the given "
                   "ones (1 = in-batch negatives only).")
@optimizer_options(learning_rate=2e-5)
@temperature_option(None, "Softmax temperature τ of q·p/τ",
                    ". [default: 0.05 with --normalize, 1.0 with --no-normalize]")
@click.option("--seed", type=CountRange("seed"), default=42, show_default=True,
              help="Seed for sampling, shuffling and dropout.")
@click.option("--grad-cache-chunk-size", type=CountRange("grad_cache_chunk_size"), default=None,
              help="GradCache: encode the batch in chunks of this many texts so a large batch fits in memory "
                   "(same gradients; one extra forward pass, ~1.5x the time). [default: off]")
@click.option("--dev-split", default=None,
              help="Evaluate nDCG@10/Recall@100 on this split after each epoch (exact search) and keep the best "
                   "epoch as the output (a warning says when the start model scored higher than every epoch). "
                   "[default: no dev evaluation; the last weights are kept]")
@click.option("--dev-dataset", type=EXISTING_DIR, default=None,
              help="BEIR folder holding --dev-split. [default: --dataset]")
@click.option("--dev-max-docs", type=CountRange("dev_max_docs"), default=None,
              help="Search a sample of this many dev passages (all judged ones kept) to make evaluation cheap. "
                   "[default: the whole corpus]")
@device_options()
@click.option("--save-steps", type=CountRange("save_steps"), default=500, show_default=True,
              help="Also checkpoint every N steps; the run's end is always one, and each epoch's end is unless "
                   "--max-steps sets the run's length without --dev-split (0 = only at epochs' ends).")
@click.option("--cross-device-negatives/--no-cross-device-negatives", default=True, show_default=True,
              help="Under torchrun, score each query against every process's passages (the global batch); off, "
                   "each process's queries see only its own slice.")
@progress_option()
@report_to_option()
@ddp_timeout_option()
@corpus_options()
@json_option("the run's summary (model, steps, best_step, dev, start_model_better, seconds)")
def train_command(dataset, split, train_jsonl, corpus, negatives, model, encoder_overrides, output, epochs, max_steps,
                  queries_per_step,
                  train_group_size, learning_rate, warmup_ratio, weight_decay, temperature, max_grad_norm, seed,
                  grad_cache_chunk_size, dev_split, dev_dataset, dev_max_docs, device, dtype, save_steps,
                  cross_device_negatives, progress, report_to, ddp_timeout, fmt, id_field, text_field, title_field,
                  as_json):
    """Fine-tune a dual encoder with in-batch (and hard) negatives into a model folder OUTPUT.

    Max lengths default to the start model's (as for every command), and the folder records them,
    so it is indexed as it was trained; --passage-max-length 128 trains much faster on a CPU.
    --format/--id-field/--text-field/--title-field describe --corpus. OUTPUT also opens in
    sentence-transformers and transformers (see its README.md). Under `torchrun --nproc_per_node N
    -m retriever train ...` each process takes --queries-per-step/N queries of every step.

    \b
    Example:
      retriever train --dataset ../shared/datasets/scifact --split train --output models/scifact-dense
    """
    from retriever.training import TrainConfig, train
    from retriever.training.stack import is_main_process

    mark_resumable()  # from the last checkpoint
    stop_on_sigterm()  # a scheduler's stop (Slurm, Kubernetes) says so as Ctrl-C does

    config = TrainConfig(
        output=str(output), dataset=_str(dataset), split=split, train_jsonl=_str(train_jsonl), corpus=_str(corpus),
        corpus_format=fmt, corpus_fields=fields_from(id_field, text_field, title_field), negatives=_str(negatives),
        model=model, encoder=encoder_overrides, epochs=epochs, max_steps=max_steps, batch_size=queries_per_step,
        train_group_size=train_group_size,
        learning_rate=learning_rate, warmup_ratio=warmup_ratio, weight_decay=weight_decay, temperature=temperature,
        max_grad_norm=max_grad_norm or None, seed=seed, grad_cache_chunk_size=grad_cache_chunk_size,
        dev_split=dev_split, dev_dataset=_str(dev_dataset), dev_max_docs=dev_max_docs, device=device, dtype=dtype,
        save_steps=save_steps or None, cross_device_negatives=cross_device_negatives, progress=progress,
        report_to=report_to, ddp_timeout=ddp_timeout)
    try:
        config.check_flag_combinations()
    except RetrieverError as error:  # a bad flag combination, as the README says
        raise click.UsageError(str(error), click.get_current_context()) from None
    result = train(config)
    if as_json and is_main_process():
        click.echo(json.dumps({"model": str(result.output), "steps": result.steps, "best_step": result.best_step,
                               "dev": result.dev_scores, "start_model_better": result.start_model_better,
                               "seconds": round(result.seconds, 1)}))


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)


@click.command("mine")
@click.argument("index", type=EXISTING_DIR)
@click.option("--dataset", type=EXISTING_DIR, required=True, help="BEIR folder whose queries and qrels are mined.")
@click.option("--split", default="train", show_default=True, help="qrels/<split>.tsv: its judged queries are mined "
              "and its positives skipped.")
@click.option("--output", "-o", type=OutputFile(), required=True,
              help='JSONL to write, one {"query_id", "negatives": [doc ids]} a line (for `retriever train '
                   '--negatives`).')
@click.option("--depth", type=click.IntRange(min=1), default=100, show_default=True,
              help="Passages retrieved per query.")
@click.option("--skip-top", type=click.IntRange(min=0), default=0, show_default=True,
              help="Ranks dropped from the top before choosing (they often hold unjudged positives).")
@click.option("--per-query", type=click.IntRange(min=1), default=None,
              show_default="30, or all --depth leaves after --skip-top if fewer",
              help="Negatives kept per query, in rank order, after dropping judged positives and their copies "
                   "(the same title and text); at most --depth minus --skip-top.")
@runtime_options()
@mode_options()
@moved_model_option()
def mine_command(index, dataset, split, output, depth, skip_top, per_query, device, dtype, batch_size, mode,
                 fusion_overrides, model):
    """Write hard negatives for a BEIR split by searching INDEX, skipping judged positives.

    \b
    Example:
      retriever mine indexes/scifact --dataset ../shared/datasets/scifact --split train -o negatives.jsonl
    """
    from retriever.training import mine_negatives
    from retriever.training.mining import check_counts

    try:
        check_counts(depth, skip_top, per_query)
    except RetrieverError as error:  # flags that cannot go together, as the README says
        raise click.UsageError(str(error), click.get_current_context()) from None
    check_outputs_apart({"--output": output}, {"INDEX": index, "--dataset": dataset})
    expect_outputs(output)
    result = mine_negatives(index, dataset, output, split=split, depth=depth, skip_top=skip_top,
                            per_query=per_query, device=device, dtype=dtype, batch_size=batch_size, mode=mode,
                            fusion_overrides=fusion_overrides, model=model)
    click.echo(result.summary(), err=True)


COMMANDS = [train_command, mine_command]
