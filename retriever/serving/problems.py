"""A client's mistakes as the one-line errors it gets: pydantic's error list worded (``validation_message``), and the
names a client sent cut short in them (``clipped``)."""
from __future__ import annotations

from retriever.serving.schemas import MAX_K, NAME_RULE

MAX_PROBLEMS = 5  # a body's problems named in one error; 250 KB of [1, 1, ...] was a 5.6 MB message naming each


def validation_message(errors: list[dict]) -> str:
    """Pydantic's error list as one line: ``field: problem; ...``, the first ``MAX_PROBLEMS`` of them."""
    parts = []
    for error in errors[:MAX_PROBLEMS]:
        where = clipped(".".join(str(p) for p in error.get("loc", ()) if p not in ("query", "path", "body")))
        said = _long_k(str(error.get("input"))) if error.get("type") == "int_parsing_size" and where == "k" else None
        if error.get("type") == "string_pattern_mismatch" and where == "name":  # the pattern is in no client's terms
            said = f"{clipped(str(error.get('input')))!r} is no index name: names are {NAME_RULE} (GET /indexes lists " \
                   "them)"
        said = said or error.get("msg", "invalid")
        parts.append(f"{where}: {said}" if where else str(said))
    if len(errors) > MAX_PROBLEMS:
        parts.append(f"and {len(errors) - MAX_PROBLEMS} more problems like these")
    return "; ".join(parts) or "invalid request"


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
