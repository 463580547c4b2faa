"""`retriever encode`, `retriever index` and `retriever build`."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import click

from retriever.choices import INDEX_TYPES, ONDISK_TYPE
from retriever.cli.hybrid import check_build_tuning, lexical_options, run_tuning, tuning_options
from retriever.cli.info import echo_summary_json
from retriever.cli.options import (FiniteRange, OutputFolder, compose, corpus_options, encoder_options, fields_from,
                                   flags_given, json_option, renamed_option, report_truncation, runtime_options)
from retriever.cli.outputs import expect_outputs
from retriever.cli.ray_flags import (check_ray_flags, check_ray_worker_flags, passage_encoder, ray_for_parts,
                                     ray_options)
from retriever.corpus import (check_first_record, check_rereadable, detect_format, read_queries,
                              resolve_corpus_path)
from retriever.corpus_records import beir_keys
from retriever.encode_result import describe
from retriever.encoder_settings import EncoderSettings
from retriever.folders import named_output
from retriever.shards import sample_rows
from retriever.wording import counted


def encoding_options():
    """What `encode` and `build` share: the encoder, where it runs, how the corpus is read and cut into shards."""
    return compose(
        encoder_options(),
        runtime_options(),
        corpus_options(),
        click.option("--shard-size", type=click.IntRange(min=1), default=10_000, show_default=True,
                     help="Rows per Parquet shard; a crashed run resumes after the last complete shard."),
    )


def index_options():
    """Flags named as IndexParams fields (commands pass them on as **index_flags), plus --overwrite and
    --tuning-queries-file (popped by the commands)."""
    return compose(
        click.option("--index-type", default="flat", show_default=True,
                     help=f"One of {', '.join(INDEX_TYPES)} (flat = exact inner product), or any FAISS factory "
                          "string, e.g. 'IVF1024,PQ48' or 'HNSW64,Flat'."),
        click.option("--hnsw-m", type=click.IntRange(min=2), default=32, show_default=True,
                     help="HNSW graph degree (hnsw only)."),
        click.option("--ef-construction", type=click.IntRange(min=1), default=200, show_default=True,
                     help="HNSW build-time beam width (hnsw only)."),
        click.option("--nlist", type=click.IntRange(min=1), default=None,
                     help="IVF lists (ivfpq, ivf-ondisk). [default: about 4*sqrt(N)]"),
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
        click.option("--refine-k-factor", type=click.IntRange(1, 1000), default=50, show_default=True,
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


def _tuning_texts(path: Path | None, limit: int, seed: int) -> list[str] | None:
    if path is None:
        return None
    with beir_keys("a --tuning-queries-file keys its queries '_id' and 'text', as BEIR does (--id-field and "
                   "--text-field name the corpus's keys)"):
        texts = [query.text for query in read_queries(path)]
    if len(texts) > limit:
        texts = [texts[row] for row in sample_rows(len(texts), limit, seed)]
    return texts


_IVF_TYPES = ("ivfpq", ONDISK_TYPE)
# The index types each build flag is used by, and how to say so: given with another type it was ignored in silence.
_TYPE_FLAGS = {
    "hnsw_m": (lambda kind: kind == "hnsw", "--index-type hnsw (a factory string gives M itself: 'HNSW64,Flat')"),
    "ef_construction": (lambda kind: kind == "hnsw" or "HNSW" in kind, "an index with an HNSW graph"),
    "nlist": (lambda kind: kind in _IVF_TYPES, "--index-type ivfpq or ivf-ondisk (a factory string gives its lists "
                                               "itself: 'IVF1024,PQ48')"),
    "pq_m": (lambda kind: kind == "ivfpq", "--index-type ivfpq (a factory string gives its codes itself: "
                                           "'IVF1024,PQ48')"),
    "ondisk_codes": (lambda kind: kind == ONDISK_TYPE, f"--index-type {ONDISK_TYPE}"),
    "part_size": (lambda kind: kind == ONDISK_TYPE, f"--index-type {ONDISK_TYPE}"),
    "parallel_parts": (lambda kind: kind == ONDISK_TYPE, f"--index-type {ONDISK_TYPE}"),
    "refine_k_factor": (lambda kind: "RFlat" in kind or "Refine" in kind, "factory strings ending in ',RFlat'"),
    "train_size": (lambda kind: kind not in ("flat", "hnsw"), "an index that is trained (ivfpq, ivf-ondisk or a "
                                                              "factory string such as 'IVF1024,PQ48')"),
}


def _check_type_flags(index_type: str) -> None:
    """Refuse a build flag the --index-type (or, for the tuning flags, the absent --target-recall) does not use,
    before any encoding, as `search` refuses --nprobe on a flat index: `--nlist 4096 --index-type hnsw` built the
    default graph and exited 0."""
    for name, (uses, users) in _TYPE_FLAGS.items():
        given = [] if uses(index_type) else flags_given((name,))
        if given:
            raise click.UsageError(f"{given[0]} is used only by {users}, not by --index-type {index_type!r}; drop it "
                                   "or choose an index type that uses it")
    given = [] if flags_given(("target_recall",)) else flags_given(("tuning_queries", "tuning_queries_file"))
    if given:  # the count was ignored in silence; the file's queries were encoded before the library refused them
        raise click.UsageError(f"{given[0]} is used only with --target-recall (what recall is measured on); add "
                               "--target-recall or drop it")


def _check_train_size_used(index_type: str, dim_of: Callable[[], int]) -> None:
    """--train-size with a factory string that trains nothing ('HNSW32,Flat', 'SQfp16') is refused as with flat or
    hnsw (it was ignored, exit 0); FAISS must build the string to tell, so this waits for the vectors' width."""
    if index_type in INDEX_TYPES or not flags_given(("train_size",)):
        return
    from retriever.faiss_index import IndexParams, new_index

    if new_index(index_type, dim_of(), IndexParams(index_type)).is_trained:
        raise click.UsageError(f"--train-size is used only by {_TYPE_FLAGS['train_size'][1]}, not by --index-type "
                               f"{index_type!r}, which trains nothing; drop it or choose an index type that uses it")


