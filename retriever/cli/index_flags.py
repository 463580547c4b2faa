"""The flags that shape a FAISS index (`index` and `build`), and the refusal of those the chosen index type does not
use, before any encoding."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from retriever.choices import INDEX_TYPES, REFINE_K_FACTOR_MAX
from retriever.cli.options import FiniteRange, compose, flags_given
from retriever.index_type_settings import SETTING_USERS, unused_setting, untrained_refusal, untuned_refusal


def index_options():
    """Flags named as IndexParams fields (commands pass them on as **index_flags), plus --overwrite and
    --tuning-queries-file (popped by the commands)."""
    return compose(
        click.option("--index-type", default="flat", show_default=True, callback=_readable_index_type,
                     help=f"One of {', '.join(INDEX_TYPES)} (flat = exact inner product), or any FAISS factory "
                          "string, e.g. 'IVF1024,PQ48' or 'HNSW64,Flat'."),
        click.option("--hnsw-m", type=click.IntRange(min=2), default=32, show_default=True,
                     help="HNSW graph degree (hnsw only)."),
        click.option("--ef-construction", type=click.IntRange(min=1), default=200, show_default=True,
                     help="HNSW build-time beam width (hnsw only)."),
        click.option("--nlist", type=click.IntRange(min=1), default=None,
                     help="IVF lists (ivfpq, ivf-ondisk). [default: about 4*sqrt(N), at most --train-size/39]"),
        click.option("--pq-m", type=click.IntRange(min=1), default=None,
                     help="PQ sub-quantisers; must divide the dimension (ivfpq only). [default: dim/8]"),
        click.option("--ondisk-codes", type=click.Choice(["sq8", "fp16", "flat"]), default="sq8", show_default=True,
                     help="How ivf-ondisk stores each vector: 8-bit (dim bytes), 16-bit float (2*dim bytes) or "
                          "float32 (4*dim bytes) scalar codes."),
        click.option("--part-size", type=click.IntRange(min=1), default=500_000, show_default=True,
                     help="Vectors per part of an ivf-ondisk build; a worker holds one part's codes in memory. "
                          "Finished parts are kept in OUTPUT.parts/ until the index is in place, so a rerun after "
                          "a crash skips them."),
        click.option("--parallel-parts", type=click.IntRange(min=1), default=None,
                     help="Worker processes filling ivf-ondisk parts at once, without --ray (with it: "
                          "--ray-workers). [default: one per core]"),
        click.option("--refine-k-factor", type=click.IntRange(1, REFINE_K_FACTOR_MAX), default=50, show_default=True,
                     help="For factory strings ending in ',RFlat': re-score k x this many candidates with the exact "
                          "vectors."),
        click.option("--train-size", type=click.IntRange(min=1), default=100_000, show_default=True,
                     help="Vectors sampled from the shards to train IVF/PQ."),
        click.option("--target-recall", type=FiniteRange(0, 1, min_open=True), default=None,
                     help="Pick nprobe/efSearch as the smallest value whose recall@10 against exact search, "
                          "measured on --tuning-queries of the collection's own vectors (held out of the index "
                          "until tuning is done) or on --tuning-queries-file, reaches this; `search` then uses "
                          "it. [default: nprobe 16, efSearch 128]"),
        click.option("--tuning-queries", type=click.IntRange(min=1), default=1000, show_default=True,
                     help="How many vectors (own vectors, or queries from --tuning-queries-file) to measure "
                          "recall on for --target-recall."),
        click.option("--tuning-queries-file", type=click.Path(exists=True, path_type=Path), default=None,
                     help="Queries (BEIR folder, JSONL, TSV or Parquet) to tune --target-recall on instead of the "
                          "collection's own vectors: real queries can be harder than passages. Only their texts "
                          "are used, encoded by the index's query encoder. [default: none]"),
        click.option("--overwrite", is_flag=True,
                     help="Replace an existing index folder (build: shards of another encoder in NAME.shards are "
                          "deleted first)."),
    )


def _readable_index_type(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A string FAISS cannot read ('Flatt', 'IVF,Flat') is a bad flag, said before any model loads or encoding; so are
    the strings ``check_factory`` refuses (whose words name the flag)."""
    from retriever.errors import RetrieverError
    from retriever.faiss_index import unreadable_index_type  # FAISS: imported once a command is parsing its flags

    try:
        unreadable = unreadable_index_type(value)
    except RetrieverError as error:
        raise click.UsageError(str(error), ctx) from None
    if unreadable is not None:
        raise click.BadParameter(unreadable, ctx, param)
    return value


def check_type_flags(index_type: str) -> None:
    """Refuse a build flag the --index-type (or, for the tuning flags, the absent --target-recall) does not use,
    before any encoding, as `search` refuses --nprobe on a flat index: `--nlist 4096 --index-type hnsw` built the
    default graph and exited 0."""
    unused = unused_setting(index_type, [name for name in SETTING_USERS if flags_given((name,))])
    if unused:
        raise click.UsageError(unused)
    given = [] if flags_given(("target_recall",)) else flags_given(("tuning_queries", "tuning_queries_file"))
    if given:  # the count was ignored in silence; the file's queries were encoded before the library refused them
        raise click.UsageError(untuned_refusal(given[0]))


def check_train_size_used(index_type: str, dim_of: Callable[[], int]) -> None:
    """--train-size with a factory string that trains nothing ('HNSW32,Flat', 'SQfp16') is refused as with flat or
    hnsw (it was ignored, exit 0); FAISS must build the string to tell, so this waits for the vectors' width."""
    if index_type in INDEX_TYPES or not flags_given(("train_size",)):
        return
    from retriever.index_checks import trains

    if not trains(index_type, dim_of()):
        raise click.UsageError(untrained_refusal(index_type))
