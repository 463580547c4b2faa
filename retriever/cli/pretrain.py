"""`retriever pretrain`: Condenser / coCondenser pre-training of a BERT on a raw corpus."""
from __future__ import annotations

import json
from pathlib import Path

import click

from retriever.choices import DEFAULT_START, MAX_HEAD_LAYERS
from retriever.cli.options import (FiniteRange, corpus_options, device_options, fields_from, json_option,
                                   renamed_option)
from retriever.cli.output_params import OutputFolder
from retriever.cli.outputs import mark_resumable, stop_on_sigterm
from retriever.cli.training import (CountRange, ddp_timeout_option, optimizer_options, progress_option,
                                    report_to_option, run_length_options, temperature_option)
from retriever.errors import RetrieverError


@click.command("pretrain")
@click.argument("corpus", type=click.Path(exists=True, path_type=Path))
@click.option("--model", default=DEFAULT_START, show_default=True,
              help="BERT checkpoint to start from: Hugging Face folder or hub id (the default is fetched from the "
                   "hub; offline, pass a local folder), or a Condenser folder (HF model + model.pt head, e.g. "
                   "Luyu/condenser or an earlier output) to continue both backbone and head. Not 'minilm': it is "
                   "already a sentence encoder, which pre-training made worse (README, \"When pre-training helps\").")
@click.option("--output", "-o", type=OutputFolder(file_okay=False), required=True,
              help="Folder to write: the backbone as a Hugging Face model, the head as model.pt, condenser.json. "
                   "Checkpoints go in OUTPUT/checkpoints; rerun the same command to resume.")
@click.option("--n-head-layers", type=CountRange("n_head_layers"), default=None,
              help=f"Fresh transformer layers in the Condenser head, 1 to {MAX_HEAD_LAYERS}. [default: the warm "
                   "start's head, else 2]")
@click.option("--skip-from", type=CountRange("skip_from"), default=None,
              help="Backbone layer whose token states feed the head (0 = embeddings). [default: the warm start's "
                   "condenser.json, else num_hidden_layers // 2, i.e. 6 for BERT-base, 3 for MiniLM-L6; beware "
                   "the luyug/Condenser code default of 2, which is not what the paper used]")
@click.option("--cocondenser", is_flag=True, default=False, show_default=True,
              help="Add coCondenser's span-contrastive loss: two random spans per passage, each must find its "
                   "sibling among the batch by CLS similarity.")
@click.option("--objective", type=click.Choice(["condenser", "mlm"]), default="condenser", show_default=True,
              help="mlm drops the Condenser head: plain masked-language modelling for the same steps (the ablation "
                   "that tells whether the head matters).")
@click.option("--freeze-backbone-steps", type=CountRange("freeze_backbone_steps"), default=0, show_default=True,
              help="Train only the new heads (Condenser head, MLM transform) for the first N steps, so a fresh "
                   "head's early gradients do not pull a warm backbone around.")
@click.option("--backbone-lr-scale", type=FiniteRange(min=0, min_open=True), default=1.0, show_default=True,
              help="The backbone learns at this times --learning-rate (the heads at the full rate).")
@temperature_option(1.0, "Softmax temperature of the --cocondenser span loss (coCondenser used 1; another value "
                        "needs --cocondenser)", ".")
@click.option("--max-length", type=CountRange("max_length"), default=128, show_default=True,
              help="Tokens per training sequence, [CLS] and [SEP] included; plain Condenser packs the corpus "
                   "into blocks of this length.")
@click.option("--mlm-probability", type=FiniteRange(0, 1, min_open=True, max_open=True), default=0.15,
              show_default=True, help="Share of tokens masked, whole words at a time (BERT 80/10/10 replacement).")
@renamed_option("--sequences-per-step", "--batch-size", type=CountRange("batch_size"), default=32, show_default=True,
                help="Sequences per optimizer step (with --cocondenser: an even N, N/2 passages x 2 spans; under "
                     "torchrun a multiple of 2 x processes and at least 4 x processes).")