@click.command("encode")
@click.argument("corpus", type=click.Path(exists=True, path_type=Path))
@click.option("--output", "-o", type=OutputFolder(), required=True,
              help="Folder for the Parquet shards (created if missing; reruns resume in it).")
@encoding_options()
@renamed_option("--worker-index", "--shard-index", type=click.IntRange(min=0), default=0, show_default=True,
                help="This worker's number, for splitting one corpus over independent workers.")
@renamed_option("--num-workers", "--num-shards", type=click.IntRange(min=1), default=1, show_default=True,
                help="How many workers split the corpus (passage p goes to worker p % N).")
@ray_options()
@json_option("what the run encoded (the fields of `retriever.encode_result.EncodeResult`)")
def encode_command(corpus, output, model, encoder_overrides, device, dtype, batch_size, fmt, id_field, text_field,
                   title_field, shard_size, worker_index, num_workers, ray_address, ray_workers, ray_cpus_per_worker,
                   as_json):
    """Encode CORPUS (BEIR folder, JSONL, TSV or Parquet) into Parquet embedding shards.

    \b
    Example (worker 0 of 2; run --worker-index 1 elsewhere):
      retriever encode ../shared/datasets/scifact -o shards/ --worker-index 0 --num-workers 2
    """
    if worker_index >= num_workers:  # the library's check said so with exit code 1, not as a bad flag
        raise click.BadParameter(f"{worker_index} is not below --num-workers {num_workers} (workers are numbered "
                                 f"0 to {num_workers - 1})", param_hint="'--worker-index'")
    check_ray_worker_flags(ray_address)
    detect_format(resolve_corpus_path(corpus), fmt)  # before the model loads and Ray starts, which take seconds
    check_first_record(corpus, fmt, fields_from(id_field, text_field, title_field))
    settings = EncoderSettings.for_model(model, **encoder_overrides)
    from retriever.corpus_encoding import encode_corpus  # torch, transformers (seconds): after every flag's check

    with passage_encoder(settings, device, dtype, batch_size, ray_address, ray_workers,
                          ray_cpus_per_worker) as encoder:
        result = encode_corpus(corpus, output, encoder, fmt, fields_from(id_field, text_field, title_field),
                               shard_size, worker_index, num_workers)
    click.echo(describe(result), err=True)
    report_truncation(passages_cut=result.passages_cut, passages=result.encoded + result.skipped,
                      passage_max_length=settings.passage_max_length)
    if as_json:
        click.echo(json.dumps({**asdict(result), "output": str(result.output)}, indent=2))  # as info --json


@click.command("index")
@click.argument("shards", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--corpus", type=click.Path(exists=True, path_type=Path), required=True,
              help="The corpus the shards were encoded from; becomes the doc store.")
