"""BERT's pooler (tanh(W·CLS + b)) as a sentence-transformers Dense module: written so, and recognised so.

``pooler`` pooling is written as CLS Pooling then a tanh Dense holding the pooler's weights. A folder re-saved by
sentence-transformers keeps that Dense but not retriever.json, so the Dense is read as the pooler when it is
exactly it (the transformer's pooler weights, tanh, on the sentence embedding) and refused otherwise: retriever
applies no other Dense, and skipping one gives other vectors than sentence-transformers'. torch is imported where
weights are read, so reading a model folder's settings without a Dense module does not wait for it.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from retriever.files import read_json, read_json_object, write_json
from retriever.model_names import snapshot_file

if TYPE_CHECKING:
    import torch
    from torch import nn

TANH = "torch.nn.modules.activation.Tanh"
POOLER = ("pooler.dense.weight", "pooler.dense.bias")
LINEAR = ("linear.weight", "linear.bias")


def write_pooler_dense(folder: Path, model: nn.Module) -> None:
    """The pooler of ``model`` as a sentence-transformers Dense layer with the same weights."""
    from safetensors.torch import save_file

    dense = model.pooler.dense
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", {"in_features": dense.in_features, "out_features": dense.out_features,
                                         "bias": True, "activation_function": TANH})
    save_file({"linear.weight": dense.weight.detach().float().contiguous().cpu(),
               "linear.bias": dense.bias.detach().float().contiguous().cpu()}, str(folder / "model.safetensors"))


def pooler_dense_problem(root: Path, dense: Path, pooling: str, hint: str) -> str | None:
    """Why the Dense module in ``dense``, after ``pooling``, is not the pooler of the transformer at ``root``; None
    when it is, so the folder's vectors are retriever's ``pooler`` pooling."""
    if pooling != "cls":
        return f"the pooler reads the CLS token, not {pooling} pooling"
    config = read_json_object(dense / "config.json", hint)
    pooler, linear = _tensors(root, POOLER), _tensors(dense, LINEAR)
    if pooler is None:
        return "the transformer has no pooler weights"
    size = tuple(pooler[0].shape)
    if (config.get("out_features"), config.get("in_features")) != size or config.get("bias", True) is not True \
            or linear is None or tuple(linear[0].shape) != size:
        return f"it is not a {size[1]} → {size[0]} layer with a bias, as the pooler is"
    if str(config.get("activation_function")).rsplit(".", 1)[-1] != "Tanh" \
            or not str(config.get("activation_function")).startswith("torch.nn."):
        return "its activation is not tanh"
    if any(config.get(key, "sentence_embedding") != "sentence_embedding"
           for key in ("module_input_name", "module_output_name")):
        return "it does not map the sentence embedding"
    if config.get("use_residual", False) is not False:  # tanh(W·x + b) + x
        return "it adds its input back (use_residual), which the pooler does not"
    import torch

    if not all(torch.equal(ours.float(), theirs.float()) for ours, theirs in zip(pooler, linear)):
        return "its weights are not the transformer's pooler's"
    return None


def _tensors(folder: Path, names: tuple[str, ...]) -> list[torch.Tensor] | None:
    """The tensors ``names`` (or a prefixed ``bert.`` form) stored in the folder's weights, None if it lacks one;
    read from safetensors (one file or shards) or a PyTorch file loaded with ``weights_only``, fetched into a hub
    id's snapshot when it holds only the JSON files."""
    import torch
    from safetensors import safe_open

    # the first file there in transformers' order; a hub id's snapshot holding none has its weights fetched
    stored = [folder / name for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")]
    weights = next((path for path in stored if path.is_file()), None) or snapshot_file(stored[0]) \
        or snapshot_file(stored[2])
    if weights is None:
        return None
    if weights.name == "pytorch_model.bin":
        state = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
        found = [_one(state, name) for name in names]
        return None if None in found else [state[key] for key in found]
    if weights.name.endswith(".index.json"):
        files = {key: folder / file for key, file in read_json(weights).get("weight_map", {}).items()}
    else:
        with safe_open(str(weights), "pt") as opened:
            files = {key: weights for key in opened.keys()}
    found = [_one(files, name) for name in names]
    if None in found:
        return None
    tensors = []
    for key in found:
        shard = snapshot_file(files[key])
        if shard is None:
            return None
        with safe_open(str(shard), "pt") as opened:
            tensors.append(opened.get_tensor(key))
    return tensors


def _one(keys: dict, name: str) -> str | None:
    """The one stored key that is ``name`` or ends with ``.name`` (a BertFor... checkpoint's ``bert.`` prefix)."""
    if name in keys:
        return name
    matches = [key for key in keys if key.endswith("." + name)]
    return matches[0] if len(matches) == 1 else None
