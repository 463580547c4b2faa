"""`retriever serve`: load indexes once and answer top-k queries over HTTP."""
from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from retriever.choices import (DEFAULT_K, MAX_BODY_BYTES, MAX_QUERIES, MAX_QUERY_CHARS, MAX_QUEUE_SECONDS,
                               MAX_WAITING_QUERIES, MAX_WAITING_REQUESTS)
from retriever.cli.hybrid import mode_options
from retriever.cli.listening import BACKLOG, bare_host, listening_sockets, start_listening
from retriever.cli.options import FiniteRange, device_options
from retriever.cli.searching import moved_model_option
from retriever.cli.serving_names import parse_named_indexes
from retriever.errors import RetrieverError
from retriever.wording import counted

if TYPE_CHECKING:
    from fastapi import FastAPI

    from retriever.searching import Searcher

DEFAULT_PORT = 8000


def _origins(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """--allow-origin checked while the flags are parsed, before any socket is bound or index loaded."""
    from retriever.serving.cors import checked_origins

    try:
        return checked_origins(value)
    except RetrieverError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def _host(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """--host checked while the flags are parsed (``bare_host``), before any socket is bound or index loaded."""
    try:
        return bare_host(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def check_fusion_used(searchers: dict, fusion_overrides: dict) -> None:
    """Fusion flags stand whatever --mode is, since a request may ask for hybrid; but where no index has BM25 no
    request can, and the flags were ignored without a word (as `search` refuses them outside --mode hybrid)."""
    given = [name for name, value in fusion_overrides.items() if value is not None]
    if not given or any(searcher.lexical is not None for searcher in searchers.values()):
        return
    unusable = (f"the fusion flags (--fusion, --alpha, --rrf-k, --fusion-depth) apply only to hybrid search, and no "
                f"index served ({', '.join(searchers)}) has a BM25 part")
    damaged = [(name, searcher.lexical_problem) for name, searcher in searchers.items() if searcher.lexical_problem]
    if damaged:  # there, but it did not open: "has no BM25 part" was untrue, and adding one is not the fix
        raise RetrieverError(f"{unusable} it can search: {damaged[0][0]}'s could not be opened: {damaged[0][1]}")
    raise RetrieverError(f"{unusable}: drop them, or add BM25 with `retriever bm25 INDEX`")


def load_searchers(folders: dict[str, Path], **options: object) -> dict:
    """A Searcher per index folder (``options`` are Searcher's). Indexes built with one model and the same query
    encoder settings share one loaded encoder (``SharedEncoders``), so memory does not grow with each index of a model;
    each batcher still encodes only its own index's queries, with the vectors its own encoder would give. An index
    whose BM25 part could not be opened is served for dense search, with a warning naming the damage. Every folder's
    manifest and files, and the default mode, are checked first, so a last index that is damaged or cannot serve
    --mode fails before the others' models load."""
    from retriever.index_opening import check_servable
    from retriever.shared_encoders import SharedEncoders
    from retriever.searching import Searcher

    for folder in folders.values():
        check_servable(folder, options.get("mode", "dense"), options.get("fusion_overrides"))
    searchers, shared, opened = {}, SharedEncoders(), {}
    for name, folder in folders.items():
        real = folder.resolve()
        if real in opened:  # one folder under two names: one index in memory (workers share it anyway)
            first = opened[real]
            click.echo(f"{name} shares the loaded index of {first} (the same folder, {folder})", err=True)
            searchers[name] = searchers[first]
            continue
        click.echo(f"loading {name} from {folder}", err=True)
        searchers[name] = Searcher(folder, encoders=shared, **options)
        opened[real] = name
        model = searchers[name].encoder.query_model
        first = next(other for other, searcher in searchers.items() if searcher.encoder.query_model is model)
        if first != name:
            click.echo(f"{name} shares the loaded model of {first} (same model folder, weights and query encoder "
                       "settings)", err=True)
        warn_of_damage(name, searchers[name], options.get("fusion_overrides"))
    return searchers


def warn_of_damage(name: str, searcher: Searcher, fusion_overrides: dict | None = None) -> None:
    """Say at start-up what part of an index could not be opened: its other modes are served, so the operator hears
    of it now rather than from each failing request. A damaged fusion record the fusion flags stand in for is named
    too (hybrid works on the flags, but `info` shows it damaged, and a restart without them refuses hybrid)."""
    from retriever.fusion import record_damage

    if searcher.lexical_problem:
        click.echo(f"warning: {name}: its BM25 part could not be opened, so bm25 and hybrid requests to it get a "
                   f"500 until it is rebuilt: {searcher.lexical_problem}", err=True)
        return
    damage = searcher.fusion_problem or record_damage(searcher.index_dir, searcher.manifest, fusion_overrides)
    if damage:
        served = "get a 500" if searcher.fusion_problem else "use the fusion flags given"
        click.echo(f"warning: {name}: its recorded fusion is damaged, so hybrid requests to it {served} until it is "
                   f"retuned or dropped: {damage}", err=True)


def _log_requests_on_stderr() -> None:
    """uvicorn's request lines at INFO, on stderr with serve's other lines: the "warning" level that keeps uvicorn's
    own chatter out set its access logger too, so --access-log logged nothing."""
    access = logging.getLogger("uvicorn.access")
    access.setLevel(logging.INFO)
    for handler in access.handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.stderr)


def run_app(app: FastAPI, sockets: list[socket.socket], announce: str, address: tuple[str, int] = ("", 0),
            **options: object) -> None:
    """Start the batchers (warming each index up) here rather than in the app's lifespan, so a failing index is
    this command's one-line error, not uvicorn's traceback and exit; then listen on the bound sockets (at
    ``address``, for the error) and run uvicorn on them."""
    served = app.state.served
    try:  # a Ctrl-C in the warm-up goes on to the loading's line; one once serving is announced stops it
        served.start()
        start_listening(sockets, *address, backlog=int(options.get("backlog", BACKLOG)))
        click.echo(announce, err=True)
        _serve(app, sockets, options)
    finally:
        _stop(served)


def _serve(app: FastAPI, sockets: list[socket.socket], options: dict) -> None:
    """Run uvicorn, which takes Ctrl-C as a stop (``StoppingServer``). One in the milliseconds before its handlers are
    in is the same stop, with no request in flight: it said "interrupted (Ctrl-C) while the indexes loaded; nothing
    was served", exit code 130, after the line saying it served."""
    import uvicorn

    from retriever.serving.stopping import StoppingServer

    try:
        config = uvicorn.Config(app, lifespan="off", log_level="warning", **options)
        if options.get("access_log"):
            _log_requests_on_stderr()
        StoppingServer(config).run(sockets=sockets)
    except KeyboardInterrupt:
        pass


def _stop(served: object) -> None:
    """Stop the batchers, which wait for the batch the encoder is on; a Ctrl-C meanwhile exits at once, as asked: left
    to the interpreter, its exit with a worker inside torch aborted (exit code 134)."""
    try:
        served.stop()
    except KeyboardInterrupt:
        click.echo("stopped without waiting for the batch the encoder was on", err=True)
        sys.stderr.flush()
        os._exit(130)


@click.command("serve")
@click.argument("index", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--index", "named", multiple=True, metavar="NAME=PATH",
              help="Serve the index at PATH as NAME (repeatable; NAME is 1-64 letters or digits of any script, _ "
                   "or -). It is searched at /indexes/NAME/search (percent-encoded if not ASCII); the first index "
                   "given (INDEX, served under its folder name, else the first --index) also answers /search.")
@click.option("--host", default="127.0.0.1", show_default=True, callback=_host,
              help="Host name or address to listen on, alone (an IPv6 one with or without [brackets]; the port "
                   "goes in --port).")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="TCP port to listen on.")
@device_options()
@click.option("--max-batch", type=click.IntRange(min=1), default=32, show_default=True,
              help="Most queries encoded in one forward pass, a request's own included.")
@click.option("--max-wait-ms", type=FiniteRange(min=0, max=1000), default=2.0, show_default=True,
              help="Longest a query waits for others to share its forward pass while another pass runs "
                   "(one that finds the encoder idle goes at once).")
@click.option("--max-query-chars", type=click.IntRange(min=1), default=MAX_QUERY_CHARS, show_default=True,
              help="Longer queries are refused with a 400.")
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=MAX_BODY_BYTES, show_default=True,
              help="Larger POST bodies are refused with a 413.")
