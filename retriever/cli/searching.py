"""`retriever search`, and the searcher flags and opening `evaluate` shares."""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from retriever.blank_queries import blank_queries_warning
from retriever.choices import DEFAULT_K
from retriever.cli.hybrid import mode_options
from retriever.cli.options import (check_outputs_apart, check_run_suffix, compose, corpus_options, device_options,
                                   fields_from, flags_given, report_truncation)
from retriever.cli.output_params import OutputFile
from retriever.cli.outputs import expect_outputs, mark_resumable
from retriever.cli.stdin import read_stdin
from retriever.cli.stdout import check_stdout_open
from retriever.corpus import Fields, Query, read_queries
from retriever.errors import RetrieverError
from retriever.hits import Hit
from retriever.pooling import POOLINGS
from retriever.runs import Run, check_tag
from retriever.texts import is_blank
from retriever.unknown_words import no_hits_reason
from retriever.wording import agree, counted

if TYPE_CHECKING:
    from retriever.searching import Searcher


def moved_model_option():
    return click.option("--model", default=None,
                        help="Where the index's model is, when it moved (e.g. the index was copied without it); "
                             "refused unless its weights are the ones the index was built with. [default: the "
                             "model the manifest records, found relative to the index folder]")


def searcher_options():
    """Runtime and ANN flags, plus encoder flags that are only checked against the index's own encoder."""
    return compose(
        device_options(),
        click.option("--nprobe", type=click.IntRange(min=1), default=None,
                     help="IVF lists to visit. [default: the value recorded in the manifest]"),
        click.option("--ef-search", type=click.IntRange(min=1), default=None,
                     help="HNSW search beam width. [default: the value recorded in the manifest]"),
        moved_model_option(),
        click.option("--pooling", type=click.Choice(sorted(POOLINGS)), default=None,
                     help="Only checked: refused if it differs from the index's pooling."),
        click.option("--normalize/--no-normalize", default=None,
                     help="Only checked: refused if it differs from the index's normalisation."),
    )


def open_searcher(index: Path, device: str, dtype: str, model: str | None, pooling: str | None,
                  normalize: bool | None, mode: str = "dense", fusion_overrides: dict | None = None) -> Searcher:
    from retriever.searching import Searcher  # torch, transformers and FAISS: only for a command's work, not its --help

    return Searcher(index, device=device, dtype=dtype, model=model, pooling=pooling, normalize=normalize, mode=mode,
                    fusion_overrides=fusion_overrides)


def configure_batch_threads(mode: str) -> None:
    """Thread pools as `serve` sizes them (one worker): under CPU load, torch's and FAISS's default OpenMP
    pools spin against each other and against other processes, and a batch search runs several times slower.
    A bm25 run uses neither pool, so it is spared importing them (torch alone is over a second of CPU)."""
    if mode == "bm25":
        return
    from retriever.serving.threads import configure_threads

    configure_threads(workers=1)


# Shown as escapes, not obeyed: C0 and C1 controls (ESC starts sequences that clear a terminal, recolour it or set its
# title) and the bidirectional embeddings, overrides and isolates, which reorder what follows them on screen.
_UNSHOWABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(text: str) -> str:
    """A corpus text as one line of a terminal table: whitespace runs as one space, controls escaped."""
    return _UNSHOWABLE.sub(lambda match: f"\\u{ord(match.group()):04x}", " ".join(text.split()))


def _snippet(hit: Hit, width: int = 160) -> str:
    text = " ".join(hit.text.split())
    return _shown(text if len(text) <= width else text[:width - 1].rsplit(" ", 1)[0] + "…")


def print_hits(hits: list[Hit]) -> None:
    for hit in hits:
        title = f"  {_shown(hit.title)}" if hit.title else ""
        click.echo(f"{hit.rank:>3}  {hit.score:8.4f}  {_shown(hit.id)}{title}")
        click.echo(f"     {_snippet(hit)}")


