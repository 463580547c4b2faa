"""The Condenser: a BERT MLM backbone plus a short head that predicts masked tokens from the last
layer's CLS and a middle layer's token states, so sentence meaning has to flow into CLS.

On disk it follows luyug/Condenser: a Hugging Face ``BertForMaskedLM`` folder, ``model.pt`` with only
the head's weights (``c_head.{i}.*``), and ``condenser.json`` saying how the head is wired, so a
published ``Luyu/condenser`` folder warm-starts both parts and our output continues later.
``BertForMaskedLM`` has no pooler, so the warm start's pooler weights ride along untouched in the
saved weights (``bert.pooler.*``): ``pooler`` pooling still works on the pre-trained backbone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertForMaskedLM, BertModel, PreTrainedTokenizerBase
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.bert.modeling_bert import BertLayer

from retriever.choices import MAX_HEAD_LAYERS
from retriever.errors import RetrieverError
from retriever.files import read_json_object, write_json
from retriever.model_loading import load_model, model_files
from retriever.model_names import FETCH_ADVICE, resolve_model_path
from retriever.pooling import has_trained_pooler
from retriever.weights_files import protocol_note_silenced, refused_file_reason
from retriever.wording import agree, counted

HEAD_WEIGHTS = "model.pt"
CONDENSER_CONFIG = "condenser.json"
HEAD_PREFIX = "c_head."
IGNORE_INDEX = -100
DEFAULT_HEAD_LAYERS = 2
_HEAD_KEY = re.compile(r"^c_head\.(\d+)\.")


def default_skip_from(num_hidden_layers: int) -> int:
    """The middle layer, as in the Condenser paper (6 of 12 for BERT-base).

    The luyug/Condenser code's argument default is 2, which is not what the paper trained with:
    an easy trap when copying its command lines.
    """
    return num_hidden_layers // 2


@dataclass
class CondenserOutput:
    """Losses of one batch; logits are only at the masked positions (the rest are never scored)."""

    loss: torch.Tensor
    head_mlm_loss: torch.Tensor | None  # None without a head (MLM-only pre-training)
    backbone_mlm_loss: torch.Tensor
    span_loss: torch.Tensor | None
    head_logits: torch.Tensor | None
    backbone_logits: torch.Tensor
    cls: torch.Tensor


class CondenserForPretraining(nn.Module):
    """``lm`` is the backbone with its MLM head; ``c_head`` the fresh layers (names as in luyug/Condenser).
    No head layers is the MLM-only ablation: the same steps and losses minus the head's."""

    def __init__(self, lm: BertForMaskedLM, n_head_layers: int = DEFAULT_HEAD_LAYERS,
                 skip_from: int | None = None) -> None:
        super().__init__()
        layers = lm.config.num_hidden_layers
        skip_from = default_skip_from(layers) if skip_from is None else skip_from
        if not 0 <= skip_from <= layers:
            raise RetrieverError(f"--skip-from {skip_from} is outside 0..{layers} (0 is the embeddings, "
                                 f"{layers} the last of the model's {layers} layers)")
        if n_head_layers < 0:
            raise RetrieverError("--n-head-layers must not be negative")
        self.lm = lm
        self.n_head_layers = n_head_layers
        self.skip_from = skip_from
        self.c_head = nn.ModuleList([BertLayer(lm.config) for _ in range(n_head_layers)])
        self.c_head.apply(lm._init_weights)
        self.carried_pooler: dict[str, torch.Tensor] = {}  # bert.pooler.* of the warm start, saved as is

    def head_input(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Late CLS, early tokens: the head can only recover what CLS carries about the whole text."""
        return torch.cat([hidden_states[-1][:, :1], hidden_states[self.skip_from][:, 1:]], dim=1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor,
                span_temperature: float | None = None) -> CondenserOutput:
        """Head MLM + backbone ("late") MLM, plus coCondenser's span loss when a temperature is given.

        The vocabulary projection runs only at masked positions: the same losses as scoring every
        token, without a batch x length x vocab tensor.
        """
        outputs = self.lm.bert(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                               return_dict=True)
        hidden_states = outputs.hidden_states
        selected = labels != IGNORE_INDEX
        targets = labels[selected]
        backbone_logits = self.lm.cls(hidden_states[-1][selected])
        loss = backbone_mlm = _mlm_loss(backbone_logits, targets)
        head_logits = head_mlm = None
        if len(self.c_head):
            states = self.head_input(hidden_states)
            mask = create_bidirectional_mask(config=self.lm.config, inputs_embeds=states,
                                             attention_mask=attention_mask)
            for layer in self.c_head:
                result = layer(states, mask)
                states = result[0] if isinstance(result, tuple) else result
            head_logits = self.lm.cls(states[selected])
            head_mlm = _mlm_loss(head_logits, targets)
            loss = loss + head_mlm
        cls = hidden_states[-1][:, 0]
        span = None
        if span_temperature is not None:
            span = span_contrastive_loss(cls, span_temperature)
            loss = loss + span
        return CondenserOutput(loss=loss, head_mlm_loss=head_mlm, backbone_mlm_loss=backbone_mlm, span_loss=span,
                               head_logits=head_logits, backbone_logits=backbone_logits, cls=cls)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """Everything but the backbone, keyed as luyug/Condenser's ``model.pt``."""
        return {key: value for key, value in self.state_dict().items() if not key.startswith("lm.")}

    def save_pretrained(self, folder: str | Path, tokenizer: PreTrainedTokenizerBase | None = None) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.lm.save_pretrained(folder, state_dict={**self.lm.state_dict(), **self.carried_pooler})
        torch.save(self.head_state_dict(), folder / HEAD_WEIGHTS)
        write_json(folder / CONDENSER_CONFIG, {
            "n_head_layers": self.n_head_layers, "skip_from": self.skip_from,
            "layout": "luyug/Condenser: Hugging Face BertForMaskedLM + model.pt with the c_head.* weights"})
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        return folder


def _mlm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean over masked tokens, as BertForMaskedLM computes it; zero (not NaN) if nothing is masked."""
    if targets.numel() == 0:
        return logits.float().sum() * 0.0
    return F.cross_entropy(logits.float(), targets)


def span_contrastive_loss(cls: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """coCondenser: rows come in sibling pairs (2i, 2i+1); each span must pick its sibling among the batch."""
    if cls.shape[0] % 2:
        raise ValueError("span contrastive loss needs spans in sibling pairs")
    vectors = cls.float()
    scores = vectors @ vectors.T / temperature
    self_similarity = torch.eye(len(vectors), dtype=torch.bool, device=vectors.device)
    scores = scores.masked_fill(self_similarity, torch.finfo(scores.dtype).min)
    siblings = torch.arange(len(vectors), device=vectors.device) ^ 1
    return F.cross_entropy(scores, siblings)


def _saved_head(folder: Path) -> dict[str, torch.Tensor]:
    path = folder / HEAD_WEIGHTS
    if not path.is_file():
        return {}
    try:
        with protocol_note_silenced():
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign pickle: say which file, in one line
        raise RetrieverError(f"{path}: cannot read the Condenser head: {refused_file_reason(path, error)}; remove or "
                             "rename it to start from this folder's backbone with a new head") from None
    head = ({key: value for key, value in state.items() if isinstance(key, str) and key.startswith(HEAD_PREFIX)}
            if isinstance(state, dict) else None)
    if head is None or not all(_HEAD_KEY.match(key) and isinstance(value, torch.Tensor) for key, value in head.items()):
        # a tensor, a list, or keys without a layer number died of an AttributeError traceback
        raise RetrieverError(f"{path}: not a Condenser head (a dict of c_head.N.* tensors, as luyug/Condenser saves "
                             "it); remove or rename it to start from this folder's backbone with a new head")
    return head


def _saved_wiring(folder: Path, layers: int | None) -> dict:
    """The warm start's ``condenser.json``, checked: a number given as a string or a float, or a head of 100000
    layers, died of a TypeError traceback or built layers for minutes, and a skip_from beyond the model's ``layers``
    (None: the flag's value is used instead) blamed --skip-from, which was not given. A recorded 0 layers (an
    MLM-only run) is no head to continue, so the default head applies, as ``--help`` says."""
    path = folder / CONDENSER_CONFIG
    saved = read_json_object(path, missing={})
    for key, most in (("n_head_layers", MAX_HEAD_LAYERS), ("skip_from", layers)):
        value = saved.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0
                                  or most is not None and value > most):
            raise RetrieverError(f"{path}: {key} is {value!r}, not a whole number from 0"
                                 + (f" to {most}" if most is not None else "") + "; fix or delete the file")
    return {**saved, "n_head_layers": saved.get("n_head_layers") or None}


def _pooler_weights(name: str) -> dict[str, torch.Tensor]:
    """The checkpoint's trained pooler as ``bert.pooler.*`` tensors, or nothing if it has none."""
    bert, info = load_model(name, BertModel, advice=FETCH_ADVICE)
    if not has_trained_pooler(bert, info):
        return {}
    return {f"bert.pooler.{key}": value.detach().clone() for key, value in bert.pooler.state_dict().items()}


def _untied_note(path: Path, name: str) -> str | None:
    """Which tower of a `train --towers untied` folder is pre-trained (the document tower at its root): the query
    tower in its subfolder was passed over without a word, and the output holds one tower."""
    from retriever.model_folder import untied_tower_paths

    query, document = untied_tower_paths(path)
    if document != path or not (query / "config.json").is_file():
        return None
    return (f"note: {name} holds untied towers: pre-training continues its document tower (the folder's own), not its "
            f"query tower; pass --model {query} to pre-train that one instead")


def load_condenser(name: str, n_head_layers: int | None = None,
                   skip_from: int | None = None) -> tuple[CondenserForPretraining, list[str]]:
    """Warm-start from any BERT checkpoint or a Condenser folder; return the model and what was new."""
    path = Path(resolve_model_path(name))
    local = path.is_dir()
    files = path if local else model_files(name)  # a hub id's JSON snapshot: it was loaded into a BERT unread
    model_type = read_json_object(files / "config.json", missing={}).get("model_type") if files else None
    if model_type is not None and model_type != "bert":
        raise RetrieverError(f"{name} is a {model_type!r} checkpoint; Condenser pre-training here needs a BERT one")
    lm, info = load_model(name, BertForMaskedLM, advice=FETCH_ADVICE)
    notes: list[str] = [note] if local and (note := _untied_note(path, name)) else []
    missing = sorted(info.get("missing_keys", ()))
    if any(key.startswith("cls.") for key in missing):
        word_embeddings = lm.bert.embeddings.word_embeddings
        if lm.cls.predictions.decoder.weight is not word_embeddings.weight:
            lm.cls.predictions.decoder.weight = word_embeddings.weight
        notes.append(f"{name} has no MLM head: the MLM prediction head is newly initialised "
                     "(decoder tied to word embeddings)")
    backbone_missing = [key for key in missing if not key.startswith("cls.")]
    if backbone_missing:
        notes.append(f"warning: {counted(len(backbone_missing), 'backbone weight')} "
                     f"{agree(len(backbone_missing), 'is', 'are')} missing from {name} and newly initialised "
                     f"(e.g. {backbone_missing[0]})")
    saved = _saved_wiring(path, lm.config.num_hidden_layers if skip_from is None else None) if local else {}
    head = _saved_head(path) if local and n_head_layers != 0 else {}  # 0: MLM only, any saved head unused
    saved_layers = len({_HEAD_KEY.match(key).group(1) for key in head}) if head else saved.get("n_head_layers")
    if head and n_head_layers is not None and n_head_layers != saved_layers:
        raise RetrieverError(f"{path / HEAD_WEIGHTS} holds a {saved_layers}-layer Condenser head but "
                             f"--n-head-layers is {n_head_layers}; drop the flag or start from a plain BERT")
    layers = next(n for n in (n_head_layers, saved_layers, DEFAULT_HEAD_LAYERS) if n is not None)
    if skip_from is None:
        skip_from = saved.get("skip_from")
    elif head and saved.get("skip_from") not in (None, skip_from):
        notes.append(f"warning: the head in {path} was trained with skip_from {saved['skip_from']}; "
                     f"continuing with {skip_from} changes what it sees")
    model = CondenserForPretraining(lm, n_head_layers=layers, skip_from=skip_from)
    model.carried_pooler = _pooler_weights(name)
    if model.carried_pooler:
        notes.append(f"the pooler weights of {name} are kept unchanged (MLM does not train them)")
    if head:
        _load_head(model, head, path / HEAD_WEIGHTS)
        notes.append(f"loaded the {layers}-layer Condenser head from {path / HEAD_WEIGHTS}")
    else:
        notes.append(f"the {layers}-layer Condenser head is newly initialised (skip_from {model.skip_from})"
                     if layers else "no Condenser head: MLM only")
    return model, notes


def _load_head(model: CondenserForPretraining, head: dict[str, torch.Tensor], path: Path) -> None:
    """Load a saved head, or name a weight that does not fit and the shapes: torch's error began `Error(s) in
    loading state_dict for ModuleList:`, and its first line was all the message said."""
    given, expected = {key[len(HEAD_PREFIX):]: value for key, value in head.items()}, model.c_head.state_dict()
    wrong = ([f"{key} is {_shape(given[key])} where the model's is {_shape(value)}" for key, value in expected.items()
              if key in given and given[key].shape != value.shape]
             + [f"{key} is missing" for key in expected if key not in given]
             + [f"{key} is not a weight of the model's head" for key in given if key not in expected])
    if wrong:
        raise RetrieverError(f"{path}: does not fit this model: {HEAD_PREFIX}{wrong[0]} ({len(wrong)} of "
                             f"{counted(len(expected), 'head weight')} {agree(len(wrong), 'differs', 'differ')}): a "
                             "head saved beside a model of another size; remove or rename it to start from this "
                             "folder's backbone with a new head")
    model.c_head.load_state_dict(given)


def _shape(tensor: torch.Tensor) -> str:
    return "x".join(map(str, tensor.shape))
