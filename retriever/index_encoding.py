"""The encoding half of a build (``indexing.encode_and_index``): the corpus's shards in OUTPUT.shards and the tuning
queries' vectors, after every check that needs no encoded vector (the output, the index type against the vectors'
width and the corpus's size)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from retriever.build_output import check_output, refuse_index_beside, refuse_inputs_inside, shards_folder
from retriever.choices import ONDISK_TYPE
from retriever.corpus import Fields, check_first_record, check_rereadable, count_records, resolve_corpus_path
from retriever.corpus_encoding import PartRunner, encode_corpus
from retriever.encode_result import describe
from retriever.encoder import Encoder
from retriever.errors import CORPUS_PATH, INDEX_PATH, RetrieverError, given_path
from retriever.faiss_index import IndexParams
from retriever.folders import exclusive_build, named_output
from retriever.index_checks import check_buildable, check_trainable, trains
from retriever.other_shards import clear_other_encoder
from retriever.shard_origin import READING, reading_record
from retriever.tuning import check_held_out


def check_tuning_queries(given: bool, params: IndexParams) -> None:
    """Refuse tuning queries (texts or vectors) without a target recall to tune for: they would go unused."""
    if given and params.target_recall is None:
        raise RetrieverError("tuning queries were given without a target recall; add --target-recall")


def encode_for_index(corpus: str | Path, output: str | Path, encoder: Encoder | PartRunner,
                     params: IndexParams = IndexParams(), fmt: str = "auto", fields: Fields = Fields(),
                     shard_size: int = 10_000, overwrite: bool = False, progress: bool = True,
                     tuning_query_texts: list[str] | None = None) -> tuple[Path, np.ndarray | None]:
    """The encoding half of ``encode_and_index``: shards in OUTPUT.shards and the tuning queries' vectors.

    Split out so a caller can let the encoder go (e.g. Ray actors holding GPUs) before the index is built.
    """
    corpus, output = given_path(corpus, "corpus", CORPUS_PATH), given_path(output, "output", INDEX_PATH)
    check_rereadable(corpus)
    check_tuning_queries(tuning_query_texts is not None, params)
    with exclusive_build(named_output(output)):
        output = check_output(output, overwrite, params.index_type == ONDISK_TYPE)
        refuse_index_beside(output, shards_folder(output), "shards")
        metadata = encoder.metadata()
        refuse_inputs_inside(output, {"the corpus": corpus, "the model": metadata.get("model_path")})
        dim = int(metadata["dim"])
        check_buildable(params, dim)
        _check_countable(corpus, fmt, fields, params, dim, holds_out=tuning_query_texts is None)
        return _encode_shards(corpus, output, encoder, fmt, fields, shard_size, overwrite, progress,
                              tuning_query_texts)


def _check_countable(corpus: str | Path, fmt: str, fields: Fields, params: IndexParams, dim: int,
                     holds_out: bool) -> None:
    """``check_trainable`` and (tuning on held-out own vectors) ``check_held_out`` on the corpus's document count,
    before encoding it; its first record is read first, since a file the reader refuses (one JSON array) is
    miscounted (as one record: 'the corpus has 1 document … use fewer lists')."""
    trained = trains(params.index_type, dim)
    holds_out = holds_out and params.target_recall is not None
    if not (trained or holds_out):
        return
    check_first_record(corpus, fmt, fields)
    count = count_records(resolve_corpus_path(corpus), fmt)
    if count is None:  # a stream: the training or the tuning refuses it, later
        return
    if trained:
        check_trainable(params, dim, count)
    if holds_out:
        check_held_out(count, params)


def _encode_shards(corpus: str | Path, output: Path, encoder: Encoder | PartRunner, fmt: str, fields: Fields,
                   shard_size: int, overwrite: bool, progress: bool,
                   tuning_query_texts: list[str] | None) -> tuple[Path, np.ndarray | None]:
    shards = shards_folder(output)
    reading = {READING: reading_record(resolve_corpus_path(corpus), fmt, fields)}
    if overwrite and clear_other_encoder(shards, {**encoder.metadata(), **reading}):
        print(f"deleted {shards}: another encoder, split or reading flags made those shards", file=sys.stderr)
    result = encode_corpus(corpus, shards, encoder, fmt, fields, shard_size, progress=progress,
                           replace_other_corpus=True)  # OUT.shards is the build's own
    if progress:
        print(describe(result), file=sys.stderr)
    tuning_queries = None if tuning_query_texts is None else encoder.encode_queries(tuning_query_texts)
    return shards, tuning_queries
