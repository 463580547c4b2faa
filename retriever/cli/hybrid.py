"""Flags for BM25 and hybrid search shared by several commands, and `retriever bm25`.

Each decorator turns its flags into one value before the command runs (``mode`` and
``fusion_overrides``; ``lexical``; ``tune_fusion``), so commands only gain a parameter or two.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import click

from retriever.cli.info import echo_summary_json
from retriever.cli.options import FiniteRange, collapsing, compose, device_options, flags_given, json_option
from retriever.errors import NotForThisIndex, RetrieverError
from retriever.fusion import METHODS as FUSIONS
from retriever.fusion import MODES, RRF_K_MAX, FusionParams
from retriever.lexical import K1_MAX, LexicalParams
from retriever.lexical import METHODS as BM25_METHODS
from retriever.lexical_names import canonical, unknown_name
from retriever.wording import counted

DATASET = click.Path(exists=True, file_okay=False, path_type=Path)


def _fusion_overrides(fusion: str | None, alpha: float | None, rrf_k: float | None,
                      fusion_depth: int | None) -> dict:
    overrides = {"method": fusion, "alpha": alpha, "rrf_k": rrf_k, "depth": fusion_depth}
    try:  # flags that contradict each other fail here, before any work, as the usage errors they are
        FusionParams().overridden(**overrides)
    except RetrieverError as error:
        raise click.UsageError(str(error)) from None
    return overrides


def _fusion_only_for_hybrid(function: Callable) -> Callable:
    """A fusion flag with --mode dense or bm25 would do nothing: refused, so no flag is silently unused. Not when
    `evaluate` scores a --run file: it searches nothing, so it refuses every search flag itself (this one said to add
    --mode hybrid, which it then refused)."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        given = [name for name, value in kwargs["fusion_overrides"].items() if value is not None]
        if given and kwargs["mode"] != "hybrid" and kwargs.get("run_path") is None:
            flag = {"method": "--fusion", "rrf_k": "--rrf-k", "depth": "--fusion-depth"}.get(given[0], "--alpha")
            raise click.UsageError(f"{flag} applies only to --mode hybrid, not --mode {kwargs['mode']}: drop it "
                                   "or add --mode hybrid")
        return function(*args, **kwargs)
    return wrapper


def mode_options(default: str = "dense", per_request: bool = False) -> Callable:
    """--mode and the fusion flags → ``mode`` and ``fusion_overrides`` (None values keep the manifest's).
    ``per_request``: the mode is only a default (serve), so fusion flags stand whatever it is."""
    collapse = collapsing(("fusion", "alpha", "rrf_k", "fusion_depth"), "fusion_overrides", _fusion_overrides)
    checks = () if per_request else (_fusion_only_for_hybrid,)
    return compose(
        click.option("--mode", type=click.Choice(MODES), default=default, show_default=True,
                     help="dense (FAISS), bm25 (the index's BM25 part) or hybrid (both, fused)."),
        click.option("--fusion", type=click.Choice(FUSIONS), default=None,
                     help="Hybrid fusion: rrf (reciprocal rank) or convex (alpha * z(dense) + (1 - alpha) * "
                          "z(bm25)). [default: the manifest's tuned fusion, else rrf]"),
        click.option("--alpha", type=FiniteRange(0, 1), default=None,
                     help="Weight of the dense score in the convex fusion (alone, it implies --fusion convex). "
                          "[default: the manifest's, else 0.5]"),
        click.option("--rrf-k", type=FiniteRange(min=0, min_open=True, max=RRF_K_MAX), default=None,
                     help="RRF constant k in 1/(k + rank) (alone, it implies --fusion rrf). [default: the "
                          "manifest's, else 60]"),
        click.option("--fusion-depth", type=click.IntRange(min=1), default=None,
                     help="Hybrid fuses the top this-many of each list, or the top k when k is larger. [default: "
                          "the manifest's, else 1000]"),
        collapse,
        *checks,  # innermost: sees ``fusion_overrides`` once ``collapse`` has made it
    )


def _lexical_params(bm25: bool = True, bm25_k1: float = 0.9, bm25_b: float = 0.4, bm25_method: str = "lucene",
                    bm25_stemmer: str | None = "english", bm25_stopwords: str | None = "en") -> LexicalParams | None:
    if not bm25:
        unused = flags_given(BM25_SETTINGS)  # they would go unused: the build makes no BM25 part
        if unused:
            raise click.UsageError(f"{unused[0]} sets the BM25 part, which --no-bm25 leaves out: drop "
                                   f"{', '.join(unused)}, or --no-bm25")
        return None
    params = LexicalParams(k1=bm25_k1, b=bm25_b, method=bm25_method, stemmer=bm25_stemmer, stopwords=bm25_stopwords)
    params.check()
    return params


