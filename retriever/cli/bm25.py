"""`retriever bm25`, and the fusion tuning `build` and `index` run after building (``check_build_tuning``,
``run_tuning``): the flags themselves are ``cli.hybrid``'s."""
from __future__ import annotations

from pathlib import Path

import click

from retriever.cli.hybrid import BM25_SETTINGS, lexical_options, tuning_options
from retriever.cli.info import echo_summary_json
from retriever.cli.options import device_options, flags_given, json_option
from retriever.errors import NotForThisIndex, RetrieverError
from retriever.fusion import FusionParams
from retriever.lexical import LexicalParams
from retriever.wording import counted


def check_tuning(tune_fusion: tuple[Path, str] | None, lexical: LexicalParams | None) -> tuple | None:
    """Refuse bad tuning requests (no BM25; a split that is missing, unjudged or the test split's) before any
    encoding or BM25 build, not after them. --split test is a bad flag, so a usage error; a split missing from the
    folder, or sharing test's queries, is the folder's (exit 1). Returns what ``check_tuning_split`` read."""
    if tune_fusion is None:
        return None
    if lexical is None:
        raise click.UsageError("--tune-fusion-on tunes the hybrid fusion, which needs the BM25 index; drop --no-bm25")
    from retriever.fusion_tuning import TuningOnReportedSplit, check_tuning_split  # torch: only when tuning

    try:  # not a BEIR folder, no such split: exit 1, before the split's name is looked at
        return check_tuning_split(*tune_fusion)
    except TuningOnReportedSplit as error:
        raise click.UsageError(str(error)) from None


def check_build_tuning(tune_fusion: tuple[Path, str] | None, lexical: LexicalParams | None, output: Path,
                       overwrite: bool) -> None:
    """``check_tuning`` for `build`/`index`, and a rerun of one whose tuning recorded nothing is told the command
    that tunes it (it said only that OUTPUT exists). Why the first run recorded none (stopped, refused, measured
    nothing) is not known here, and that run said it: this names no cause (it asked whether a run had stopped)."""
    from retriever.index_folder import MANIFEST_FILE, read_manifest

    check_tuning(tune_fusion, lexical)
    built = not overwrite and (output / MANIFEST_FILE).is_file()
    if tune_fusion is not None and built and read_manifest(output).get("fusion") is None:
        raise RetrieverError(f"{output}: already built, and no tuned fusion is recorded in it; tune it alone with "
                             f"`retriever bm25 {output} --tune-fusion-on {tune_fusion[0]} --split {tune_fusion[1]}`, "
                             "or pass --overwrite to rebuild it")


def run_tuning(index: Path, tune_fusion: tuple[Path, str] | None, built: bool = False, device: str = "auto",
               dtype: str = "auto", checked: tuple | None = None) -> None:
    """Tune and record the fusion, saying what was recorded. ``built``: `build`/`index` built ``index`` just before,
    so a refusal of the tuning says the index stands built without it (it ended on the refusal alone). ``device``
    and ``dtype``: the command's, which the queries are encoded with (auto tuned in bf16 after a build in fp32).
    ``checked``: the split ``check_tuning`` read, if it is not to be read again."""
    if tune_fusion is None:
        return
    from retriever.fusion_tuning import tune_and_record

    try:
        record = tune_and_record(index, *tune_fusion, device=device, dtype=dtype, checked=checked)
    except RetrieverError as error:
        if not built:
            raise
        raise RetrieverError(f"{index} is built, without a tuned fusion: {error} (`retriever bm25 {index} "
                             "--tune-fusion-on DATASET --split SPLIT` tunes it alone)") from error
    if record is not None:  # None: it measured nothing, and said so
        click.echo(f"fusion recorded in {index}/manifest.json: {FusionParams.from_record(record).setting()}",
                   err=True)


