"""How many tokens of a text are encoded: what the model folder says, within what its positions take.

A length the user did not type comes from the folder (sentence-transformers' ``max_seq_length``): when it is
past the model's positions, the error names that file as well as the flag that overrides it.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from retriever.encoder_settings import max_length_problem
from retriever.errors import RetrieverError
from retriever.model_loading import json_value, model_files
from retriever.st_transformer import transformer_config_file
from retriever.wording import counted

MAX_LENGTH_CAP = 512  # the default when a model states no sentence-transformers max_seq_length (BERT's limit)


def _trained_length(path: Path) -> int | None:
    """The folder's sentence-transformers ``max_seq_length`` (None when unset); a value that is no number of tokens
    is refused, naming the file: it was replaced by the tokenizer's length without a word, where
    sentence-transformers fails on it or cuts every text to nothing."""
    file = transformer_config_file(path)
    trained = json_value(file, "max_seq_length")
    if trained is not None and (isinstance(trained, bool) or not isinstance(trained, int) or trained < 1):
        raise RetrieverError(f"{file}: max_seq_length {trained!r} is not a number of tokens (a whole number from 1); "
                             "fix it there (sentence-transformers reads it too), or pass --passage-max-length N")
    return trained


def default_max_length(name: str) -> int:
    """The length the model was trained for: sentence-transformers' ``max_seq_length`` when the folder has one,
    else the tokenizer's ``model_max_length`` and the position limit, capped at ``MAX_LENGTH_CAP`` but in a
    sentence-transformers folder (or a Router's tower): ≥ 6 saves ``max_seq_length`` as that ``model_max_length``,
    and < 6 took the smaller of the two, so a cap cut texts sentence-transformers reads whole."""
    path = model_files(name)
    if path is None:
        return MAX_LENGTH_CAP
    trained = _trained_length(path)
    if trained is not None:
        return trained
    config = {key: json_value(path / "config.json", key) for key in ("max_position_embeddings", "model_type",
                                                                     "pad_token_id")}
    positions = position_limit(SimpleNamespace(**config)) if isinstance(config["max_position_embeddings"], int) \
        and isinstance(config["pad_token_id"], (int, type(None))) else None
    limits = [int(v) for v in (json_value(path / "tokenizer_config.json", "model_max_length"), positions)
              if isinstance(v, (int, float)) and 1 < v < 1e9]
    if limits and ((path / "modules.json").is_file() or (path.parent / "router_config.json").is_file()):
        return min(limits)
    return min([MAX_LENGTH_CAP] + limits)


def position_limit(config: Any) -> int | None:
    """How many tokens the model's position embeddings can take (None when positions are unbounded); the default
    max length stays within it, or the encoder would refuse the length it picked itself."""
    limit = getattr(config, "max_position_embeddings", None)
    if not limit:
        return None
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert", "longformer"):
        limit -= (getattr(config, "pad_token_id", None) or 0) + 1  # these count positions from pad_token_id + 1
    return int(limit)


def check_max_lengths(settings: Any, config: Any) -> None:
    """Refuse, before any text is read, max lengths the model's positions cannot take (``settings``: an
    ``EncoderSettings``)."""
    limit = position_limit(config)
    for name in ("passage_max_length", "query_max_length"):  # passages first: queries follow their limit
        value = int(getattr(settings, name))
        if limit is None or value <= limit:
            continue
        flag = f"--{name.replace('_', '-')}"
        folder = model_files(settings.model)
        if folder is not None and _trained_length(folder) == value:  # the folder's own length, maybe not typed
            raise RetrieverError(f"{transformer_config_file(folder)}: max_seq_length {value} is more than the {limit} "
                                 f"positions the model can take; set it to at most {limit} there, or pass {flag} "
                                 f"{limit}")
        raise RetrieverError(f"{flag} {value} is more than the {limit} positions {settings.model} can take; "
                             f"pass at most {limit}")


def check_room_for_text(settings: Any, tokenizer: Any) -> None:
    """Refuse, as soon as the tokenizer is loaded, max lengths (``settings``: an ``EncoderSettings``) that leave a
    text no token next to the special tokens this tokenizer adds and the tokens of its prefix: the floor the flags
    are parsed with cannot know how many (a fixed floor of 3 assumed [CLS] and [SEP], refusing 2 to a [CLS]-only
    tokenizer and letting one of three specials, or a prefix, encode every text to one vector). The prefix is counted
    alone though a text follows it with no space: WordPiece's greedy longest match never covers the prefix's
    characters with more tokens when text follows (a merge, "abcq" + "ing" = abc ##qing, only stretches its last
    token into the text), and a prefix ending in whitespace or punctuation is split from the text before WordPiece
    runs. Only a prefix word [UNK] alone yet matched with the text's letters could break this, which a vocabulary
    holding each of the prefix's characters as a piece rules out."""
    count = tokenizer.num_special_tokens_to_add()
    special = tokenizer.convert_ids_to_tokens(tokenizer("", add_special_tokens=True)["input_ids"])
    special = tuple(special) if len(special) == count else ("?",) * count  # names when the two agree
    for role in ("passage", "query"):  # passages first: queries follow their limit
        name, prefix = f"{role}_max_length", getattr(settings, f"{role}_prefix")
        value, flag = int(getattr(settings, name)), f"--{role}-max-length"
        problem = max_length_problem(value, special)
        if problem is not None:
            raise RetrieverError(f"{name} ({flag}): {problem}")
        taken = len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) if prefix else 0
        if taken and value < count + taken + 1:  # the prefix is cut into, and the text gets no token at all
            raise RetrieverError(
                f"{name} ({flag}): {value} is less than {count + taken + 1}, the fewest tokens that leave a text one "
                f"of its own after the {taken} tokens of --{role}-prefix {prefix!r} and the "
                f"{counted(count, 'special token')} the model's tokenizer adds ({' '.join(special)}); pass at least "
                f"{count + taken + 1}, or a shorter prefix; below it every text encodes to the same vector")
