"""Model folders that retriever, sentence-transformers and plain transformers all open the same way.

A `retriever train` folder is a Hugging Face model folder (``AutoModel`` loads it) and a
sentence-transformers folder (``modules.json``: Transformer → Pooling [→ Dense] [→ Normalize]),
with ``retriever.json`` for retriever and a ``README.md`` model card. Untied towers keep the
passage tower at the root and the query tower in ``query/`` (each a complete HF folder); a
sentence-transformers ``Router`` (sentence-transformers ≥ 5) sends ``encode_query`` to
``query/`` and ``encode_document`` to the root. ``pooler`` pooling is written as CLS pooling
then a tanh ``Dense`` layer holding the pooler's weights, which is exactly BERT's pooler (``pooler_dense``).
The files are written by hand (``model_folder_writing``; the formats are small and stable), so sentence-transformers
is not needed to train.
"""
from __future__ import annotations

import sys
from pathlib import Path

from retriever.errors import InputFileError, RetrieverError
from retriever.files import read_json_object
from retriever.model_loading import json_value
from retriever.pooler_dense import pooler_dense_problem
from retriever.st_prompts import ST_CONFIG, ST_HINT, ST_PROMPTS, st_modules, st_prefixes, version_dependent_prompt
from retriever.st_router import router_settings, router_towers
from retriever.st_transformer import check_transformer_config, transformer_config_file

QUERY_TOWER = "query"
LEGACY_PASSAGE_TOWER = "passage"  # folders written before the passage tower moved to the root
ST_PACKAGE = "sentence_transformers."
# sentence-transformers' legacy pooling keys, in its order, and the poolings of ours that equal its modes.
ST_LEGACY_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                     "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
ST_POOLINGS = {"cls": "cls", "mean": "mean"}


def untied_tower_paths(root: str | Path) -> tuple[Path, Path]:
    """(query, passage) folders of an untied model folder (``st_router`` reads a Router's)."""
    root = Path(root)
    if (root / LEGACY_PASSAGE_TOWER / "config.json").is_file():
        return root / QUERY_TOWER, root / LEGACY_PASSAGE_TOWER
    return router_towers(root) or (root / QUERY_TOWER, root)  # as sentence-transformers routes them


def sentence_transformers_settings(folder: str | Path, given: dict | None = None, training: bool = False) -> dict:
    """Pooling, normalisation and prefixes a sentence-transformers folder applies ({} when it has no modules.json).

    A folder made by sentence-transformers records them in its modules, not in retriever.json; encoding it with
    retriever's defaults (mean, normalised, no prefix) gave other vectors than ``SentenceTransformer(folder)``
    with exit 0. Modules retriever does not apply (Dense, max or last-token pooling, ...) are refused, not skipped,
    and so is a prefix sentence-transformers' versions read otherwise, unless ``given`` (the flags' settings) has it.
    """
    folder, given = Path(folder), given or {}
    config = read_json_object(folder / ST_CONFIG, ST_HINT, missing={})  # read here only: passed on
    if is_cross_encoder(folder, config):  # training may start from its encoder: its head is dropped
        if training:
            print(f"note: {folder} is a sentence-transformers CrossEncoder (a reranker): its classification head is "
                  "dropped, and the bi-encoder starts from the reranker's encoder weights", file=sys.stderr)
            return {}
        raise RetrieverError(f"{folder} is a sentence-transformers CrossEncoder: a reranker (cross-encoder) that "
                             "scores query-passage pairs, not an embedding model, so it cannot encode passages for "
                             "an index; use an embedding model (e.g. minilm)")
    modules, kinds = st_modules(folder)
    if modules is None:
        return {}
    foreign = next((i for i, m in enumerate(modules)
                    if isinstance(m.get("type"), str) and not m["type"].startswith(ST_PACKAGE)), None)
    if foreign is not None:  # its class name alone ("custom_st.Transformer") would pass for sentence-transformers'
        raise RetrieverError(f"{folder}: its sentence-transformers module {foreign} is {modules[foreign].get('type')}, "
                             "code of the model's own, which sentence-transformers runs only with trust_remote_code "
                             "and retriever never runs; encode it with sentence-transformers")
    if config.get("model_type") == "SparseEncoder" \
            or {"SpladePooling", "MLMTransformer"} & set(kinds):
        raise RetrieverError(f"{folder} is a sentence-transformers SparseEncoder (SPLADE-style): its vectors are "
                             "vocabulary-sized term weights, which this dense engine does not index; use a dense "
                             "embedding model (e.g. minilm), or the BM25 part for term matching")
    if config.get("model_type") == "MultiVectorEncoder" or "MultiVectorMask" in kinds:
        raise RetrieverError(f"{folder} is a sentence-transformers MultiVectorEncoder (ColBERT-style): one vector per "
                             "token, which this engine (one vector per passage) does not index; use a dense embedding "
                             "model (e.g. minilm)")
    if kinds in (["Router"], ["Router", "Normalize"]):  # untied towers (``st_router``)
        settings, include_prompt = router_settings(folder)
    else:
        settings, include_prompt = _pipeline_settings(folder, modules, kinds)
    settings["normalize"] = st_normalizes(folder, modules, kinds)
    if not training:  # a trained model ranks by its own record's inner product
        check_similarity(folder / ST_CONFIG, config, settings["normalize"])
    for key, (as_5, as_6) in st_prefixes(folder, config).items():
        if as_5 != as_6 and key not in given:
            raise version_dependent_prompt(folder / ST_CONFIG, key, as_5, as_6)
        settings[key] = as_6
    if not include_prompt and any({**settings, **given}[key] for key in ST_PROMPTS):  # a flag's prefix too
        raise RetrieverError(f"{folder}: its pooling leaves its prompts out (include_prompt false), and retriever "
                             "pools every token of the text; encode it with sentence-transformers, or pass "
                             "--query-prefix '' --passage-prefix '' to encode without prompts")
    return settings