def run_drop(index: Path) -> None:
    """`bm25 --drop-fusion`: a flag that builds or tunes is refused, as the run would not do what it asks."""
    from retriever.fusion_tuning import drop_fusion

    others = flags_given(("overwrite", *BM25_SETTINGS, "tune_fusion_on", "split", "device", "dtype"))
    if others:
        raise click.UsageError(f"{others[0]}: --drop-fusion only drops the fusion record; give it alone, and "
                               f"{others[0]} in another run")
    if drop_fusion(index):
        click.echo(f"{index}: dropped its recorded hybrid fusion, so hybrid uses RRF k=60 unless --fusion, --rrf-k "
                   "or --alpha say otherwise", err=True)
    else:
        click.echo(f"{index}: no hybrid fusion recorded; nothing to drop", err=True)


@click.command("bm25")
@click.argument("index", type=click.Path(exists=True, file_okay=False, path_type=Path))
@lexical_options(switch=False)
@tuning_options()
@device_options()
@click.option("--overwrite", is_flag=True, help="Rebuild a BM25 index the folder already has.")
@click.option("--drop-fusion", is_flag=True,
              help="Only drop the hybrid fusion recorded in the manifest (a damaged one too), keeping the BM25 "
                   "index: hybrid then uses RRF k=60 unless a fusion flag says otherwise.")
@json_option("the folder's summary once done (`info --json`'s)")
def bm25_command(index, lexical, tune_fusion, device, dtype, overwrite, drop_fusion, as_json):
    """Add a BM25 index to the built INDEX folder from its doc store (no re-encoding), and optionally tune the
    hybrid fusion (--device and --dtype: how its queries are encoded). With a BM25 index already there and
    --tune-fusion-on, only tunes; with --drop-fusion, only drops the recorded fusion.

    \b
    Example:
      retriever bm25 indexes/scifact --tune-fusion-on ../shared/datasets/scifact --split train
    """
    if drop_fusion:
        run_drop(index)
    else:
        _add_or_tune(index, lexical, tune_fusion, overwrite, device, dtype)
    if as_json:
        echo_summary_json(index)


def _add_or_tune(index: Path, lexical: LexicalParams, tune_fusion: tuple[Path, str] | None, overwrite: bool,
                 device: str = "auto", dtype: str = "auto") -> None:
    """`bm25` without --drop-fusion: build the BM25 part, or keep the one there to tune the fusion alone."""
    from retriever.fusion_tuning import check_recordable, check_tunable
    from retriever.index_folder import read_manifest
    from retriever.lexical_opening import terms_text
    from retriever.lexical_part import add_lexical

    checked = check_tuning(tune_fusion, lexical)
    unused = flags_given(("device", "dtype")) if tune_fusion is None else []
    if unused:  # building BM25 runs no model
        raise click.UsageError(f"{unused[0]} sets how --tune-fusion-on encodes its queries, and BM25 is built without "
                               f"a model: drop {unused[0]}, or add --tune-fusion-on DATASET")
    if tune_fusion is not None:  # what the tuning would refuse, before a BM25 part is built or kept for it
        from retriever.encoder_settings import check_encoder_arguments

        check_encoder_arguments(device, dtype)
        check_tunable(index, *tune_fusion, checked=checked)
    if read_manifest(index).get("lexical") and not overwrite:
        if tune_fusion is None:
            raise RetrieverError(f"{index}: already has a BM25 index; pass --overwrite to rebuild it")
        settings = flags_given(BM25_SETTINGS)  # they would go unused: the index's BM25 is kept as it is
        if settings:
            raise NotForThisIndex(f"{', '.join(settings)}: {index} keeps the BM25 index it has, so these settings "
                                 "would not be used; pass --overwrite to rebuild it with them, or drop them to "
                                 "only tune the fusion")
        check_recordable(index)  # a read-only folder's refusal comes alone, not after "keeping"
        click.echo(f"{index}: keeping its BM25 index", err=True)
    else:
        retuning = None if tune_fusion is None else f"{tune_fusion[0].resolve().name} split {tune_fusion[1]}"
        record = add_lexical(index, lexical, overwrite=overwrite, retuning=retuning)
        click.echo(f"added BM25 to {index}: {counted(record['documents'], 'passage')}, {terms_text(record)}",
                   err=True)
    run_tuning(index, tune_fusion, device=device, dtype=dtype, checked=checked)


COMMANDS = [bm25_command]
