"""`CondenserTrainer`: the Hugging Face Trainer fine-tuning uses (`retriever.training.stack`: checkpoints,
resume, settings check, DDP, bf16, logging) with the Condenser's loss; each logged step also records the head and
backbone MLM losses (and the coCondenser span loss), and the backbone may learn slower or stay frozen at first."""
from __future__ import annotations

import torch
from transformers import Trainer, TrainerCallback

from retriever.pretraining.condenser import CondenserForPretraining
from retriever.pretraining.config import PretrainConfig
from retriever.training import stack
from retriever.training.processes import average_gradients, summed_over_processes

LOSS_PARTS = ("head_mlm", "backbone_mlm", "span")
BACKBONE_PREFIX = "lm.bert."  # the encoder a retriever keeps; everything else is a pre-training head


class FrozenBackbone(TrainerCallback):
    """The first ``steps`` optimizer steps train only the heads: the backbone gets no gradient, so AdamW
    (which skips parameters without one) leaves it exactly as it was, weight decay included."""

    def __init__(self, model: CondenserForPretraining, steps: int) -> None:
        self.backbone, self.steps = model.lm.bert, steps

    def on_step_begin(self, args, state, control, **kwargs):
        self.backbone.requires_grad_(state.global_step >= self.steps)


def backbone_frozen(model: CondenserForPretraining) -> bool:
    """Whether this step trains only the heads (`FrozenBackbone` froze the backbone)."""
    return not any(parameter.requires_grad for parameter in model.lm.bert.parameters())


class CondenserTrainer(stack.StackTrainer):
    """The Condenser's loss, with its parts averaged into each log entry; the backbone may learn slower."""

    def __init__(self, config: PretrainConfig, **kwargs) -> None:
        # every parameter has a gradient at every step DDP runs (frozen steps run past it: training_step)
        super().__init__(config, unused_parameters=False, **kwargs)
        self.span_temperature = config.temperature if config.cocondenser else None
        self.backbone_lr_scale = config.backbone_lr_scale
        self.parts, self.batches, self.tokens = {}, 0, 0
        if config.freeze_backbone_steps:
            self.add_callback(FrozenBackbone(self.model, config.freeze_backbone_steps))

    def create_optimizer(self, model=None):
        """The library's AdamW and decay split, with backbone groups at ``backbone_lr_scale`` x the learning
        rate (the schedule scales every group alike). Frozen steps drop gradients, not parameters, from it."""
        if self.optimizer is None:
            model = model or self.model
            decay = set(self.get_decay_parameter_names(model))
            groups = [{"params": [p for n, p in model.named_parameters()
                                  if (n in decay) == decayed and n.startswith(BACKBONE_PREFIX) == backbone],
                       "weight_decay": self.args.weight_decay if decayed else 0.0,
                       "lr": self.args.learning_rate * (self.backbone_lr_scale if backbone else 1.0)}
                      for backbone in (True, False) for decayed in (True, False)]
            optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, model)
            self.optimizer = optimizer_cls([group for group in groups if group["params"]], **kwargs)
        return self.optimizer

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        """A frozen-backbone step under torchrun runs past DDP and averages the heads' gradients itself. DDP would
        wait for the frozen parameters' gradients; searching each step's graph for them instead
        (``find_unused_parameters``) cost a traversal at every step of the run and, once the backbone thawed, a
        warning from every process that the search found nothing."""
        module = self.accelerator.unwrap_model(model)
        if stack.world_size() < 2 or not backbone_frozen(module):
            return super().training_step(model, inputs, num_items_in_batch)
        loss = super().training_step(module, inputs, num_items_in_batch)
        average_gradients(module.parameters())
        return loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs, span_temperature=self.span_temperature)
        for name in LOSS_PARTS:
            value = getattr(outputs, f"{name}_loss")
            if value is not None:
                self.parts[name] = self.parts.get(name, 0.0) + value.detach()
        self.batches += 1
        self.tokens += int(inputs["attention_mask"].sum())
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self.batches:  # each part's mean over the launch, as the loss is (not rank 0's)
            totals = summed_over_processes(self.parts)
            logs.update({name: total / (self.batches * stack.world_size()) for name, total in totals.items()})
            self.parts, self.batches = {}, 0
        super().log(logs, start_time)