def st_normalizes(folder: Path, modules: list[dict], kinds: list[str]) -> bool:
    """Whether the folder's modules end in a Normalize of the sentence embedding; one that reads or writes another
    feature (``module_input_name``/``module_output_name``) leaves the vectors as they are, and is refused: retriever
    normalised them, giving other vectors than sentence-transformers with exit 0."""
    if kinds[-1:] != ["Normalize"]:
        return False
    path = folder / str(modules[-1].get("path") or "").strip("/") / "config.json"
    config = read_json_object(path, ST_HINT, missing={}) if str(modules[-1].get("path") or "").strip("./") else {}
    source = config.get("module_input_name", "sentence_embedding")
    target = config.get("module_output_name") or source
    if (source, target) != ("sentence_embedding", "sentence_embedding"):
        raise RetrieverError(f"{path}: its Normalize normalises {source} into {target}, not the sentence embedding, "
                             "so sentence-transformers' vectors stay unnormalised where retriever would normalise "
                             "them; encode it with sentence-transformers, or delete module_input_name and "
                             "module_output_name there")
    return True


def check_similarity(path: Path, config: dict, normalized: bool) -> None:
    """Refuse a ``similarity_fn_name`` (in ``config``, read from ``path``) that ranks otherwise than the inner product
    retriever searches by: it ranked such a model's passages otherwise than sentence-transformers' similarity, with
    exit 0."""
    if distance := _distance_similarity(config, normalized):
        raise RetrieverError(f"{path}: similarity_fn_name {distance}: sentence-transformers ranks this model's vectors "
                             "by it, and retriever ranks by inner product, so its results would differ; encode and "
                             "search it with sentence-transformers")


def _distance_similarity(config: dict, normalized: bool) -> str | None:
    """``config``'s ``similarity_fn_name``, said for an error, when inner product ranks otherwise (else None): euclidean
    distance between unit vectors ranks as their inner product does; manhattan never does."""
    name = config.get("similarity_fn_name")
    if name == "manhattan" or name == "euclidean" and not normalized:
        return f"{name!r} ({name} distance{'' if normalized else ', between vectors not normalised'})"
    return None


