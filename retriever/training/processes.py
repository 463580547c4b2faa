"""Which process of a torchrun launch this is, and telling a dead peer from a bug.

When one process of a launch dies (killed, out of memory, a lost machine), the others fail in
their next collective with a backend error ("Connection closed by peer" from gloo, an NCCL
error); that is no bug of theirs, and the run resumes from its last checkpoint when rerun. A process
stopped or hung, not dead, fails them only after --ddp-timeout, with a timeout they report as such.
"""
from __future__ import annotations

import atexit
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta

import torch
import torch.distributed as dist
from tqdm import tqdm

from retriever.choices import DDP_TIMEOUT
from retriever.errors import RetrieverError
from retriever.wording import agree

# gloo reports a lost peer as a plain RuntimeError; these mark its transport failures
PEER_MARKERS = ("gloo/transport/", "Connection closed by peer", "Connection reset by peer")
KEY_NAMES = {"inputs_sha256": "fingerprint of the data files and start model",  # how a compared key is named
             "model_files_sha256": "fingerprint of the start model's tokenizer and config files"}
_SOURCE_PREFIX = re.compile(r"^\[[^\]]*\]\s*")  # "[.../pair.cc:553] " before gloo's message
TORCHRUN_VARIABLES = ("RANK", "MASTER_ADDR", "MASTER_PORT")  # what env:// reads beside WORLD_SIZE; torchrun sets them
REFUSAL_KEY = "refusal"  # the line a process stopped with, in the launch's store
REFUSAL_LOOKUP_SECONDS = 5  # a live store answers it at once
_STORE: list[dist.Store] = []  # the launch's store, under this attempt's prefix, once this process joined
_TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)  # gloo's "Timed out waiting", NCCL's watchdog timeout
_REFUSED = re.compile(r"connection refused", re.IGNORECASE)  # gloo's "timed out connecting: ... refused": none listens


class PeerDied(RetrieverError):
    """Another process of the launch died; every surviving process reports it (it may be rank 0 that died)."""

    every_process = True


def is_main_process() -> bool:
    """The launch's first process (or a process started without torchrun): the one that speaks for the launch."""
    return int(os.environ.get("RANK", "0")) == 0


def log(message: str) -> None:
    """One line on stderr from the first process only (each process reads the same data and runs the same steps, and
    every one of them printed it), written past any progress bar without breaking it."""
    if is_main_process():
        tqdm.write(message, file=sys.stderr)


def launched_processes() -> int:
    """Processes of this launch as torchrun tells them (1 without torchrun), known before any group exists."""
    size = os.environ.get("WORLD_SIZE", "1")
    if not size.strip().isdigit() or int(size) < 1:  # it was a ValueError traceback
        raise RetrieverError(f"WORLD_SIZE is {size!r} in the environment, not a process count; unset it to run in "
                             "one process, or launch with torchrun --nproc_per_node N -m retriever ...")
    return int(size)


def check_launch_environment() -> None:
    """A WORLD_SIZE over 1 comes with what torchrun sets beside it (`TORCHRUN_VARIABLES`). Set alone (a leftover
    export, a scheduler's environment), torch's env:// rendezvous failed with a ValueError traceback ("environment
    variable RANK expected, but not set") once the model and data had loaded."""
    missing = [name for name in TORCHRUN_VARIABLES if not os.environ.get(name)]
    if missing and (processes := launched_processes()) > 1:
        named = ", ".join(missing[:-1]) + " and " + missing[-1] if len(missing) > 1 else missing[0]
        raise RetrieverError(f"WORLD_SIZE is {processes} in the environment, but {named} "
                             f"{agree(len(missing), 'is', 'are')} not, so this is no torchrun launch: start it with "
                             "torchrun --nproc_per_node N -m retriever ..., or unset WORLD_SIZE to run in one process")


def join_process_group(device: torch.device, timeout_seconds: int = DDP_TIMEOUT) -> str | None:
    """The backend of this launch's process group (None for one process), started here unless it is, with
    ``timeout_seconds`` for a collective to wait for the others: the Trainer passes its ddp_timeout on GPUs only,
    so on CPU a stopped (not dead) process held the others for torch's default whatever --ddp-timeout said. A peer that
    stops before it joins (on another machine, whose launcher held the group's store) fails the join in one line, as in
    a collective: it was a DistNetworkError traceback."""
    if launched_processes() < 2:
        return None
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":  # each process on its own GPU before NCCL's first collective, as the Trainer sets later
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        with peer_deaths_reported(timeout_seconds):  # a peer gone before joining (a refusal, a kill), its store with it
            store, rank, processes = _this_attempts_store(timeout_seconds)
            dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_seconds), store=store,
                                    rank=rank, world_size=processes)
        _STORE[:] = [store]
        atexit.register(leave_process_group)
    return backend


