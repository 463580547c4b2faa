"""Untied towers as sentence-transformers saves them: a ``Router`` whose 'query' and 'document' routes each run a
Transformer (then Pooling, maybe BERT's pooler as a Dense), read from ``router_config.json``.

`retriever train` writes the passage tower at the folder's root and the query tower in ``query/``; sentence-transformers
re-saves such a folder (or saves its own Router) with both towers in subfolders and no config.json at the root, which
was refused. ``encode_query`` takes the 'query' route and ``encode_document`` the 'document' one; a Router that routes
otherwise (``route_mappings``) or whose towers pool otherwise is refused, since retriever applies one pooling to both.
This module reads JSON only (``model_names`` uses it before torch is imported).
"""
from __future__ import annotations

from pathlib import Path

from retriever.errors import InputFileError, RetrieverError
from retriever.files import read_json_object

ROUTER_CONFIG = "router_config.json"
ROUTES = ("query", "document")  # the routes encode_query and encode_document take, in our (query, passage) order
ROUTER_HINT = "fix it, or encode the model with sentence-transformers"


def router_routes(folder: Path) -> dict[str, list[tuple[str, str]]] | None:
    """Each route's modules as (folder, short type name); None without a router_config.json."""
    path = folder / ROUTER_CONFIG
    if not path.is_file():
        return None
    config = read_json_object(path, ROUTER_HINT)
    structure, types, parameters = (config.get(key) for key in ("structure", "types", "parameters"))
    if not all(isinstance(value, dict) for value in (structure, types, parameters or {})):
        raise InputFileError(path, None, "its structure, types or parameters are not JSON objects", ROUTER_HINT)
    if (parameters or {}).get("route_mappings"):
        raise RetrieverError(f"{path}: its route_mappings send tasks to routes by rules of their own, which retriever "
                             "does not follow; encode the model with sentence-transformers")
    routes = {}
    for route in ROUTES:
        modules = structure.get(route)
        if modules is None:
            raise RetrieverError(f"{path}: no '{route}' route (it has {', '.join(map(repr, structure)) or 'none'}), "
                                 "so retriever cannot tell which tower encodes queries and which passages; encode "
                                 "the model with sentence-transformers")
        if not isinstance(modules, list) or not modules or not all(isinstance(m, str) and m for m in modules):
            raise InputFileError(path, None, f"its '{route}' route is not a list of module folders", ROUTER_HINT)
        untyped = next((module for module in modules if not isinstance(types.get(module), str)), None)
        if untyped is not None:
            raise InputFileError(path, None, f"its types name no module type for {untyped!r}", ROUTER_HINT)
        routes[route] = [(module, types[module]) for module in modules]
    return routes


def router_towers(folder: str | Path) -> tuple[Path, Path] | None:
    """The (query, passage) transformer folders a Router's routes start with; None for a folder without a Router."""
    folder = Path(folder)
    routes = router_routes(folder)
    if routes is None:
        return None
    return folder / routes["query"][0][0], folder / routes["document"][0][0]


def transformer_folder(folder: str | Path) -> Path:
    """Where the (passage) transformer of a model folder is: the folder itself, or for a Router saved by
    sentence-transformers (no config.json at the root) its document tower."""
    folder = Path(folder)
    towers = None if (folder / "config.json").is_file() else router_towers(folder)
    return folder if towers is None else towers[1]


def refuse_router(folder: str | Path, why: str) -> None:
    """Refuse a Router's folder (its towers in subfolders, no transformer at its root) where one transformer is
    wanted: loading its root failed calling the folder damaged or incomplete. ``why`` says what wants one and what
    to pass instead; ``{document}`` in it becomes the document tower's folder."""
    folder = Path(folder)
    towers = None if (folder / "config.json").is_file() else router_towers(folder)
    if towers is not None:
        query, document = (tower.relative_to(folder).as_posix() for tower in towers)
        raise RetrieverError(f"{folder}: a sentence-transformers Router of untied query and document towers ({query}/ "
                             f"and {document}/), and {why.format(document=towers[1])}")


def check_local_router(name: str, files: Path | None) -> None:
    """Refuse untied towers named by a hub id (``files``: its snapshot of JSON files): the towers are subfolders,
    which retriever loads only from a local folder; loading failed saying the hub could not be reached."""
    if not Path(name).is_dir() and files is not None and (files / ROUTER_CONFIG).is_file():
        raise RetrieverError(f"{name}: untied towers (a sentence-transformers Router) on the Hugging Face hub, which "
                             f"retriever reads only from a local folder: download it (hf download {name} --local-dir "
                             "DIR) and pass --model DIR")


def router_settings(folder: Path) -> tuple[dict, bool]:
    """The settings a Router's routes apply (untied towers, their pooling and max lengths) and whether its pooling
    includes the prompt; a route of other modules than retriever applies, or towers pooled otherwise, are refused."""
    from retriever.max_lengths import default_max_length
    from retriever.model_folder import ST_HINT, ST_PACKAGE, st_pooling, unapplied_modules
    from retriever.pooler_dense import pooler_dense_problem
    from retriever.st_transformer import check_transformer_config

    routes = router_routes(folder)
    assert routes is not None
    poolings = {}
    for route, modules in routes.items():
        kinds = [kind.rsplit(".", 1)[-1] for _, kind in modules]
        foreign = next((kind for _, kind in modules if not kind.startswith(ST_PACKAGE)), None)
        if foreign is not None or kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Dense"]):
            why = f"its {route} route runs {foreign or ' → '.join(kinds)}"
            raise unapplied_modules(folder, ["Router"], why)
        tower = folder / modules[0][0]
        check_transformer_config(tower)
        pooling, include_prompt = st_pooling(folder / modules[1][0])
        if len(kinds) == 3:
            problem = pooler_dense_problem(tower, folder / modules[2][0], pooling, ST_HINT)
            if problem:
                raise unapplied_modules(folder, ["Router"], f"the Dense of its {route} route is not BERT's pooler, "
                                                            f"as retriever writes one: {problem}")
            pooling = "pooler"
        poolings[route] = (pooling, include_prompt)
    if poolings["query"] != poolings["document"]:
        named = "; ".join(f"{route} {mode}" + ("" if include else " leaving the prompt out")
                          for route, (mode, include) in poolings.items())
        raise RetrieverError(f"{folder / ROUTER_CONFIG}: its towers pool otherwise ({named}), and retriever applies "
                             "one pooling to both; encode the model with sentence-transformers")
    query, passage = router_towers(folder) or (folder, folder)
    return ({"towers": "untied", "pooling": poolings["query"][0], "query_max_length": default_max_length(str(query)),
             "passage_max_length": default_max_length(str(passage))}, poolings["query"][1])
