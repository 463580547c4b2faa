"""A client's mistakes as the one-line errors it gets: pydantic's error list worded (``validation_message``), and the
names a client sent cut short in them (``clipped``)."""
from __future__ import annotations

from retriever.serving.schemas import MAX_K
from retriever.texts import text_problem

MAX_PROBLEMS = 5  # a body's problems named in one error; 250 KB of [1, 1, ...] was a 5.6 MB message naming each


def validation_message(errors: list[dict]) -> str:
    """Pydantic's error list as one line: ``field: problem; ...``, the first ``MAX_PROBLEMS`` of them."""
    parts = []
    for error in errors[:MAX_PROBLEMS]:
        where = clipped(".".join(str(p) for p in error.get("loc", ()) if p not in ("query", "path", "body")))
        said = _worded(error, where)
        parts.append(f"{where}: {said}" if where else said)
    if len(errors) > MAX_PROBLEMS:
        parts.append(f"and {len(errors) - MAX_PROBLEMS} more problems like these")
    return "; ".join(parts) or "invalid request"


def _worded(error: dict, where: str) -> str:
    """pydantic's message, or ours where it is in no client's terms: a model class, a parse failure."""
    kind, given = error.get("type"), error.get("input")
    said = _long_k(str(given)) if kind == "int_parsing_size" and where == "k" else None
    if kind == "model_type" and not where:  # "Input should be a valid dictionary or instance of SearchBody"
        said = f'the body is a JSON {_json_kind(given)}, not an object: send one such as {{"queries": ["..."]}}'
    if kind == "extra_forbidden":
        said = error.get("msg", "not taken") + where_it_goes(where)
    if kind == "string_unicode" and (problem := text_problem(str(given))):  # pydantic said "unable to parse raw data"
        said = f"{'the value' if where else 'a key of the body'} has {problem}, which is not valid Unicode text"
    return str(said or error.get("msg", "invalid"))


def where_it_goes(name: str) -> str:
    """For a parameter or body key a search does not take, where what it names is set instead, or nothing: ``index``
    (the search page's own parameter) and the fusion settings were refused naming no way to set them."""
    flag = name.replace("_", "-")
    if name == "index":
        return " (an index is searched at /indexes/NAME/search)"
    if flag in ("fusion", "alpha", "rrf-k", "fusion-depth"):
        return f" ({clipped(name)} is set when the server starts: retriever serve --{flag})"
    return ""


def sent_path(scope: dict, clip: bool = True) -> str:
    """The request's path as the client sent it, percent-escapes kept, clipped unless ``clip`` is False: uvicorn
    decodes the path it routes on, so a 404 for ``/indexes/a%2Fb/search`` named ``/indexes/a/b/search``, a path the
    client never sent."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else scope["path"]
    return clipped(path) if clip else path


def clipped(name: str, width: int = 60) -> str:
    """A name the client sent, as an error names it: cut short, since a 200,000-character key made a 200 KB message."""
    return name if len(name) <= width else name[:width] + "..."


def _long_k(text: str) -> str | None:
    """For a GET k of over pydantic's 4,300 digits, the range message a k of fewer gets, where pydantic said "Unable
    to parse input string as an integer, exceeded maximum size" (leading zeros it skips)."""
    number = text.strip()
    if number.startswith("-"):
        return "Input should be greater than or equal to 1"
    return f"Input should be less than or equal to {MAX_K}" if number.lstrip("+").lstrip("0") else None


def _json_kind(value: object) -> str:
    kinds = ((type(None), "null"), (bool, "boolean"), (str, "string"), ((int, float), "number"), (list, "array"))
    return next((kind for types, kind in kinds if isinstance(value, types)), "value")
