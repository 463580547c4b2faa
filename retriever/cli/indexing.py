"""`retriever encode`, `retriever index` and `retriever build`."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from retriever.choices import ONDISK_TYPE
from retriever.cli.bm25 import check_build_tuning, run_tuning
from retriever.cli.hybrid import lexical_options, tuning_options
from retriever.cli.index_flags import check_train_size_used, check_type_flags, index_options
from retriever.cli.info import echo_summary_json
from retriever.cli.options import (compose, corpus_options, device_options, encoder_options, fields_from, flags_given,
                                   json_option, renamed_option, report_truncation, runtime_options)
from retriever.cli.output_params import OutputFolder
from retriever.cli.outputs import expect_outputs, mark_resumable
from retriever.cli.ray_flags import (check_ray_flags, check_ray_worker_flags, passage_encoder, ray_for_parts,
                                     ray_options, ray_part_settings)
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


def _tuning_texts(path: Path | None, limit: int, seed: int) -> list[str] | None:
    if path is None:
        return None
    with beir_keys("a --tuning-queries-file keys its queries '_id' and 'text', as BEIR does (--id-field and "
                   "--text-field name the corpus's keys)"):
        texts = [query.text for query in read_queries(path)]
    if len(texts) > limit:
        texts = [texts[row] for row in sample_rows(len(texts), limit, seed)]
    return texts


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
    mark_resumable()  # after the last complete shard
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
@device_options()
@json_option("the built folder's summary (`info --json`'s)")
def index_command(shards, corpus, output, overwrite, fmt, id_field, text_field, title_field, tuning_queries_file,
                  lexical, tune_fusion, device, dtype, as_json, **index_flags):
    """Build a FAISS index folder from the embedding SHARDS folder (--device and --dtype: how the queries of
    --tune-fusion-on or --tuning-queries-file are encoded).

    \b
    Example:
      retriever index shards/ --corpus ../shared/datasets/scifact -o indexes/scifact --index-type hnsw
    """
    from retriever.build_output import shards_to_index
    from retriever.faiss_index import IndexParams

    output = named_output(output)  # `-o .`: the build swaps a new folder in at that path; `.` would name the old one
    check_build_tuning(tune_fusion, lexical, output, overwrite)
    _expect_folder(output, tune_fusion, as_json, resumes=index_flags["index_type"] == ONDISK_TYPE)
    check_type_flags(index_flags["index_type"])  # usage errors before IndexParams refuses the same settings
    check_ray_flags(index_flags["ray_address"], index_flags["index_type"], index_flags["parallel_parts"], encodes=False)
    params = IndexParams(**index_flags)
    check_train_size_used(params.index_type, lambda: int(shards_to_index(shards)[1]["dim"]))
    _check_query_device(device, dtype, tune_fusion is not None or tuning_queries_file is not None)
    texts = _tuning_texts(tuning_queries_file, params.tuning_queries, params.seed)
    from retriever.encoder import recorded_encoder  # torch, transformers (seconds): after every flag's check
    from retriever.indexing import build_index

    if texts is None:
        vectors = None
    else:
        _, recorded = shards_to_index(shards)
        remedy = ("put the model the shards were encoded with back where they record it, or drop "
                  "--tuning-queries-file (--target-recall then tunes on held-out passages, which needs no model)")
        query_encoder = recorded_encoder(recorded, f"the shards in {shards} were encoded", shards, device, dtype,
                                         remedy=remedy)
        vectors = query_encoder.encode_queries(texts)
        report_truncation(query_encoder)
    manifest = build_index(shards, corpus, output, params, fmt, fields_from(id_field, text_field, title_field),
                           overwrite, tuning_queries=vectors, lexical=lexical)
    run_tuning(output, tune_fusion, built=True, device=device, dtype=dtype)
    _summarise(output, manifest, as_json)


def _check_query_device(device: str, dtype: str, encodes: bool) -> None:
    """`index` runs a model only to encode tuning queries: --device/--dtype are refused without them (as `bm25`
    refuses them without --tune-fusion-on), and a device or precision that cannot run before the build, not after."""
    unused = [] if encodes else flags_given(("device", "dtype"))
    if unused:
        raise click.UsageError(f"{unused[0]} sets how the queries of --tune-fusion-on or --tuning-queries-file are "
                               f"encoded, and `index` otherwise runs no model: drop {unused[0]}, or add one of them")
    if encodes:
        from retriever.device import resolve_device, resolve_dtype

        resolve_dtype(dtype, resolve_device(device))


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
    _expect_folder(output, tune_fusion, as_json, resumes=True)  # from its shards
    check_rereadable(corpus)  # these two before the model loads and Ray starts, which take seconds
    detect_format(resolve_corpus_path(corpus), fmt)
    check_first_record(corpus, fmt, fields_from(id_field, text_field, title_field))
    check_type_flags(index_flags["index_type"])  # as in index_command
    check_ray_flags(ray_address, index_flags["index_type"], index_flags["parallel_parts"], encodes=True)
    params = IndexParams(**index_flags, **ray_part_settings(index_flags["index_type"], ray_address, ray_workers,
                                                            ray_cpus_per_worker))
    settings = EncoderSettings.for_model(model, **encoder_overrides)  # reading the model's folder imports torch
    fields = fields_from(id_field, text_field, title_field)
    tuning_texts = _tuning_texts(tuning_queries_file, params.tuning_queries, params.seed)
    from retriever.indexing import build_index, encode_for_index  # torch, transformers: after every flag's check

    # One Ray session for the encoder actors and the ivf-ondisk part tasks: starting Ray costs seconds.
    with ray_for_parts(params):
        with passage_encoder(settings, device, dtype, batch_size, ray_address, ray_workers,
                              ray_cpus_per_worker) as encoder:  # let go (Ray: its actors) before indexing
            check_train_size_used(params.index_type, lambda: int(encoder.metadata()["dim"]))
            shards, tuning_queries = encode_for_index(corpus, output, encoder, params, fmt, fields, shard_size,
                                                      overwrite, tuning_query_texts=tuning_texts)
        manifest = build_index(shards, corpus, output, params, fmt, fields, overwrite, tuning_queries=tuning_queries,
                               lexical=lexical, built_by="build")
    report_truncation(passages_cut=manifest["corpus"]["passages_cut"], passages=manifest["corpus"]["documents"],
                      passage_max_length=manifest["encoder"]["passage_max_length"])
    run_tuning(output, tune_fusion, built=True, device=device, dtype=dtype)
    _summarise(output, manifest, as_json)


def _expect_folder(output: Path, tune_fusion: tuple[Path, str] | None, as_json: bool, resumes: bool) -> None:
    """The built folder is the whole work once swapped in, unless tuning or the --json summary come after it.
    ``resumes``: a rerun goes on from `build`'s shards or an ivf-ondisk build's parts; any other type's building
    folder is deleted when the build fails, so `index` of it starts over (it said its finished work was kept)."""
    if resumes:
        mark_resumable()
    if tune_fusion is None and not as_json:
        expect_outputs(output)


def _summarise(output: Path, manifest: dict, as_json: bool) -> None:
    """`build` and `index` end alike: the line on stderr, and with --json the folder's summary on stdout."""
    click.echo(f"built {output}: {counted(manifest['index']['count'], 'vector')}, {manifest['index']['factory']}",
               err=True)
    if as_json:
        echo_summary_json(output)


COMMANDS = [encode_command, index_command, build_command]
