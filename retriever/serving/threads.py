"""Thread pools of a server's batcher workers (and of a batch search): torch's and FAISS's, sized for the cores."""
from __future__ import annotations

import faiss
import torch

from retriever.cores import usable_cores
from retriever.wording import counted


def configure_threads(threads: int | None = None, workers: int | None = None) -> dict:
    """Size the batcher workers and torch's and FAISS's thread pools for this machine.

    Defaults: two batcher workers (one on a single core), and per worker the cores this process may use, less one
    for the event loop that parses requests and writes JSON, shared out (at least one each). Two single-threaded
    workers beat one two-threaded worker on 2 cores (measured in benchmarks/README.md), because OpenMP's barriers
    stall whenever one of a forward's threads is descheduled by the event loop, while two independent forwards just
    interleave. Inter-op parallelism is off (one small graph at a time). FAISS gets one OpenMP thread: a flat search
    over a micro-batch takes well under a millisecond, and a second spinning pool would steal the encoder's cores.
    """
    cores = usable_cores()
    workers = workers or (2 if cores >= 2 else 1)
    threads = max(1, threads or (cores - 1) // workers)
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once parallel work ran; harmless
        pass
    faiss.omp_set_num_threads(1)
    return {"torch": threads, "workers": workers, "faiss": 1, "cores": cores}


def oversubscription_warning(used: dict) -> str | None:
    """A warning where the workers' torch threads outnumber the cores (the defaults never do): threads past the cores
    only wait on one another at OpenMP's barriers, so each search is slower, many times so for hundreds of threads.
    ``used`` is what ``configure_threads`` returned: its cores are the ones it shared out, counted once."""
    cores, total = used["cores"], used["workers"] * used["torch"]
    if total <= cores:
        return None
    return (f"warning: {counted(used['workers'], 'worker')} x {counted(used['torch'], 'torch thread')} is {total} "
            f"threads for the {cores} cores this process may use: threads past the cores wait on one another and slow "
            "every search (without --threads and --workers serve shares the cores out)")