_OFF = {"stemmer": ("stemming", "stemmer"), "stopwords": ("stopword list", "list")}


def _named(ctx: click.Context, param: click.Parameter, value: str) -> str | None:
    """A --bm25-stemmer/--bm25-stopwords value as the name it is recorded by (``lexical_names``), None for 'none',
    refused as the flags are parsed when no stemmer or list has it (it exited 1 once the command ran). 'no' is
    refused: bm25s and PyStemmer read it as Norwegian, where a user writing it means none (a manifest recording
    'no' still opens as Norwegian)."""
    setting = param.name.removeprefix("bm25_")
    named = canonical(setting, value)
    if named is None:  # "" and none, one spelling of none for flags and library alike
        return None
    if value.lower() == "no":
        off, what = _OFF[setting]
        raise click.BadParameter(f"{value!r} is ambiguous: give none for no {off}, or norwegian for the Norwegian "
                                 f"{what}")
    unknown = unknown_name(setting, value)
    if unknown:
        raise click.BadParameter(f"{unknown} or none")
    return named


BM25_SETTINGS = ("bm25_k1", "bm25_b", "bm25_method", "bm25_stemmer", "bm25_stopwords")


def lexical_options(switch: bool = True) -> Callable:
    """BM25 settings → ``lexical`` (None with --no-bm25); ``switch`` adds --bm25/--no-bm25."""
    names = BM25_SETTINGS + (("bm25",) if switch else ())
    options = [
        click.option("--bm25-k1", type=FiniteRange(min=0, max=K1_MAX), default=0.9, show_default=True,
                     help="BM25 term-frequency saturation k1."),
        click.option("--bm25-b", type=FiniteRange(0, 1), default=0.4, show_default=True,
                     help="BM25 length normalisation b."),
        click.option("--bm25-method", type=click.Choice(BM25_METHODS), default="lucene", show_default=True,
                     help="bm25s scoring variant."),
        click.option("--bm25-stemmer", default="english", show_default=True, callback=_named,
                     help="Snowball stemmer language (PyStemmer) by name or ISO 639 code (en), or 'none'."),
        click.option("--bm25-stopwords", default="en", show_default=True, callback=_named,
                     help="bm25s stopword list (en, de, fr, es, ...), or 'none'."),
        collapsing(names, "lexical", _lexical_params),
    ]
    if switch:
        options.insert(0, click.option(
            "--bm25/--no-bm25", default=True, show_default=True,
            help="Also build a BM25 index in the folder (for --mode bm25/hybrid); costs a few percent of the "
                 "encoding time. Add one later with `retriever bm25 INDEX`."))
    return compose(*options)


def tuning_options() -> Callable:
    """--tune-fusion-on/--split → ``tune_fusion``: (dataset, split) or None."""
    return compose(
        click.option("--tune-fusion-on", type=DATASET, default=None,
                     help="BEIR folder whose judged --split queries pick the hybrid fusion (RRF k or convex "
                          "alpha, by nDCG@10); recorded in the manifest. [default: no tuning, RRF k=60]"),
        click.option("--split", default="train", show_default=True,
                     help="Split of --tune-fusion-on to tune on. It must judge other queries than test, the split "
                          "you report: test itself, or a split judging any of test's queries, is refused."),
        collapsing(("tune_fusion_on", "split"), "tune_fusion", _tune_fusion),
    )


def _tune_fusion(tune_fusion_on: Path | None, split: str) -> tuple[Path, str] | None:
    """(dataset, split) to tune on, or None; a --split without --tune-fusion-on is refused, as it would go unused
    (with `bm25 --drop-fusion`, ``run_drop`` refuses it in its own words)."""
    if tune_fusion_on is None and flags_given(("split",)) and not flags_given(("drop_fusion",)):
        raise click.UsageError(f"--split names the split --tune-fusion-on tunes the fusion on, and no "
                               f"--tune-fusion-on is given: add --tune-fusion-on DATASET, or drop --split {split}")
    return None if tune_fusion_on is None else (tune_fusion_on, split)


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
        from retriever.encoder import check_encoder_arguments

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
