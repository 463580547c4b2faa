"""What `retriever train` takes (``TrainConfig``) and what it returns (``TrainResult``), held apart from the
training loop (``trainer``, which re-exports both): the settings' checks are read and changed on their own."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from retriever.choices import check_temperature
from retriever.errors import RetrieverError
from retriever.training import stack
from retriever.training.candidates import check_candidates
from retriever.training.layout import check_step_split
from retriever.training.run_guards import same_encoder_settings
from retriever.texts import whole_number


@dataclass(kw_only=True)
class TrainConfig(stack.StackConfig):
    """Everything `retriever train` takes; encoder settings missing from ``encoder`` come from the init model."""

    dataset: str | None = None
    split: str = "train"
    train_jsonl: str | None = None
    negatives: str | None = None
    encoder: dict = field(default_factory=dict)  # EncoderSettings fields to set (see EncoderSettings.for_model)
    epochs: int = 1
    learning_rate: float = 2e-5
    train_group_size: int = 1
    temperature: float | None = None
    grad_cache_chunk_size: int | None = None
    cross_device_negatives: bool = True
    dev_split: str | None = None
    dev_dataset: str | None = None
    dev_max_docs: int | None = None
    dev_batch_size: int | None = None
    RUNTIME_ONLY: ClassVar[tuple[str, ...]] = (*stack.StackConfig.RUNTIME_ONLY, "dev_batch_size")
    PATHS: ClassVar[tuple[str, ...]] = ("output", "dataset", "train_jsonl", "corpus", "negatives", "dev_dataset")
    COUNTS: ClassVar[tuple[str, ...]] = (*stack.StackConfig.COUNTS, "train_group_size", "grad_cache_chunk_size",
                                         "dev_max_docs")
    FINITE: ClassVar[tuple[str, ...]] = (*stack.StackConfig.FINITE, "temperature")
    SWITCHES: ClassVar[tuple[str, ...]] = (*stack.StackConfig.SWITCHES, "cross_device_negatives")

    def check(self) -> None:
        super().check()
        if self.dev_batch_size is not None:  # the library's alone: refused at the first dev evaluation, a folder made
            whole_number(self.dev_batch_size, "dev_batch_size", 1)

    def check_flag_combinations(self) -> None:
        """Settings that contradict each other or the launch, read from no file: `retriever train` reports them as
        usage errors before anything is read (they exited 1 like a failed run), and `check` runs them."""
        if (self.dataset is None) == (self.train_jsonl is None):
            raise RetrieverError("give training data as either --dataset (a BEIR folder) or --train-jsonl")
        if self.corpus and not self.train_jsonl:
            raise RetrieverError("--corpus resolves document ids in --train-jsonl; a --dataset brings its own corpus")
        if self.negatives and not self.dataset:
            raise RetrieverError("--negatives goes with --dataset; put a JSONL example's negatives in its own line")
        if self.dev_split is not None and not str(self.dev_split).strip():  # "$DEV" unset: no dev evaluation, exit 0
            raise RetrieverError("--dev-split is empty (an unset variable?): give the split to evaluate, e.g. dev, or "
                                 "drop --dev-split")
        if self.dev_split and not (self.dev_dataset or self.dataset):
            raise RetrieverError("--dev-split needs a BEIR folder: pass --dev-dataset")
        if not self.dev_split and (self.dev_dataset or self.dev_max_docs):  # else no dev evaluation, without a word
            raise RetrieverError("--dev-dataset and --dev-max-docs go with --dev-split, the split to evaluate; add it")
        if self.temperature is not None:
            check_temperature(self.temperature)
        check_candidates(self)
        check_step_split(self.batch_size, "--queries-per-step")  # it was refused once the model and data loaded
        super().check_flag_combinations()

    def same_setting(self, name: str, recorded: object, given: object) -> bool:
        """Encoder flags given otherwise that resolve alike (`--pooling mean` on a model that pools by mean)."""
        return name == "encoder" and same_encoder_settings(self.model, recorded, given)

    def data_files(self) -> dict[str, Path | None]:
        """Besides --corpus: --train-jsonl, --negatives and the files of the training and dev splits' BEIR folders."""
        files = {**super().data_files(), "train_jsonl": self.train_jsonl, "negatives": self.negatives}
        splits = {"train_": (self.dataset, self.split), "dev_": (self.dev_dataset or self.dataset, self.dev_split)}
        for prefix, (root, split) in splits.items():
            for role, name in ("corpus", "corpus.jsonl"), ("queries", "queries.jsonl"), ("qrels", f"qrels/{split}.tsv"):
                files[prefix + role] = Path(root) / name if root and split else None
        return {role: Path(path) if path else None for role, path in files.items()}


@dataclass
class TrainResult:
    output: Path
    steps: int
    examples: int
    seconds: float
    best_step: int | None = None
    dev_scores: dict[str, float] | None = None
    history: list[dict] = field(default_factory=list)
    resumed_from_step: int | None = None
    already_finished: bool = False
    losses: list[float] = field(default_factory=list)
    """The training loss of every step (over the global batch under torchrun)."""
    start_model_better: bool | None = None
    """Whether the start model scored higher on dev than every trained step (None: no dev split)."""

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "output": str(self.output)}