def _this_attempts_store(timeout_seconds: int) -> tuple[dist.Store, int, int]:
    """The launch's store under a key prefix of this torchrun attempt, this process's rank and the process count.
    After a restart (--max-restarts) the launcher keeps one store, where the lost attempt's processes left their
    addresses, and the restarted ones read those (connection refused, or a hang), so the restart failed."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    store, rank, processes = next(dist.rendezvous("env://", timeout=timedelta(seconds=timeout_seconds)))
    return dist.PrefixStore(f"retriever-attempt-{attempt}", store), rank, processes


@contextmanager
def refusals_shared() -> Iterator[None]:
    """Around a run: a process that stops with an error of its own (the first, writing the model, on a full disk)
    leaves its line in the launch's store, so the others, losing it, stop with that line instead of saying that a
    process died and that a rerun resumes (two error lines, the second misleading)."""
    try:
        yield
    except RetrieverError as error:
        if _STORE and not isinstance(error, PeerDied) and dist.is_initialized():
            with suppress(Exception):  # the store may be gone with the launcher
                _STORE[0].set(REFUSAL_KEY, str(error))
        raise


def _refusal_elsewhere() -> str | None:
    """The line another process of this attempt stopped with, if it left one (`refusals_shared`). A store whose host
    is stopped, not dead (its machine's launcher suspended), never answers, and torch's store calls wait for it
    without bound: after a --ddp-timeout the lookup held the process for ever. So it gets REFUSAL_LOOKUP_SECONDS in a
    thread of its own, left blocked if it must be (the process is stopping)."""
    found: list[str | None] = []
    lookup = threading.Thread(target=lambda: found.append(_stored_refusal()), daemon=True, name="refusal lookup")
    lookup.start()
    lookup.join(REFUSAL_LOOKUP_SECONDS)
    return found[0] if found else None


def _stored_refusal() -> str | None:
    try:
        return _STORE[0].get(REFUSAL_KEY).decode() if _STORE and _STORE[0].check([REFUSAL_KEY]) else None
    except Exception:  # the store gone with the process that held it
        return None


def leave_process_group() -> None:
    """At exit, before the interpreter finalises, the group this process joined is torn down (its worker threads
    joined). Left to finalisation, a gloo worker still freeing a finished collective's tensors (a refusal raised right
    after ``all_gather_object``) could not take the interpreter lock and aborted the process: SIGABRT, "terminate
    called without an active exception", after a run that had ended."""
    if dist.is_initialized():
        dist.destroy_process_group()


def is_peer_failure(error: BaseException) -> bool:
    """Whether ``error`` is a failed collective of a distributed run (a communication error, not a bug)."""
    if launched_processes() < 2 or not isinstance(error, RuntimeError):
        return False
    return isinstance(error, dist.DistError) or any(marker in str(error) for marker in PEER_MARKERS)


def peer_died(error: BaseException, timeout_seconds: int) -> PeerDied:
    """The one-line error a surviving process stops with. A timeout does not say the peer died: a stopped or hung
    one times out alike (``timeout_seconds``, the group's --ddp-timeout)."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    cause = _SOURCE_PREFIX.sub("", lines[0]).split(". ")[0].rstrip(".")
    what = (f"did not answer within --ddp-timeout {timeout_seconds} s (stopped, hung or died: {cause})"
            if _TIMED_OUT.search(cause) and not _REFUSED.search(cause) else f"died ({cause})")
    return PeerDied(f"another training process {what}; {_what_next()}")


def _what_next() -> str:
    """What follows a lost peer: torchrun started with --max-restarts restarts every process itself (its workers are
    told the restarts made and allowed), and they resume from the last checkpoint; the line told to rerun by hand."""
    made = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    allowed = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    if made < allowed:
        return (f"torchrun restarts the processes (restart {made + 1} of --max-restarts {allowed}) and they resume "
                "from the last checkpoint")
    return "rerun the same command to resume from the last checkpoint"


def average_gradients(parameters: Iterable[torch.nn.Parameter]) -> None:
    """What DDP does after a backward pass, for a step run past its hooks (GradCache's chunks, pretrain's frozen
    steps): each gradient becomes its mean over the processes. Every process must hold gradients for the same
    parameters, as DDP assumes too."""
    if not dist.is_initialized() or dist.get_world_size() < 2:
        return
    for parameter in parameters:
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad)
            parameter.grad /= dist.get_world_size()


def summed_over_processes(values: dict[str, torch.Tensor]) -> dict[str, float]:
    """Each value summed over the processes, every one calling with the same keys: what a process adds up alone is
    its own slice's, where the Trainer's logged loss is the launch's."""
    if not values:
        return {}
    stacked = torch.stack([value.detach().float() for value in values.values()])
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(stacked)
    return dict(zip(values, stacked.tolist()))


@contextmanager
def peer_deaths_reported(timeout_seconds: int) -> Iterator[None]:
    """Around collectives of a group waiting ``timeout_seconds``: another process's death (or silence past the
    timeout) becomes ``PeerDied``; any other error passes unchanged."""
    try:
        yield
    except RuntimeError as error:
        if not is_peer_failure(error):
            raise
        refusal = _refusal_elsewhere()
        if refusal is not None:  # said by the process that refused, printed once a machine
            raise RetrieverError(refusal) from None
        raise peer_died(error, timeout_seconds) from None


def check_same_run_everywhere(record: dict, timeout_seconds: int) -> None:
    """Every process must run the same settings on the same data from the same checkpoint: each compares its
    ``record`` with the first process's, so all stop with the same line. Nothing compared them, and a process
    given another --learning-rate, data file or OUTPUT trained on with exit 0, averaging its gradients into the
    model the first process saved."""
    if launched_processes() < 2 or not dist.is_initialized():
        return
    records: list[dict | None] = [None] * dist.get_world_size()
    with peer_deaths_reported(timeout_seconds):
        dist.all_gather_object(records, record)
    for rank, other in enumerate(records):
        differing = [f"{KEY_NAMES.get(key, key)} {records[0].get(key)!r} in process 0, {other.get(key)!r} in {rank}"
                     for key in sorted({*records[0], *other}) if records[0].get(key) != other.get(key)]
        if differing:
            raise RetrieverError(f"process {rank} of the launch runs another training than process 0 "
                                 f"({'; '.join(differing)}); start every process with the same command, data files "
                                 "and --output")
