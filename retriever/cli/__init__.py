"""The `retriever` command line: a thin layer over the library API.

A ``RetrieverError`` is printed as one line on stderr with exit code 1; anything else is a
bug and keeps its traceback.
"""
from __future__ import annotations

import sys

import click

from retriever.errors import RetrieverError


# `retriever --help` lists commands in the order they are used; commands not named here come last.
PIPELINE_ORDER = ("demo", "build", "encode", "index", "info", "search", "evaluate", "serve", "pretrain", "train",
                  "mine")


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        rank = {name: position for position, name in enumerate(PIPELINE_ORDER)}
        return sorted(self.commands, key=lambda name: (rank.get(name, len(rank)), name))

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except RetrieverError as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="retriever")
def main() -> None:
    """Dense retrieval from a raw corpus to an evaluated, served index.

    Typical flow: `retriever build CORPUS --output indexes/NAME`, then
    `retriever search indexes/NAME "a query"` and `retriever evaluate`.
    """


def _register() -> None:
    from retriever.cli import demo, hybrid, indexing, info, pretrain, searching, serving, training

    for module in (indexing, hybrid, searching, info, pretrain, training, serving, demo):
        for command in module.COMMANDS:
            main.add_command(command)


_register()
