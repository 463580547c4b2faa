"""The names `retriever serve` gives its indexes: a NAME=PATH's own, or the positional INDEX's made from its folder's
name; each is searched at /indexes/NAME/search."""
from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

import click


def name_from_folder(folder: Path) -> str:
    """The positional INDEX is served under its folder name, made URL-safe: an accented Latin letter loses its accents
    (NFKD, so `índice` is `indice`, not `ndice`), a name a client writes in a URL as it is; letters of other scripts
    are kept in their usual (NFKC) form (`индекс`, `索引`, percent-encoded in a URL: they were all dropped, leaving
    `default`); anything but letters, digits, `_` and `-` becomes `-`. A link is named as typed, not by its target
    (`serve mylink` was served as the `abc123` it led to); `.` and `..` are made absolute first."""
    from retriever.serving.served import MAX_NAME_CHARS, name_character

    kept, latin = [], False
    for char in unicodedata.normalize("NFKD", Path(os.path.abspath(folder)).name):
        if not unicodedata.combining(char):
            kept.append(char)
            latin = char.isascii()
        elif not latin:  # a mark of another script's letter (й's breve, a Devanagari virama) is part of it
            kept.append(char)
    name = "".join(char if name_character(char) else "\0" for char in unicodedata.normalize("NFC", "".join(kept)))
    return re.sub("\0+", "-", name).strip("-")[:MAX_NAME_CHARS] or "default"


def parse_named_indexes(positional: Path | None, named: tuple[str, ...]) -> dict[str, Path]:
    """NAME=PATH pairs (and the positional INDEX) in the order given; the first is the default."""
    from retriever.serving.schemas import NAME_RULE
    from retriever.serving.served import served_name, valid_index_name

    indexes: dict[str, Path] = {}
    if positional is not None:
        indexes[name_from_folder(positional)] = positional
    for pair in named:
        name, sep, path = pair.partition("=")
        name = served_name(name)  # as the folder names are, and as a client most likely sends it
        if not sep or not path:
            raise click.BadParameter(f"{pair!r} is not NAME=PATH", param_hint="--index")
        if not valid_index_name(name):
            raise click.BadParameter(f"invalid name {name!r}: use {NAME_RULE}", param_hint="--index")
        if name in indexes:
            taken = (f": INDEX {positional} is served as {name!r}, its folder's name made URL-safe; give it "
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
