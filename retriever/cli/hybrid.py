"""Flags for BM25 and hybrid search shared by several commands (`retriever bm25` itself is ``cli.bm25``'s).

Each decorator turns its flags into one value before the command runs (``mode`` and
``fusion_overrides``; ``lexical``; ``tune_fusion``), so commands only gain a parameter or two.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import click

from retriever.cli.options import FiniteRange, collapsing, compose, flags_given
from retriever.errors import RetrieverError
from retriever.fusion import METHODS as FUSIONS
from retriever.fusion import MODES, RRF_K_MAX, FusionParams
from retriever.lexical import K1_MAX, LexicalParams
from retriever.lexical import METHODS as BM25_METHODS
from retriever.lexical_names import canonical, unknown_name

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