def _pipeline_settings(folder: Path, modules: list[dict], kinds: list[str]) -> tuple[dict, bool]:
    """The pooling of a Transformer → Pooling [→ Dense] [→ Normalize] folder, and its ``include_prompt``; other
    modules, a Dense that is not BERT's pooler, or Transformer options retriever does not apply are refused."""
    check_transformer_config(folder)
    dense = kinds[2:3] == ["Dense"]  # BERT's pooler, as retriever writes `pooler` pooling, or refused below
    if [kind for i, kind in enumerate(kinds) if not (dense and i == 2)] not in (
            ["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) \
            or str(modules[0].get("path", "")) not in ("", "."):
        raise unapplied_modules(folder, kinds)
    for module, kind in zip(modules[1:2 + dense], kinds[1:2 + dense]):  # "" would read the transformer's config
        if not str(module.get("path") or "").strip("./"):
            raise InputFileError(folder / "modules.json", None, f"its {kind} module names no folder", ST_HINT)
    pooling, include_prompt = st_pooling(folder / str(modules[1]["path"]))
    if dense:
        problem = pooler_dense_problem(folder, folder / str(modules[2]["path"]), pooling, ST_HINT)
        if problem:
            raise unapplied_modules(folder, kinds, f"its Dense is not BERT's pooler, as retriever writes one: {problem}")
        pooling = "pooler"
    return {"pooling": pooling}, include_prompt


def is_cross_encoder(folder: Path, config: dict) -> bool:
    """Whether sentence-transformers saved the folder as a CrossEncoder: ≥ 5 says so in its own config (``config``,
    its config_sentence_transformers.json), < 5 wrote no modules.json but an activation into config.json (a
    sequence-classification model a plain BERT loads)."""
    if config.get("model_type") == "CrossEncoder":
        return True
    legacy = json_value(folder / "config.json", "sentence_transformers")
    return json_value(folder / "config.json", "sbert_ce_default_activation_function") is not None \
        or isinstance(legacy, dict) and "activation_fn" in legacy


def refuse_recorded_model(folder: Path | None, made: str) -> None:
    """Refuse the model folder of a record (``made`` with it: an index built, shards encoded) that is a CrossEncoder,
    or that ranks by a distance inner product does not follow: made before such folders were refused at encode, its
    vectors came from a reranker's encoder (and so would its queries'), or its results differ from the model's."""
    if folder is None:
        return
    config = read_json_object(folder / ST_CONFIG, ST_HINT, missing={})
    if is_cross_encoder(folder, config):
        raise RetrieverError(f"{folder} is a sentence-transformers CrossEncoder and {made} with it: the index's "
                             "vectors came from a reranker (which scores query-passage pairs), not an embedding model, "
                             "and its queries would be encoded by it too; rebuild the index with a bi-encoder (e.g. "
                             "--model minilm)")
    kinds = st_modules(folder)[1]
    if kinds and (distance := _distance_similarity(config, kinds[-1:] == ["Normalize"])):
        raise RetrieverError(f"{folder / ST_CONFIG}: similarity_fn_name {distance}, and {made} with this model: the "
                             "index's inner-product search does not rank as that distance does; rebuild the index "
                             "with a cosine or dot model (e.g. --model minilm)")


def unapplied_modules(folder: Path, kinds: list[str], why: str = "") -> RetrieverError:
    return RetrieverError(f"{folder}: its sentence-transformers modules are {' → '.join(kinds) or 'none'}; "
                          "retriever applies a Transformer at the folder's root, then cls or mean Pooling (or BERT's "
                          "pooler), then an optional Normalize, so its vectors would differ from sentence-transformers'"
                          f"{f' ({why})' if why else ''}; encode it with sentence-transformers")


def st_pooling(folder: Path) -> tuple[str, bool]:
    """Our pooling for a sentence-transformers Pooling config (either format), and its ``include_prompt``."""
    config = read_json_object(folder / "config.json", ST_HINT)
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for key, mode in ST_LEGACY_POOLING.items() if config.get(key)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else modes
    if not isinstance(modes, list) or len(modes) != 1 or modes[0] not in ST_POOLINGS:
        named = " + ".join(map(str, modes)) if isinstance(modes, list) else repr(modes)
        raise RetrieverError(f"{folder / 'config.json'}: pooling {named} is not one retriever has (cls or mean); "
                             "its vectors would differ from sentence-transformers', so encode it with "
                             "sentence-transformers")
    return ST_POOLINGS[modes[0]], config.get("include_prompt", True) is not False


def st_disagreements(folder: str | Path, recorded: dict) -> dict[str, tuple[object, object]]:
    """Settings ``recorded`` (retriever.json) holds otherwise than the folder's sentence-transformers files apply,
    as {name: (ours, theirs)}: retriever wrote both alike, so a difference is a later edit (a folder re-saved by
    sentence-transformers with another prompt), and either reading gives other vectors than the other."""
    folder = Path(folder)
    modules, kinds = st_modules(folder)
    if modules is None:
        return {}
    theirs: dict[str, object] = {key: as_5 if recorded.get(key) == as_6 else as_6  # either version's reading
                                 for key, (as_5, as_6) in st_prefixes(folder, read_json_object(
                                     folder / ST_CONFIG, ST_HINT, missing={})).items()}
    if kinds[:1] in (["Transformer"], ["Router"]):  # a shared tower's pipeline, or untied towers (``st_router``)
        settings, include_prompt = router_settings(folder) if kinds[0] == "Router" else \
            _pipeline_settings(folder, modules, kinds)
        theirs.update({**settings, "normalize": st_normalizes(folder, modules, kinds)})
        if not include_prompt and any(recorded.get(key) for key in ST_PROMPTS):
            raise RetrieverError(f"{folder}: its pooling leaves its prompts out (include_prompt false), edited since "
                                 "retriever.json was written; retriever pools them too, so use sentence-transformers")
    length = read_json_object(transformer_config_file(folder), ST_HINT, missing={}).get("max_seq_length")
    if kinds[:1] == ["Transformer"] and type(length) is int:  # a shared tower's one length: what cuts passages
        theirs["passage_max_length"] = length
    return {name: (recorded[name], value) for name, value in theirs.items()
            if recorded.get(name) is not None and recorded[name] != value}