@click.option("--output", "-o", type=OutputFolder(), required=True, help="Index folder to create.")
@index_options()
@corpus_options()
@ray_options()
@lexical_options()
@tuning_options()
@json_option("the built folder's summary (`info --json`'s)")
def index_command(shards, corpus, output, overwrite, fmt, id_field, text_field, title_field, tuning_queries_file,
                  lexical, tune_fusion, as_json, **index_flags):
    """Build a FAISS index folder from the embedding SHARDS folder.

    \b
    Example:
      retriever index shards/ --corpus ../shared/datasets/scifact -o indexes/scifact --index-type hnsw
    """
    from retriever.build_output import shards_to_index
    from retriever.faiss_index import IndexParams

    output = named_output(output)  # `-o .`: the build swaps a new folder in at that path; `.` would name the old one
    check_build_tuning(tune_fusion, lexical, output, overwrite)
    _expect_folder(output, tune_fusion, as_json)
    params = IndexParams(**index_flags)
    check_ray_flags(params, encodes=False)
    _check_type_flags(params.index_type)
    _check_train_size_used(params.index_type, lambda: int(shards_to_index(shards)[1]["dim"]))
    texts = _tuning_texts(tuning_queries_file, params.tuning_queries, params.seed)
    from retriever.encoder import recorded_encoder  # torch, transformers (seconds): after every flag's check
    from retriever.indexing import build_index

    if texts is None:
        vectors = None
    else:
        _, recorded = shards_to_index(shards)
        query_encoder = recorded_encoder(recorded, f"the shards in {shards} were encoded", shards, remedy=(
            "put the model the shards were encoded with back where they record it, or drop --tuning-queries-file "
            "(--target-recall then tunes on held-out passages, which needs no model)"))
        vectors = query_encoder.encode_queries(texts)
        report_truncation(query_encoder)
    manifest = build_index(shards, corpus, output, params, fmt, fields_from(id_field, text_field, title_field),
                           overwrite, tuning_queries=vectors, lexical=lexical)
    run_tuning(output, tune_fusion, built=True)
    _summarise(output, manifest, as_json)


@click.command("build")
@click.argument("corpus", type=click.Path(exists=True, path_type=Path))
@click.option("--output", "-o", type=OutputFolder(), required=True,
              help="Index folder to create, e.g. indexes/NAME. Shards are kept beside it in NAME.shards/.")
@encoding_options()
@index_options()
@ray_options()
@lexical_options()
@tuning_options()
@json_option("the built folder's summary (`info --json`'s)")
def build_command(corpus, output, model, encoder_overrides, device, dtype, batch_size, fmt, id_field, text_field,
                  title_field, shard_size, overwrite, tuning_queries_file, ray_address, ray_workers,
                  ray_cpus_per_worker, lexical, tune_fusion, as_json, **index_flags):
    """Encode CORPUS and index it in one step (resumable: rerun after a crash).

    \b
    Example:
      retriever build ../shared/datasets/scifact --output indexes/scifact
    """
    from retriever.faiss_index import IndexParams

    output = named_output(output)  # as in index_command
    check_build_tuning(tune_fusion, lexical, output, overwrite)
    _expect_folder(output, tune_fusion, as_json)
    check_rereadable(corpus)  # these two before the model loads and Ray starts, which take seconds
    detect_format(resolve_corpus_path(corpus), fmt)
    check_first_record(corpus, fmt, fields_from(id_field, text_field, title_field))
    params = IndexParams(**index_flags, ray_address=ray_address, ray_workers=ray_workers,
                         ray_cpus_per_worker=ray_cpus_per_worker)
    check_ray_flags(params, encodes=True)
    _check_type_flags(params.index_type)
    settings = EncoderSettings.for_model(model, **encoder_overrides)  # reading the model's folder imports torch
    fields = fields_from(id_field, text_field, title_field)
    tuning_texts = _tuning_texts(tuning_queries_file, params.tuning_queries, params.seed)
    from retriever.indexing import build_index, encode_for_index  # torch, transformers: after every flag's check

    # One Ray session for the encoder actors and the ivf-ondisk part tasks: starting Ray costs seconds.
    with ray_for_parts(params):
        with passage_encoder(settings, device, dtype, batch_size, ray_address, ray_workers,
                              ray_cpus_per_worker) as encoder:  # let go (Ray: its actors) before indexing
            _check_train_size_used(params.index_type, lambda: int(encoder.metadata()["dim"]))
            shards, tuning_queries = encode_for_index(corpus, output, encoder, params, fmt, fields, shard_size,
                                                      overwrite, tuning_query_texts=tuning_texts)
        manifest = build_index(shards, corpus, output, params, fmt, fields, overwrite, tuning_queries=tuning_queries,
                               lexical=lexical, built_by="build")
    report_truncation(passages_cut=manifest["corpus"]["passages_cut"], passages=manifest["corpus"]["documents"],
                      passage_max_length=manifest["encoder"]["passage_max_length"])
    run_tuning(output, tune_fusion, built=True)
    _summarise(output, manifest, as_json)


def _expect_folder(output: Path, tune_fusion: tuple[Path, str] | None, as_json: bool) -> None:
    """The built folder is the whole work once swapped in, unless tuning or the --json summary come after it."""
    if tune_fusion is None and not as_json:
        expect_outputs(output)


def _summarise(output: Path, manifest: dict, as_json: bool) -> None:
    """`build` and `index` end alike: the line on stderr, and with --json the folder's summary on stdout."""
    click.echo(f"built {output}: {counted(manifest['index']['count'], 'vector')}, {manifest['index']['factory']}",
               err=True)
    if as_json:
        echo_summary_json(output)


COMMANDS = [encode_command, index_command, build_command]
