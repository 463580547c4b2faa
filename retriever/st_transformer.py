"""The config of a sentence-transformers ``Transformer`` module: the file it is in, and options retriever refuses.

sentence-transformers reads the first of several file names (``sentence_bert_config.json``, then the names older
versions wrote per architecture); retriever read only the first, so a ``sentence_roberta_config.json``'s
``max_seq_length`` was never seen. Besides the max length and lowercasing, the file may hold keyword arguments for
loading the model, config or tokenizer, or tokenizing (``processor_kwargs``: another max length, casing), another
tokenizer (``tokenizer_name_or_path``), or another output than the token states (``transformer_task``,
``modality_config``): each changes the vectors
sentence-transformers gives, and retriever applies none, so a folder holding one is refused, naming it.
This module reads JSON only.
"""
from __future__ import annotations

from pathlib import Path

from retriever.errors import RetrieverError
from retriever.files import read_json_object

CONFIG_NAMES = ("sentence_bert_config.json", "sentence_roberta_config.json", "sentence_distilbert_config.json",
                "sentence_camembert_config.json", "sentence_albert_config.json", "sentence_xlm-roberta_config.json",
                "sentence_xlnet_config.json")
# The values that mean "the token states of the model's forward", as sentence-transformers writes them.
TOKEN_STATES = {"transformer_task": "feature-extraction", "module_output_name": "token_embeddings",
                "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}}
# Keyword arguments sentence-transformers passes to transformers (old and new names); trust_remote_code it drops.
LOADING_KWARGS = ("model_args", "model_kwargs", "tokenizer_args", "processor_kwargs", "config_args", "config_kwargs",
                  "processing_kwargs")
MULTI_VECTOR = ("query_length", "document_length", "query_expansion")  # unset (null) for a dense model
HINT = "fix it, or encode the model with sentence-transformers"


def transformer_config_file(folder: Path) -> Path:
    """The file sentence-transformers reads the Transformer's config from: the first of ``CONFIG_NAMES`` there."""
    return next((folder / name for name in CONFIG_NAMES if (folder / name).is_file()), folder / CONFIG_NAMES[0])


def check_transformer_config(folder: Path) -> None:
    """Refuse a Transformer config holding an option that changes sentence-transformers' vectors and that retriever
    does not apply (loading arguments, another output, multi-vector settings)."""
    path = transformer_config_file(folder)
    config = read_json_object(path, HINT, missing={})
    for key, expected in TOKEN_STATES.items():
        if key in config and config[key] != expected:
            raise RetrieverError(f"{path}: {key} {config[key]!r}: sentence-transformers takes another output of the "
                                 "model than its token states, which retriever pools; encode the model with "
                                 "sentence-transformers")
    for key in LOADING_KWARGS:
        value = config.get(key) or {}
        options = sorted(value) if isinstance(value, dict) else [repr(value)]
        options = [option for option in options if option != "trust_remote_code"]
        if options:
            raise RetrieverError(f"{path}: its {key} ({', '.join(options)}) change how sentence-transformers loads "
                                 "or tokenizes the model, and retriever applies none of them, so its vectors would "
                                 "differ; encode the model with sentence-transformers, or delete them there")
    if config.get("tokenizer_name_or_path") is not None:
        raise RetrieverError(f"{path}: tokenizer_name_or_path {config['tokenizer_name_or_path']!r}: "
                             "sentence-transformers loads the tokenizer from there, and retriever the folder's own; "
                             "encode the model with sentence-transformers, or copy that tokenizer into the folder")
    for key in MULTI_VECTOR:
        if config.get(key) is not None:
            raise RetrieverError(f"{path}: {key} {config[key]!r} is a multi-vector setting, which this dense engine "
                                 "does not apply; encode the model with sentence-transformers")
