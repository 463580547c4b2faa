"""Text flags and arguments (a QUERY, --tag, --query-prefix, --index-type, ...) must be Unicode text, checked as the
command line is parsed: bytes that are not UTF-8 in the command line (`retriever search IDX $'\\xff'`) reach Python
as lone surrogates (PEP 383), which a QUERY was refused for with exit 1 as if a file were bad, and which failed
other flags deep in the tokenizer or FAISS with a traceback. Flags that hold paths or name files (``PATH_PARAMS``)
may hold any bytes the file system does.
"""
from __future__ import annotations

import click

from retriever.texts import text_problem

# Parameters of click's plain text type that hold a path, or part of one (--split names qrels/SPLIT.tsv).
PATH_PARAMS = frozenset({"model", "split", "dev_split", "named"})
_ESCAPED_BYTES = range(0xDC80, 0xDD00)  # how Python's surrogateescape holds the bytes 0x80-0xFF


def argument_problem(value: str) -> str | None:
    """Why ``value`` from the command line is not text, with what to do, or None."""
    problem = text_problem(value)
    if problem is None:
        return None
    position, character = next((n, c) for n, c in enumerate(value, 1) if 0xD800 <= ord(c) <= 0xDFFF)
    if ord(character) in _ESCAPED_BYTES:
        return (f"holds the byte 0x{ord(character) - 0xDC00:02X} at character {position}, which is not UTF-8; give "
                "it as UTF-8 text (convert it with `iconv -t UTF-8`, or set a UTF-8 locale)")
    return f"holds {problem}, which is not valid Unicode text; remove it or replace it with U+FFFD"


class Utf8Text(click.types.StringParamType):
    """click's text type that refuses what is not Unicode text as a usage error naming the flag or argument."""

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        problem = argument_problem(value) if isinstance(value, str) else None
        if problem is not None:
            self.fail(problem, param, ctx)
        return value


def check_text_params(command: click.Command) -> None:
    """Give every plain-text parameter of ``command`` but a path the ``Utf8Text`` type."""
    for param in command.params:
        if type(param.type) is click.types.StringParamType and param.name not in PATH_PARAMS:
            param.type = Utf8Text()
