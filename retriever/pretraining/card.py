"""The README.md model card of a `retriever pretrain` folder.

A pre-trained folder is found and passed on like a `retriever train` one, so it gets a card too: where
it came from (start model, corpus, recipe, as the run recorded them) and, above all, that it is a
backbone to fine-tune rather than a retriever: it has no pooling or retriever.json, so
sentence-transformers would fall back to mean pooling over an encoder that was never trained to rank.
The data line is the one `retriever train` cards use (`model_card.training_data`).
"""
from __future__ import annotations

from retriever.model_card import training_data

RECIPE = ("max_steps", "epochs", "batch_size", "max_length", "mlm_probability", "learning_rate", "warmup_ratio",
          "weight_decay", "max_grad_norm", "freeze_backbone_steps", "backbone_lr_scale", "seed")

LOADING = """\
## Using it

It is a backbone to fine-tune, not a retriever yet (no pooling is recorded, and nothing here was trained
to rank passages):

```bash
retriever train --dataset DATASET --split train --model MODEL_FOLDER --pooling cls --output models/NAME
```

The backbone loads with transformers (`BertForMaskedLM` also loads its MLM head):

```python
from transformers import AutoModel, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("MODEL_FOLDER")
model = AutoModel.from_pretrained("MODEL_FOLDER")
```

sentence-transformers finds no `modules.json` here and falls back to mean pooling over this untrained-for-ranking
backbone; fine-tune first, and the `retriever train` folder opens in sentence-transformers as trained.

{head_note}
"""


def pretrain_card(settings: dict, steps: int, n_head_layers: int, skip_from: int) -> str:
    """The card of a pre-trained folder, from the run's recorded settings (`PretrainConfig.learning_settings`,
    paths already reduced to names) and the model's head wiring."""
    objective = "MLM only (no Condenser head)" if settings.get("objective") == "mlm" else (
        f"Condenser: {n_head_layers} head layers fed the last layer's CLS and the tokens of layer {skip_from}")
    if settings.get("cocondenser"):
        objective = "co" + objective if objective.startswith("Condenser") else objective
        objective += f", plus coCondenser's span-contrastive loss (temperature {settings.get('temperature')})"
    lines = ["---", "library_name: transformers", "tags: [bert, condenser, fill-mask, retriever]", "---", "",
             "# Condenser pre-trained BERT (retriever pretrain)", "",
             f"- Base model: `{settings.get('model', 'unknown')}`",
             f"- Training data: {training_data(settings)}",
             f"- Objective: {objective}",
             f"- Steps: {steps}", "", "## Recipe", "",
             "Masked-language-model pre-training (`retriever pretrain`): "
             + ", ".join(f"{key} {settings[key]}" for key in RECIPE if settings.get(key) is not None) + ".", ""]
    head_note = ("The Condenser head is kept beside it, in `model.pt` (`c_head.*` weights) with `condenser.json`, the "
                 "layout of published `Luyu/condenser` checkpoints: `retriever pretrain --model MODEL_FOLDER` "
                 "continues both." if n_head_layers and settings.get("objective") != "mlm" else
                 "There is no Condenser head (MLM-only pre-training).")
    return "\n".join(lines) + "\n" + LOADING.format(head_note=head_note)
