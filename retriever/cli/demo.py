"""`retriever demo`."""
from __future__ import annotations

import time
from pathlib import Path

import click

from retriever.cli.options import device_options
from retriever.cli.outputs import mark_resumable
from retriever.cli.output_params import OutputFolder
from retriever.cli.searching import print_hits


@click.command("demo")
@click.option("--output", "-o", type=OutputFolder(), default=Path("indexes/demo"), show_default=True,
              help="Where to build the demo index (an earlier demo index there is replaced; another index or a "
                   "folder of yours is refused).")
@click.option("--model", default="minilm", show_default=True, help="Encoder: a model folder, hub id or 'minilm'.")
@device_options()
def demo_command(output, model, device, dtype):
    """Build an index of the shipped demo collection, search it and print recall.

    \b
    Example:
      retriever demo --output indexes/demo
    """
    from retriever.demo import run_demo

    mark_resumable()  # the demo index's shards are kept
    started = time.perf_counter()
    result = run_demo(output, model=model, device=device, dtype=dtype)
    for query, hits in result.examples:
        click.echo(f"\nquery: {query}")
        print_hits(hits)
    click.echo(f"\nall {result.report.evaluation.num_queries} demo queries, index {result.index}:")
    click.echo(result.report.table())
    click.echo(f"\ndemo finished in {time.perf_counter() - started:.1f}s")


COMMANDS = [demo_command]