def _run_tag(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """--tag checked while the flags are parsed: a tag a run line cannot hold is a usage error before any search
    (a run for standard output was searched whole before its first line refused the tag)."""
    try:
        return check_tag(value)
    except RetrieverError as error:
        raise click.BadParameter(str(error), ctx, param) from None


@click.command("search", context_settings={"allow_extra_args": True})  # words unquoted: told, in _check_search_flags
@click.argument("index", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("query", required=False)
@click.option("--k", "-k", type=click.IntRange(min=1), default=None,
              help="Hits per query. [default: 10 for one QUERY; 1000 with --queries, as Pyserini's --hits, so the "
                   "run is deep enough for recall@1000 and map@1000]")
@click.option("--json", "as_json", is_flag=True, help="Print the hits of a single QUERY as JSON instead of a table.")
@click.option("--queries", type=click.Path(exists=True, allow_dash=True, path_type=Path), default=None,
              help="Batch mode: a queries file (JSONL/TSV/Parquet or BEIR folder), or - for standard input "
                   "(JSONL unless --format says tsv); writes a run file to --output.")
@click.option("--output", "-o", type=OutputFile(dash_is_stdout=True), default=None,
              help="Run file to write in batch mode; - is standard output. [default: standard output]")
@click.option("--run-format", type=click.Choice(["trec", "jsonl"]), default="trec", show_default=True,
              help="Batch-mode output: TREC run (qid Q0 docid rank score tag) or JSONL.")
@click.option("--tag", default="retriever", show_default=True, callback=_run_tag,
              help="Run tag (last column of a TREC run): one token without whitespace.")
@searcher_options()
@mode_options()
@corpus_options(titles=False)
def search_command(index, query, k, as_json, queries, output, run_format, tag, device, dtype, nprobe, ef_search,
                   model, pooling, normalize, mode, fusion_overrides, fmt, id_field, text_field, title_field):
    """Search INDEX for QUERY, or for every query in --queries.

    \b
    Example:
      retriever search indexes/scifact "vitamin D and fractures"
      retriever search indexes/scifact --queries queries.jsonl -o run.trec
    """
    from retriever.evaluation import unknown_words_warning, warn
    from retriever.partial_runs import resumes, search_fingerprint, write_search_run

    _check_search_flags(query, queries, output, as_json, run_format)
    check_outputs_apart({"--output": output}, {"--queries": None if str(queries) == "-" else queries, "INDEX": index})
    check_run_suffix(output, run_format, "-o", "--run-format")  # after: an output that is an input is worse
    expect_outputs(output)
    if resumes(output):
        mark_resumable()
    if query is not None and is_blank(query):
        raise click.UsageError("the QUERY argument is empty (nothing but whitespace or invisible characters); give "
                               "the words to search for")
    # a batch's queries are read before the index and model load, so a malformed file costs seconds no more
    batch = None if query is not None else _read_batch(queries, fmt, fields_from(id_field, text_field, title_field))
    searcher = open_searcher(index, device, dtype, model, pooling, normalize, mode, fusion_overrides)
    k = k or (DEFAULT_K if query is not None else 1000)
    if query is not None:
        hits = searcher.search([query], k=k, nprobe=nprobe, ef_search=ef_search)[0]
        report_truncation(searcher.loaded_encoder)
        why = None if hits else no_hits_reason(searcher, [query], searcher.mode)[0]  # it printed nothing at all
        if as_json:  # the note as `serve` gives it
            note = {"note": why} if why else {}
            click.echo(json.dumps({"query": query, "hits": [h.to_json() for h in hits], **note}, ensure_ascii=False))
        else:
            print_hits(hits)
            if why:
                click.echo(why, err=True)
        return
    warn(blank_queries_warning(batch, searcher.mode, run_format))
    configure_batch_threads(searcher.mode)
    ids, texts, depth = [q.id for q in batch], [q.text for q in batch], min(k, searcher.index.ntotal)
    settings, unknown = {"nprobe": nprobe, "ef_search": ef_search}, []

    def search(start: int, progress: Callable[[int], None]) -> Iterator[Run]:
        # the unknown-word flags come with the vectors, but a resumed run's done queries get none made here
        unknown[:] = searcher.unknown_words(texts[:start]).tolist() if start and searcher.mode != "bm25" else []
        return searcher.run_batches(ids[start:], texts[start:], k=k, progress=progress, unknown_found=unknown,
                                    **settings)

    key = search_fingerprint(searcher, ids, texts, k, settings, run_format, tag) if output else ""
    shortfall = write_search_run(search, len(batch), output, run_format, tag, depth, key)
    warn(unknown_words_warning(batch, unknown, searcher.mode))
    report_truncation(searcher.loaded_encoder)
    if output or shortfall:  # no summary for standard output, but a query without hits has no line there to tell of
        click.echo(f"{'wrote' if output else 'searched'} {counted(len(batch), 'query')} × top {depth}"
                   f"{f' to {output}' if output else ''}{shortfall}", err=True)


# search's flags that only a batch run (--queries) uses, with the flag each parameter is
BATCH_ONLY = {"run_format": "--run-format", "tag": "--tag", "fmt": "--format", "id_field": "--id-field",
              "text_field": "--text-field", "title_field": "--title-field"}


def _check_search_flags(query: str | None, queries: Path | None, output: Path | None, as_json: bool,
                        run_format: str) -> None:
    """Refuse flags the search asked for would not use (a single QUERY printed a table under --run-format jsonl)."""
    extra = click.get_current_context().args
    if extra:
        raise click.UsageError(f"one QUERY is searched, and {counted(len(extra), 'more argument')} "
                               f"{agree(len(extra), 'follows', 'follow')} it ({', '.join(map(repr, extra[:3]))}); "
                               f"quote a query of several words (\"{' '.join([query or '', *extra])}\"), or give "
                               "many queries in a --queries file")
    if query == "-":
        raise click.UsageError("QUERY '-' is not standard input; give --queries - to read queries from it (one JSONL "
                               "query a line, or --format tsv)")
    if (query is None) == (queries is None):
        raise click.UsageError("give either a QUERY argument or --queries FILE")
    if query is not None and output is not None:
        raise click.UsageError("-o writes the run of --queries; a single QUERY prints its hits (--json for JSON)")
    if queries is not None and as_json:
        raise click.UsageError("--json is for a single QUERY; for --queries write JSONL with --run-format jsonl")
    unused = [BATCH_ONLY[name] for name in BATCH_ONLY if flags_given((name,))]
    if query is not None and unused:
        raise click.UsageError(f"{', '.join(unused)} {agree(len(unused), 'applies', 'apply')} only with "
                               "--queries; a single QUERY prints its hits (--json for JSON)")
    if queries is not None and "--title-field" in unused:  # the queries reader reads no title: it went unused
        raise click.UsageError("--title-field names a passage's title, and a query has none: a query is its "
                               "--text-field alone; drop --title-field")
    if run_format == "jsonl" and "--tag" in unused:
        raise click.UsageError("--tag is the last column of a TREC run, and a JSONL run has no tag; drop --tag or "
                               "use --run-format trec")
    check_stdout_open(output)


def _read_batch(queries: Path, fmt: str, fields: Fields) -> list[Query]:
    """Queries from a file, or from standard input for ``-``."""
    if str(queries) != "-":
        return read_queries(queries, fmt, fields)
    suffix = {"tsv": ".tsv", "parquet": ".parquet"}.get(fmt, ".jsonl")
    return read_stdin(suffix, lambda path: read_queries(path, fmt, fields))


COMMANDS = [search_command]
