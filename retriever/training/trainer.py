"""Dual-encoder fine-tuning on the training stack (`stack`): `train(TrainConfig) -> TrainResult`.

Under torchrun each rank embeds its slice of the global batch and the loss runs over every rank's
queries and passages; GradCache replaces a training step for batches larger than memory; dev
evaluation each epoch keeps the best weights. OUTPUT becomes a model folder that `retriever
encode/build/search` load as is; OUTPUT/checkpoints holds the resumable state, then finished.json.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from accelerate.utils import broadcast_object_list
from transformers import set_seed

from retriever.corpus import BeirDataset
from retriever.errors import full_disk_named, refused_writes_named
from retriever.model_names import resolve_model_path
from retriever.qrels import is_reported_split
from retriever.training import stack
from retriever.training.candidates import check_candidates, drop_a_lone_last_step, warn_about_negatives
from retriever.training.data import Collator, EpochGroups, load_beir_examples, load_jsonl_examples
from retriever.training.examples import TrainExample
from retriever.training.dev import (SELECTION_METRIC, DevSet, dev_history, evaluate_dev, load_dev_set,
                                   shared_queries_warning, start_model_note)
from retriever.training.dual_encoder import DualEncoder
from retriever.training.gradcache import cached_embeddings
from retriever.training.loss import contrastive_loss, default_temperature, global_batch, judged_positive_mask
from retriever.training.processes import average_gradients, refusals_shared
from retriever.training.run_guards import one_run_at_a_time
from retriever.training.train_config import TrainConfig, TrainResult
from retriever.wording import counted


def _load_dev(config: TrainConfig, examples: list[TrainExample]) -> DevSet | None:
    if not config.dev_split:
        return None
    dataset = config.dev_dataset or config.dataset
    same_split = (config.dataset and Path(dataset).resolve() == Path(config.dataset).resolve()
                  and config.dev_split == config.split)
    if same_split:
        stack.log(f"warning: the dev split is the training split {config.split!r}: dev scores measure fit, "
                  "not generalisation")
    if is_reported_split(BeirDataset.open(dataset).qrels_path(config.dev_split), config.dev_split):  # as --split's
        stack.log(f"warning: selecting checkpoints on the {config.dev_split!r} split, whose queries results are reported "
                  "on, tunes the model on them (tuning the fusion on them is refused); hold out a dev split instead")
    dev = load_dev_set(dataset, config.dev_split, config.dev_max_docs, config.seed)
    stack.log(f"dev set {dev.name}: {counted(len(dev.query_ids), 'query')}, {counted(len(dev.documents), 'document')}")
    warning = None if same_split else shared_queries_warning(dev, [example.query for example in examples])
    if warning:
        stack.log(warning)
    return dev


class DualEncoderTrainer(stack.StackTrainer):
    """The contrastive loss over the global batch, GradCache steps and per-epoch dev evaluation."""

    def __init__(self, config: TrainConfig, model: DualEncoder, **kwargs) -> None:
        super().__init__(config, model=model, unused_parameters=bool(model.parameters_without_gradient()), **kwargs)
        self.temperature = config.temperature or default_temperature(model.settings.normalize)
        self.cross_device = config.cross_device_negatives and stack.world_size() > 1
        self.grad_cache_chunk_size, self.dev_batch_size = config.grad_cache_chunk_size, config.dev_batch_size
        self.dev_progress = config.progress  # --no-progress silences the dev encoding bar too

    def batch_loss(self, queries: torch.Tensor, passages: torch.Tensor, batch: dict) -> torch.Tensor:
        """Cross-entropy of each query's positive among the (global) batch's passages. Across devices every rank
        computes the global loss, whose gradient reaches only its own embeddings; DDP averages the ranks' gradients,
        so the loss is scaled by the world size to make their sum the full gradient (as Tevatron does)."""
        parts = (queries, passages, batch["targets"], batch["judged_keys"], batch["passage_keys"])
        if self.cross_device:
            parts = global_batch(*parts)
        queries, passages, targets, judged, keys = parts
        loss = contrastive_loss(queries, passages, targets, self.temperature, judged_positive_mask(judged, keys, targets))
        return loss * stack.world_size() if self.cross_device else loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        queries, passages = model(query=inputs["query"], passage=inputs["passage"])
        loss = self.batch_loss(queries, passages, inputs)
        return (loss, (queries, passages)) if return_outputs else loss

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        scale = stack.world_size() if self.cross_device else 1
        if not self.grad_cache_chunk_size:
            return super().training_step(model, inputs, num_items_in_batch) / scale
        model.train()
        inputs, encoder = self._prepare_inputs(inputs), self.accelerator.unwrap_model(model)  # past DDP's hooks
        queries = cached_embeddings(lambda chunk: encoder(query=chunk)[0], inputs["query"], self.grad_cache_chunk_size)
        passages = cached_embeddings(lambda chunk: encoder(passage=chunk)[1], inputs["passage"],
                                     self.grad_cache_chunk_size)
        loss = self.batch_loss(queries, passages, inputs)
        self.accelerator.backward(loss)
        average_gradients(encoder.parameters())  # what DDP would have done
        return loss.detach() / scale

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """nDCG@10 and Recall@100 on the dev set (every rank encodes a share, rank 0 scores, every rank gets them)."""
        scores = evaluate_dev(self.accelerator.unwrap_model(self.model), self.eval_dataset, self.args.device,
                              self.precision, self.dev_batch_size, self.dev_progress)  # in every process: each a share
        if self.is_world_process_zero():
            step = self.state.global_step
            label = "before training" if step == 0 else f"epoch {self.state.epoch:g}, step {step}"
            stack.log(f"dev {self.eval_dataset.name} {label}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
        scores = broadcast_object_list([scores])[0]
        metrics = {f"{metric_key_prefix}_{key}": value for key, value in scores.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics=metrics)
        return metrics


def train(config: TrainConfig) -> TrainResult:
    """Fine-tune a dual encoder and write it to ``config.output``; rerun the same call after a crash to resume.
    One run of an output at a time."""
    config.check()
    with refusals_shared(), one_run_at_a_time(config.output, stack.is_main_process()), \
            full_disk_named(Path(config.output)), \
            refused_writes_named(Path(config.output)):
        return _train(config)


def _train(config: TrainConfig) -> TrainResult:
    started = time.time()
    config, prior = config.prepare(TrainResult)
    resume = prior.resume
    if prior.finished is not None:
        return prior.finished
    set_seed(config.seed)
    model = DualEncoder.from_pretrained(config.model, **config.encoder)
    if config.dataset:
        examples = load_beir_examples(config.dataset, config.split, config.negatives)
    else:
        examples = load_jsonl_examples(config.train_jsonl, config.corpus, config.corpus_format, config.corpus_fields)
    dev = _load_dev(config, examples)
    check_candidates(config, examples)
    warn_about_negatives(config, examples)
    arguments, precision = config.arguments(config.batch_size, config.max_steps, keep_checkpoints=2,
                                            examples=(len(examples), "training query"), evaluate=dev is not None,
                                            evaluate_first=resume is None, metric=SELECTION_METRIC)
    drop_a_lone_last_step(config, examples, arguments)
    trainer = DualEncoderTrainer(config, model, arguments=arguments, precision=precision, eval_dataset=dev,
                                 train_dataset=EpochGroups(examples, config.seed, config.train_group_size),
                                 data_collator=Collator(model.tokenizer, model.settings))
    if resume is not None:
        stack.log(f"resuming from {resume} (step {stack.checkpoint_step(resume)})")
        _note_chunking(prior, config.grad_cache_chunk_size)
    group = min(config.train_group_size, 1 + max(len(e.negatives) for e in examples))  # what a query can bring
    queries = min(config.batch_size, len(examples))  # what a step holds (too few for torchrun is refused)
    stack.log(f"training {config.model} ({model.settings.towers} towers, {model.settings.pooling} pooling, "
              f"normalize={model.settings.normalize}, tau={trainer.temperature}) on {counted(len(examples), 'query')}: "
              f"{counted(config.max_steps or config.epochs, 'step' if config.max_steps else 'epoch')} of "
              f"{queries} x {group} passages over {counted(stack.world_size(), 'process', 'processes')}, "
              f"{trainer.args.device} {precision}")
    trainer.fit(prior)
    return _export(trainer, config, examples, resume, started)


def _note_chunking(prior: stack.PriorRun, chunk_size: int | None) -> None:
    """Say that a resume with another --grad-cache-chunk-size (or GradCache turned on or off) goes on: chunking
    changes the memory a step takes, not its gradients, so it is how a run that ran out of memory continues; only
    dropout is drawn per chunk. Such a resume was refused as a run with other settings, its checkpoints lost."""
    recorded = prior.resumed.get("grad_cache_chunk_size")
    if recorded != chunk_size:
        said = {None: "without GradCache"}
        stack.log(f"note: {prior.resume.name} was trained {said.get(recorded, f'in GradCache chunks of {recorded}')} "
                  f"and this run trains {said.get(chunk_size, f'in GradCache chunks of {chunk_size}')}: the same "
                  "gradients from the same weights, but other dropout draws, so the weights will not be those of "
                  "an uninterrupted run")


def _export(trainer: DualEncoderTrainer, config: TrainConfig, examples: list[TrainExample], resume: Path | None,
            started: float) -> TrainResult:
    """The best (or last) weights become the model folder."""
    state, model = trainer.state, trainer.accelerator.unwrap_model(trainer.model)
    best_step = state.best_global_step if config.dev_split else None
    history = dev_history(state.log_history) if config.dev_split else []
    best = next((h for h in history if h["step"] == best_step and h["step"] > 0), None)
    note = start_model_note(config.model, trainer.eval_dataset, history, best) if config.dev_split else None
    result = TrainResult(Path(config.output), state.global_step, len(examples), time.time() - started, best_step,
                         {k: v for k, v in best.items() if "@" in k} if best else None, history,
                         stack.checkpoint_step(resume), losses=[e["loss"] for e in state.log_history if "loss" in e],
                         start_model_better=note is not None if config.dev_split else None)

    def write_model() -> None:
        if best_step is not None and best_step != state.global_step:
            stack.load_weights(model, Path(trainer.args.output_dir) / f"checkpoint-{best_step}")
            stack.log(f"keeping the weights of step {best_step} (best dev {SELECTION_METRIC} {state.best_metric:.4f})")
        dev = {"best_step": best_step, "scores": result.dev_scores, "history": history,
               "start_model_better": result.start_model_better} if config.dev_split else None
        model.save(config.output, {
            **config.learning_settings(), "init_model_path": resolve_model_path(config.model),
            "temperature": trainer.temperature, "examples": len(examples), "steps": result.steps,
            "hard_negatives": sum(len(e.negatives) for e in examples) if config.train_group_size > 1 else 0,
            "epochs_completed": int(state.epoch or 0), "dtype": trainer.precision, "processes": stack.world_size(),
            "seconds": round(result.seconds, 1), "dev": dev})
        stack.log(f"wrote {config.output} ({counted(state.global_step, 'step')}, {result.seconds:.0f}s)")
        if note:
            stack.log(note)
    trainer.finish(write_model, result.to_json())
    return result