@run_length_options("the corpus", None)
@optimizer_options(learning_rate=1e-4)
@click.option("--save-steps", type=CountRange("save_steps"), default=500, show_default=True,
              help="Checkpoint every N steps and at the run's end, and at each epoch's end unless --max-steps sets "
                   "the run's length (0 = only at epochs' ends).")
@click.option("--keep-checkpoints", type=CountRange("keep_checkpoints"), default=2, show_default=True,
              help="Newest checkpoints kept in OUTPUT/checkpoints while training (a finished run keeps none).")
@click.option("--seed", type=CountRange("seed"), default=42, show_default=True,
              help="Seed for head initialisation, data order, masking and dropout.")
@device_options()
@progress_option()
@report_to_option()
@ddp_timeout_option()
@corpus_options()
@json_option("the run's summary (model, steps, resumed_from_step, loss_start, loss_end, tokens_per_second (null "
             "when a rerun had no step left to train), seconds)")
def pretrain_command(corpus, model, output, n_head_layers, skip_from, cocondenser, objective, freeze_backbone_steps,
                     backbone_lr_scale, temperature, max_length,
                     mlm_probability, sequences_per_step, epochs, max_steps, learning_rate, warmup_ratio, weight_decay,
                     max_grad_norm, save_steps, keep_checkpoints, seed, device, dtype, progress, report_to, ddp_timeout,
                     fmt, id_field, text_field, title_field, as_json):
    """Condenser pre-training of a BERT on CORPUS (BEIR folder, JSONL, TSV, Parquet) into OUTPUT.

    The backbone learns masked-language modelling twice: from its own last layer, and through a
    small head that sees only the last layer's CLS plus the token states of --skip-from, which
    pushes passage meaning into CLS. Fine-tune OUTPUT with `retriever train --model OUTPUT`. Under
    `torchrun --nproc_per_node N -m retriever pretrain ...` each process takes --sequences-per-step/N sequences.

    \b
    Example:
      retriever pretrain ../shared/datasets/scifact --output models/condenser-scifact --max-steps 1000
    """
    from retriever.pretraining import PretrainConfig, pretrain
    from retriever.training.stack import is_main_process

    mark_resumable()  # from the last checkpoint
    stop_on_sigterm()  # a scheduler's stop (Slurm, Kubernetes) says so as Ctrl-C does
    config = PretrainConfig(
        corpus=str(corpus), output=str(output), model=model, corpus_format=fmt,
        corpus_fields=fields_from(id_field, text_field, title_field), n_head_layers=n_head_layers,
        skip_from=skip_from, cocondenser=cocondenser, objective=objective, freeze_backbone_steps=freeze_backbone_steps,
        backbone_lr_scale=backbone_lr_scale, temperature=temperature, max_length=max_length,
        mlm_probability=mlm_probability, batch_size=sequences_per_step, epochs=epochs, max_steps=max_steps,
        learning_rate=learning_rate, warmup_ratio=warmup_ratio, weight_decay=weight_decay,
        max_grad_norm=max_grad_norm or None, save_steps=save_steps or None, keep_checkpoints=keep_checkpoints,
        seed=seed, device=device, dtype=dtype, progress=progress, report_to=report_to,
        ddp_timeout=ddp_timeout)
    try:
        config.check_flag_combinations()
    except RetrieverError as error:  # a bad flag combination, as the README says
        raise click.UsageError(str(error), click.get_current_context()) from None
    result = pretrain(config)
    if not as_json or not is_main_process():
        return
    first, last = (result.history[0], result.history[-1]) if result.history else ({}, {})
    click.echo(json.dumps({"model": str(result.output), "steps": result.steps,
                           "resumed_from_step": result.resumed_from_step,
                           "loss_start": first.get("loss"), "loss_end": last.get("loss"),
                           "tokens_per_second": result.tokens_per_second and round(result.tokens_per_second, 1),
                           "seconds": round(result.seconds, 1)}))


COMMANDS = [pretrain_command]
