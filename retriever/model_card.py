"""The README.md model card of a trained model folder, written from what retriever.json records."""
from __future__ import annotations

LOADING = """\
## Loading it

With retriever (reads `retriever.json`, so pooling, normalisation, lengths and prefixes need no flags):

```bash
retriever build CORPUS --model MODEL_FOLDER --output indexes/NAME
```

With sentence-transformers{st_version}:

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("MODEL_FOLDER")
queries = model.encode_query(["what is dense retrieval?"])
passages = model.encode_document(["Title body text"])  # title and text joined by a space
```

With transformers alone ({pooling_note}):

```python
from transformers import AutoModel, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("MODEL_FOLDER")
model = AutoModel.from_pretrained("MODEL_FOLDER")
```
{towers_note}"""

HUB_IDS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2"}  # aliases of base models, as the hub names them
POOLING_NOTES = {
    "cls": "the embedding is `last_hidden_state[:, 0]`",
    "mean": "the embedding is the mean of `last_hidden_state` over non-padding tokens",
    "pooler": "the embedding is `pooler_output`",
}


def training_data(training: dict) -> str:
    """What the model was trained on, from the run's recorded settings (`TrainConfig`, `PretrainConfig`)."""
    if training.get("dataset"):
        data = f"`{training['dataset']}` split `{training.get('split', 'train')}`"
    elif training.get("train_jsonl"):
        data = f"`{training['train_jsonl']}`" + (f" (ids from corpus `{training['corpus']}`)"
                                                 if training.get("corpus") else "")
    elif training.get("corpus"):
        data = f"corpus `{training['corpus']}`"
    else:
        data = "not recorded"
    if training.get("negatives") and training.get("hard_negatives") == 0:  # the card said they were trained on
        return data + f", hard negatives `{training['negatives']}` given but none used (train_group_size 1, or " \
            "none usable), so in-batch negatives only"
    return data + (f", hard negatives `{training['negatives']}`" if training.get("negatives") else "")


def model_card(config: dict) -> str:
    """The README.md of a model folder, so whoever finds the folder knows where it came from and how to load it."""
    training = config.get("training") or {}
    untied = config.get("towers") == "untied"
    pooling_note = POOLING_NOTES.get(config["pooling"], config["pooling"])
    if config.get("normalize"):
        pooling_note += ", then L2-normalised"
    lines = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity",
             "tags: [sentence-transformers, sentence-similarity, feature-extraction, dense-retrieval, retriever]"]
    if training.get("model") in HUB_IDS:  # the hub links a card to its base model only by a hub id
        lines.append(f"base_model: {HUB_IDS[training['model']]}")
    lines += ["---", "", "# Dense retrieval encoder trained with retriever", ""]
    lines += [f"- Base model: `{training.get('model', 'unknown')}`",
              f"- Training data: {training_data(training)}",
              f"- Towers: {config.get('towers', 'shared')}"
              + (" (passage tower at the root, query tower in `query/`)" if untied else ""),
              f"- Pooling: {config['pooling']}; normalised: {bool(config.get('normalize'))}",
              f"- Max lengths: queries {config['query_max_length']}, passages {config['passage_max_length']} tokens"
              + ("" if untied or config["query_max_length"] == config["passage_max_length"] else
                 " (sentence-transformers applies the passage length to both)"),
              f"- Prefixes: query {config.get('query_prefix', '')!r}, passage {config.get('passage_prefix', '')!r}"]
    recipe = ("epochs_completed", "steps", "examples", "batch_size", "train_group_size", "learning_rate",
              "warmup_ratio", "weight_decay", "temperature", "max_grad_norm", "grad_cache_chunk_size", "seed", "dtype")
    steps = ", ".join(f"{key} {training[key]}" for key in recipe if training.get(key) is not None)
    if steps:  # a record without them printed "...(`retriever train`): ." under its heading
        kind = "In-batch and hard-negative" if training.get("hard_negatives") else "In-batch-negative"
        lines += ["", "## Recipe", "", f"{kind} contrastive training (`retriever train`): {steps}."]
    dev = training.get("dev")
    if dev:
        scores = dev.get("scores") or {}
        lines += ["", "## Dev metrics", "",
                  f"On `{training.get('dev_dataset') or training.get('dataset')}` split `{training.get('dev_split')}` "
                  f"(best step {dev.get('best_step')}): "
                  + (", ".join(f"{k} {v:.4f}" for k, v in scores.items()) or "no epoch improved on the start") + "."]
    lines += ["", LOADING.format(st_version=" 5 or later (a Router sends queries and passages to their towers)"
                                 if untied else "", pooling_note=pooling_note,
                                 towers_note="\nThat is the passage tower; the query tower is "
                                 "`AutoModel.from_pretrained(\"MODEL_FOLDER/query\")`.\n" if untied else "")]
    return "\n".join(lines)