@click.option("--max-queries", type=click.IntRange(min=1), default=MAX_QUERIES, show_default=True,
              help="Most queries in one POST /search.")
@click.option("--max-waiting-queries", type=click.IntRange(min=1), default=MAX_WAITING_QUERIES, show_default=True,
              help=f"Most queries waiting for the encoder per index (at most {MAX_WAITING_REQUESTS:,} requests wait, "
                   "too); more get a 503 to retry. One request of more waits when none other does.")
@click.option("--max-queue-seconds", type=FiniteRange(min=0, min_open=True), default=MAX_QUEUE_SECONDS,
              show_default=True, help="Longest a request waits in its index's queue before its batch starts; one that "
                                      "waited longer gets a 503 to retry and is never encoded (its client may be gone).")
@click.option("--max-hits", type=click.IntRange(min=DEFAULT_K), default=None,
              help=f"Most hits (queries x k) one request may ask for; more is refused with a 400 before any work. "
                   f"At least {DEFAULT_K}, the k of a request that gives none. [default: --max-queries x {DEFAULT_K} "
                   f"({MAX_QUERIES * DEFAULT_K}), so the most queries a request may send fit without a k]")
@click.option("--max-response-bytes", type=click.IntRange(min=1), default=8 * 1024 * 1024, show_default=True,
              help="Largest JSON response; a request whose hits would be longer gets a 400 instead.")
