"""`--ray` for `encode`, `index` and `build`: its flags, their checks, and the encoder actors and Ray session it
starts (Ray, torch and FAISS are imported only when a command runs, not for its --help)."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import click

from retriever.choices import ONDISK_TYPE
from retriever.cli.options import compose, flags_given
from retriever.distributed.ray_capacity import check_local_cpus
from retriever.distributed.ray_runtime import ADDRESS_HELP, ray_session
from retriever.encoder_settings import EncoderSettings
from retriever.index_type_settings import ray_refusal

if TYPE_CHECKING:
    from retriever.faiss_index import IndexParams


def ray_options() -> Callable:
    """--ray and its worker flags; the encoder actors are made by retriever.distributed.ray_encoding, the
    ivf-ondisk part tasks by retriever.distributed.ray_parts."""
    return compose(
        click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
                     help=ADDRESS_HELP + " Encodes on Ray (encode, build) and fills ivf-ondisk parts as Ray tasks "
                                         "(index, build). Needs the [ray] extra."),
        click.option("--ray-workers", type=click.IntRange(min=1), default=None,
                     help="Encoder actors, and ivf-ondisk part tasks running at once, on Ray. [default: one actor "
                          "per GPU of the cluster, else its CPUs divided by --ray-cpus-per-worker]"),
        click.option("--ray-cpus-per-worker", type=click.IntRange(min=1), default=1, show_default=True,
                     help="CPU cores per encoder actor (torch threads) when the cluster has no GPU, and per "
                          "ivf-ondisk part task (FAISS threads)."),
    )


def check_ray_worker_flags(ray_address: str | None) -> None:
    """--ray-workers and --ray-cpus-per-worker without --ray, refused as usage errors: they were ignored in silence
    (one process encoded, or --parallel-parts processes filled the parts, exit 0)."""
    given = [] if ray_address is not None else flags_given(("ray_workers", "ray_cpus_per_worker"))
    if given:
        raise click.UsageError(f"{given[0]} is used only with --ray (it sizes Ray's workers), and this run does not "
                               "use Ray; add --ray or drop it")


def check_ray_flags(ray_address: str | None, index_type: str, parallel_parts: int | None, encodes: bool) -> None:
    """Flags --ray does not take, or that need it, refused as usage errors before any encoding (`build` encoded the
    whole corpus and only then refused --parallel-parts, with exit code 1), and before IndexParams refuses them."""
    check_ray_worker_flags(ray_address)
    if ray_address is None:
        return
    if parallel_parts is not None:
        raise click.UsageError("--parallel-parts sets worker processes on this machine; with --ray, parts are Ray "
                               "tasks: use --ray-workers and --ray-cpus-per-worker instead")
    if not encodes and index_type != ONDISK_TYPE:
        raise click.UsageError(ray_refusal("--ray", f"--index-type {ONDISK_TYPE}"))


def ray_part_settings(index_type: str, ray_address: str | None, ray_workers: int | None,
                      ray_cpus_per_worker: int) -> dict:
    """The Ray settings `build` gives IndexParams: for ivf-ondisk, whose parts are Ray tasks, and none for another
    type, which is built in one process (IndexParams refuses them there), its encoder actors alone on Ray."""
    if index_type != ONDISK_TYPE:
        return {}
    return {"ray_address": ray_address, "ray_workers": ray_workers, "ray_cpus_per_worker": ray_cpus_per_worker}


@contextlib.contextmanager
def passage_encoder(settings: EncoderSettings, device: str, dtype: str, batch_size: int, ray_address: str | None,
                    ray_workers: int | None, ray_cpus_per_worker: int) -> Iterator:
    """An Encoder in this process, or with --ray a pool of encoder actors that encode_corpus takes alike."""
    if ray_address is None:
        from retriever.encoder import Encoder

        yield Encoder(settings, device=device, dtype=dtype, batch_size=batch_size)
        return
    from retriever.distributed.ray_encoding import ray_encoder_pool

    with ray_encoder_pool(ray_address, settings, device, dtype, batch_size, ray_workers, ray_cpus_per_worker) as pool:
        yield pool


def ray_for_parts(params: IndexParams) -> contextlib.AbstractContextManager:
    """A Ray session held open across encoding and indexing when the index's parts are Ray tasks: IndexParams takes a
    ray_address for ivf-ondisk alone, and `build` gives it one only then (``ray_part_settings``)."""
    if params.ray_address is None:
        return contextlib.nullcontext()
    check_local_cpus(params.ray_address, params.ray_workers, params.ray_cpus_per_worker)  # the parts' CPUs
    return ray_session(params.ray_address)
