"""Writing a model folder that retriever, sentence-transformers and plain transformers all open (the layout
``model_folder`` describes and reads): weights and tokenizer per tower, ``retriever.json``, the
sentence-transformers module files written by hand, and the model card."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from torch import nn

from retriever.files import atomic_write_text, write_json
from retriever.model_card import model_card
from retriever.model_folder import QUERY_TOWER, ST_PACKAGE
from retriever.model_loading import RETRIEVER_CONFIG
from retriever.pooler_dense import write_pooler_dense
from retriever.st_prompts import ST_CONFIG

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ST_MODULE = ST_PACKAGE + "models."
POOLING_DIR, DENSE_DIR, NORMALIZE_DIR = "1_Pooling", "2_Dense", "3_Normalize"


def write_model_folder(folder: Path, query_model: nn.Module, passage_model: nn.Module | None,
                       tokenizer: PreTrainedTokenizerBase, config: dict) -> None:
    """Weights, tokenizer, retriever.json, sentence-transformers files and model card into ``folder``."""
    config = portable_record(config)
    towers = {"": query_model} if passage_model is None else {"": passage_model, QUERY_TOWER: query_model}
    for subfolder, model in towers.items():
        model.save_pretrained(folder / subfolder)
        tokenizer.save_pretrained(folder / subfolder)
    write_json(folder / RETRIEVER_CONFIG, config)
    write_sentence_transformers_files(folder, config, towers)
    atomic_write_text(folder / "README.md", model_card(config))


def portable_record(value: object) -> object:
    """``value`` with every absolute path replaced by its last component: such paths mean nothing elsewhere."""
    if isinstance(value, dict):
        return {key: portable_record(item) for key, item in value.items() if key != "init_model_path"}
    if isinstance(value, list):
        return [portable_record(item) for item in value]
    if isinstance(value, str) and os.path.isabs(value):
        return Path(value).name
    return value


def write_sentence_transformers_files(folder: Path, config: dict, towers: dict[str, nn.Module]) -> None:
    dim = int(next(iter(towers.values())).config.hidden_size)
    max_lengths = {"": config["passage_max_length"], QUERY_TOWER: config["query_max_length"]}
    for subfolder in towers:
        # One max_seq_length per Transformer module: a shared tower gets the passage length (see the card).
        write_json(folder / subfolder / "sentence_bert_config.json",
                    {"max_seq_length": max_lengths[subfolder], "do_lower_case": False})
    write_json(folder / POOLING_DIR / "config.json", {
        "word_embedding_dimension": dim, "pooling_mode_cls_token": config["pooling"] in ("cls", "pooler"),
        "pooling_mode_mean_tokens": config["pooling"] == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False})
    routes = {}
    for subfolder, model in towers.items():
        route = [subfolder or ".", POOLING_DIR]
        if config["pooling"] == "pooler":
            dense = f"{subfolder}_{DENSE_DIR}" if subfolder else DENSE_DIR
            write_pooler_dense(folder / dense, model)
            route.append(dense)
        routes["query" if subfolder == QUERY_TOWER else "document"] = route
    modules = ([{"path": ".", "type": "Router"}] if len(towers) > 1 else
               [{"path": p, "type": _module_type(p)} for p in routes["document"]])
    if config["normalize"]:
        modules.append({"path": NORMALIZE_DIR, "type": "Normalize"})
        (folder / NORMALIZE_DIR).mkdir(exist_ok=True)
    write_json(folder / "modules.json", [
        {"idx": i, "name": str(i), "path": "" if m["path"] == "." else m["path"], "type": ST_MODULE + m["type"]}
        for i, m in enumerate(modules)])
    if len(towers) > 1:
        write_json(folder / "router_config.json", {
            "types": {p: ST_MODULE + _module_type(p) for route in routes.values() for p in route},
            "structure": routes, "parameters": {"default_route": "document", "allow_empty_key": True}})
    prompts = {name: config[key] for name, key in (("query", "query_prefix"), ("document", "passage_prefix"))
               if config.get(key)}
    write_json(folder / ST_CONFIG, {
        "prompts": prompts, "default_prompt_name": None,
        "similarity_fn_name": "cosine" if config["normalize"] else "dot"})


def _module_type(path: str) -> str:
    if path == POOLING_DIR:
        return "Pooling"
    return "Dense" if path.endswith(DENSE_DIR) else "Transformer"