@click.option("--request-timeout", type=FiniteRange(min=0, min_open=True), default=10.0, show_default=True,
              help="Seconds a client has to send a whole request (headers and body) after connecting or "
                   "starting it, and to read some of a response waiting for it; slower connections are closed.")
@click.option("--max-head-bytes", type=click.IntRange(min=1024), default=32 * 1024, show_default=True,
              help="Largest request line plus headers, and largest run of a chunked body's chunk extensions and "
                   "trailer fields; a larger one gets a 431 and the connection is closed.")
@click.option("--timeout-keep-alive", type=FiniteRange(min=0, min_open=True), default=5.0, show_default=True,
              help="Seconds an idle keep-alive connection stays open between requests.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="torch threads per worker for query encoding (FAISS uses one). [default: the CPU cores this "
                   "process may use, less one for the HTTP loop, shared among the workers; at least 1]")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Batches encoded side by side, each on its own thread with --threads torch threads. "
                   "[default: 2, or 1 on a single core]")
@click.option("--access-log/--no-access-log", default=False, show_default=True,
              help="Log every request, a line each on stderr (costs throughput).")
@click.option("--allow-origin", "origins", multiple=True, metavar="ORIGIN", callback=_origins,
              help="Let web pages from ORIGIN (scheme://host[:port], or * for any) call the API from a browser: "
                   "CORS headers on its responses, a 204 to its preflights (repeatable). [default: none, no CORS "
                   "headers]")
@mode_options(per_request=True)
@moved_model_option()
def serve_command(index, named, host, port, device, dtype, max_batch, max_wait_ms, max_query_chars, max_body_bytes,
                  max_queries, max_waiting_queries, max_queue_seconds, max_hits, max_response_bytes, request_timeout,
                  max_head_bytes, timeout_keep_alive, threads, workers, access_log, origins, mode, fusion_overrides,
                  model):
    """Serve INDEX (and/or each --index NAME=PATH) over HTTP: JSON search API, OpenAPI docs at /docs, search page at /.

    --mode and the fusion flags are the defaults; a request may ask for another mode (GET ?mode=,
    POST "mode"). Concurrent queries are micro-batched into one encoder pass. Bad requests get a JSON
    {"error": ...} with a 4xx status, and fail only themselves.

    \b
    Example:
      retriever serve indexes/scifact --port 8000
    """
    from retriever.serving import BatchSettings, Limits, configure_threads, create_app
    from retriever.serving.open_files import DescriptorWatch, low_limit_warning, raise_open_files_limit
    from retriever.serving.protocol import guarded_protocol
    from retriever.serving.threads import oversubscription_warning

    folders = parse_named_indexes(index, named)
    if model is not None and len(folders) > 1:
        raise click.UsageError("--model is the model of one moved index; serve that index alone, or move each "
                               "model back beside its index")
    open_files = raise_open_files_limit()
    warning = low_limit_warning(open_files)
    if warning:
        click.echo(warning, err=True)
    sockets = listening_sockets(host, port)
    try:
        used = configure_threads(threads, workers)
        warning = oversubscription_warning(used)
        if warning:
            click.echo(warning, err=True)
        searchers = load_searchers(folders, device=device, dtype=dtype, mode=mode,
                                   fusion_overrides=fusion_overrides, model=model)
        check_fusion_used(searchers, fusion_overrides)
        max_hits = max_queries * DEFAULT_K if max_hits is None else max_hits  # a raised --max-queries fits too
        app = create_app(searchers, Limits(max_query_chars, max_body_bytes, max_queries, max_hits, max_response_bytes),
                         BatchSettings(max_batch=max_batch, max_wait_ms=max_wait_ms, workers=used["workers"],
                                       max_pending_queries=max_waiting_queries, max_queue_seconds=max_queue_seconds),
                         origins=origins)
        shown = f"[{host}]" if ":" in host else host or "0.0.0.0"
        dtype_used = searchers[next(iter(searchers))].encoder.dtype
        announce = (f"serving {', '.join(searchers)} at http://{shown}:{sockets[0].getsockname()[1]}/ (API docs at "
                    f"/docs; {counted(used['workers'], 'worker')} x {counted(used['torch'], 'torch thread')}, encoding in "
                    f"{dtype_used})")
        run_app(app, sockets, announce, (host, port), access_log=access_log,
                http=guarded_protocol(request_timeout, max_head_bytes, DescriptorWatch(open_files), origins,
                                      max_body_bytes),
                timeout_keep_alive=timeout_keep_alive)
    except KeyboardInterrupt:  # while the indexes load (run_app takes its own): the CLI's line told to rerun to finish
        click.echo("error: interrupted (Ctrl-C) while the indexes loaded; nothing was served", err=True)
        sys.exit(130)
    finally:
        for sock in sockets:
            sock.close()


COMMANDS = [serve_command]
