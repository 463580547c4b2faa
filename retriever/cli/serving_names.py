"""The names `retriever serve` gives its indexes: a NAME=PATH's own, or the positional INDEX's made from its folder's
name; each is searched at /indexes/NAME/search."""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import click


def name_from_folder(folder: Path) -> str:
    """The positional INDEX is served under its folder name, made URL-safe: accented letters lose their accents
    (NFKD, so `índice` is `indice`, not `ndice`), keeping the name an ASCII one every client writes in a URL as is."""
    letters = unicodedata.normalize("NFKD", folder.resolve().name)
    letters = "".join(char for char in letters if not unicodedata.combining(char))
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", letters).strip("-")[:64]
    return name or "default"


def parse_named_indexes(positional: Path | None, named: tuple[str, ...]) -> dict[str, Path]:
    """NAME=PATH pairs (and the positional INDEX) in the order given; the first is the default."""
    from retriever.serving.served import valid_index_name

    indexes: dict[str, Path] = {}
    if positional is not None:
        indexes[name_from_folder(positional)] = positional
    for pair in named:
        name, sep, path = pair.partition("=")
        if not sep or not path:
            raise click.BadParameter(f"{pair!r} is not NAME=PATH", param_hint="--index")
        if not valid_index_name(name):
            raise click.BadParameter(f"invalid name {name!r}: use 1-64 letters, digits, '_' or '-'",
                                     param_hint="--index")
        if name in indexes:
            taken = (f": INDEX {positional.name} is served as {name!r}, its folder's name made URL-safe; give it "
                     f"another name with --index NAME=PATH" if positional is not None and name == next(iter(indexes))
                     else "")
            raise click.BadParameter(f"the name {name!r} is used twice{taken}", param_hint="--index")
        folder = Path(path)
        if not folder.is_dir():
            raise click.BadParameter(f"{path!r} is not an index folder", param_hint="--index")
        indexes[name] = folder
    if not indexes:
        raise click.UsageError("give an INDEX folder or at least one --index NAME=PATH")
    return indexes
