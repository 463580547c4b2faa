"""The prompts a sentence-transformers folder prepends to queries and documents, as our query and passage prefixes,
and its module list: what is read of such a folder without torch (``model_names`` describes folders with it too).

Read from ``config_sentence_transformers.json``; sentence-transformers 5 and 6 read its prompts differently, so both
readings are returned and a folder where they differ is refused unless a flag says which one to use.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from retriever.errors import InputFileError, RetrieverError
from retriever.files import read_json

# The prompt names `encode_query` and `encode_document` look for, in their order.
ST_PROMPTS = {"query_prefix": ("query",), "passage_prefix": ("document", "passage", "corpus")}
ST_CONFIG = "config_sentence_transformers.json"
ST_HINT = "fix it, or to use the transformer alone pass a copy of the folder without modules.json"


def st_modules(folder: Path, hint: str = ST_HINT) -> tuple[list[dict] | None, list[str]]:
    """The folder's sentence-transformers module records and their short type names (None without modules.json);
    one that is not a list of records is refused (``hint``: what to do), never read as having no modules."""
    if not (folder / "modules.json").is_file():
        return None, []
    modules = read_json(folder / "modules.json", hint)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise InputFileError(folder / "modules.json", None, "not a list of module records", hint)
    return modules, [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]


def st_prefixes(folder: Path, config: dict) -> dict[str, tuple[str, str]]:
    """The prompts `encode_query` and `encode_document` prepend, as our query and passage prefixes, under
    sentence-transformers 5 and under 6: 6 always holds 'query' and 'document' prompts (empty unless saved), so
    it never reaches 5's 'passage'/'corpus' prompts, nor its fallback to the default prompt."""
    path = folder / ST_CONFIG  # ``config`` is its content
    if config.get("truncate_dim") is not None:  # sentence-transformers cuts every vector to it (Matryoshka)
        raise RetrieverError(f"{path}: truncate_dim {config['truncate_dim']}: sentence-transformers keeps only the "
                             "first dimensions of each vector, and retriever does not truncate; encode it with "
                             "sentence-transformers, or delete truncate_dim there to use the whole vectors")
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, (str, type(None))) for v in prompts.values()):
        raise InputFileError(path, None, "its prompts are not an object of strings", ST_HINT)
    name = config.get("default_prompt_name")
    default = (prompts.get(name) if isinstance(name, str) else None) or ""
    return {key: (next((prompts[name] or "" for name in names if name in prompts), default),  # a null one too
                  prompts.get(names[0]) or "") for key, names in ST_PROMPTS.items()}


def version_dependent_prompt(path: Path, key: str, as_5: str, as_6: str) -> RetrieverError:
    texts, flag = ("queries", "--query-prefix") if key == "query_prefix" else ("documents", "--passage-prefix")
    return RetrieverError(f"{path}: sentence-transformers 5 prepends {as_5!r} to {texts} and 6 prepends {as_6!r} "
                          f"(6 reads only its '{ST_PROMPTS[key][0]}' prompt, where 5 falls back to others or to "
                          f"default_prompt_name), so its vectors depend on the version; pass {flag} "
                          f"{shlex.quote(as_5)} to encode as 5 does, or {flag} {shlex.quote(as_6)} as 6 does")
