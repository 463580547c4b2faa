"""What `retriever pretrain` takes and gives back: `PretrainConfig` (checked before anything is read) and
`PretrainResult`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from retriever.choices import DEFAULT_START, check_temperature
from retriever.encoder_settings import model_name
from retriever.errors import RetrieverError
from retriever.pretraining.guards import check_corpus_path
from retriever.training import stack
from retriever.training.layout import check_step_split
from retriever.training.processes import launched_processes

OBJECTIVES = ("condenser", "mlm")


@dataclass(kw_only=True)
class PretrainConfig(stack.StackConfig):
    """Everything `retriever pretrain` takes. None head settings come from a Condenser warm start, else defaults."""

    corpus: str
    model: str = DEFAULT_START
    n_head_layers: int | None = None
    skip_from: int | None = None
    cocondenser: bool = False
    objective: str = "condenser"
    freeze_backbone_steps: int = 0
    backbone_lr_scale: float = 1.0
    temperature: float = 1.0
    max_length: int = 128
    mlm_probability: float = 0.15
    keep_checkpoints: int = 2
    RUNTIME_ONLY: ClassVar[tuple[str, ...]] = (*stack.StackConfig.RUNTIME_ONLY, "keep_checkpoints")
    FINITE: ClassVar[tuple[str, ...]] = (*stack.StackConfig.FINITE, "backbone_lr_scale", "temperature",
                                         "mlm_probability")
    SWITCHES: ClassVar[tuple[str, ...]] = (*stack.StackConfig.SWITCHES, "cocondenser")  # "yes" trained coCondenser
    COUNTS: ClassVar[tuple[str, ...]] = (*stack.StackConfig.COUNTS, "n_head_layers", "max_length", "keep_checkpoints",
                                         "skip_from", "freeze_backbone_steps")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model = model_name(self.model)  # a Path died in check_model_name; the corpus and output paths are resolved

    def check(self) -> None:
        check_corpus_path(self.corpus)  # as super().check() begins with the output and model (check_paths_given)
        super().check()
        if self.backbone_lr_scale <= 0:
            raise RetrieverError("--backbone-lr-scale must be positive")
        if not 0 < self.mlm_probability < 1:
            raise RetrieverError("--mlm-probability must be between 0 and 1")

    def check_flag_combinations(self) -> None:
        """Settings that contradict each other or the launch, read from no file: `retriever pretrain` reports them as
        usage errors before anything is read, and `check` runs them, so the library raises the same line."""
        if self.objective not in OBJECTIVES or self.objective == "mlm" and (self.n_head_layers or
                                                                           self.skip_from is not None):
            raise RetrieverError(f"--objective is one of {', '.join(OBJECTIVES)}; mlm has no head (no --n-head-layers "
                                 "or --skip-from)")
        check_temperature(self.temperature)
        if self.cocondenser:
            check_span_batch(self.batch_size, launched_processes())
        if not self.cocondenser and self.temperature != PretrainConfig.temperature:  # else unused, without a word
            raise RetrieverError(f"--temperature {self.temperature:g} is the --cocondenser span loss's, which this "
                                 "run does not have; add --cocondenser or drop --temperature")
        check_step_split(self.batch_size, "--sequences-per-step")  # it was refused once the model and data loaded
        super().check_flag_combinations()


def check_span_batch(sequences: int, processes: int) -> None:
    """coCondenser's span softmax runs within a process's slice: each process needs whole passages (2 spans each)
    from at least 2 documents, or its only candidate is the sibling and the span loss is 0. A flag error, so the line
    names the counts that fit (the CLI refused it with exit 1, as if a run had failed)."""
    step, least = 2 * processes, 4 * processes
    if sequences >= least and sequences % step == 0:
        return
    lower, upper = (max(least, rounded * step) for rounded in (sequences // step, -(-sequences // step)))
    use = f"{lower}" if lower == upper else f"{lower} or {upper}"
    rule = (f"a multiple of {step} (whole 2-span passages in each of the {processes} processes) and at least "
            f"{least} (2+ passages a process for the span loss)" if processes > 1 else
            "even (2 spans a passage) and at least 4 (2+ passages for the span loss)")
    raise RetrieverError(f"--sequences-per-step {sequences} does not fit --cocondenser: it must be {rule}; use {use}")


@dataclass
class PretrainResult:
    output: Path
    steps: int
    resumed_from_step: int | None
    history: list[dict]
    tokens_per_second: float | None  # None: this run trained no step (resumed from the last step's checkpoint)
    seconds: float
    notes: list[str] = field(default_factory=list)
    already_finished: bool = False
