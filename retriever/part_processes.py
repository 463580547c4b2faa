"""The worker processes that fill an ivf-ondisk build's parts on this machine (``--parallel-parts``; Ray tasks with
``--ray`` are ``distributed.ray_parts``'s), and the one that merges a large build's parts: spawned, dying with the
build, stopped by its Ctrl-C."""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress

from retriever.cores import usable_cores
from retriever.errors import RetrieverError
from retriever.ivfparts import fill_part

_PR_SET_PDEATHSIG = 1


def fill_in_processes(jobs: list[tuple], workers: int, finished: Callable[[], None]) -> None:
    """``fill_part`` for each job in ``workers`` processes (here, for one), each with its share of the cores."""
    threads = max(1, usable_cores() // workers)
    if workers == 1:
        for job in jobs:
            fill_part(*job, threads)
            finished()
        return
    with spawned_pool(workers, "a part worker died (killed, or out of memory?) while filling parts; rerun the same "
                      "command to resume (finished parts are kept), or lower --part-size / --parallel-parts") as pool:
        with _starting_workers():
            futures = [pool.submit(fill_part, *job, threads, workers) for job in jobs]
        for future in as_completed(futures):
            future.result()
            finished()


def in_a_process(function: Callable, *args, died: str):
    """``function(*args)`` in a worker process, so that Ctrl-C stops it at once: a long FAISS call in this process
    holds Ctrl-C back until it returns. ``died`` is the error when the process dies."""
    with spawned_pool(1, died) as pool:
        with _starting_workers():
            future = pool.submit(function, *args)
        return future.result()


@contextmanager
def spawned_pool(workers: int, died: str) -> Iterator[ProcessPoolExecutor]:
    """Worker processes that die with this one and leave Ctrl-C to it (``die_with_parent``): on Ctrl-C they are
    stopped at once, and one that dies is the one-line error ``died``."""
    # spawn, not fork: a forked child of a process that already ran OpenMP (training) can hang.
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=die_with_parent,
                               initargs=(os.getpid(),))
    try:
        yield pool
    except KeyboardInterrupt:  # shutdown would wait for every running job to be finished: minutes, for large ones
        _stop_workers(pool)
        raise
    except BrokenProcessPool:  # a worker was killed (the OOM killer, a user): its work cannot be finished here
        raise RetrieverError(died) from None
    finally:
        pool.shutdown(cancel_futures=True)  # on a failure, jobs not started yet are not run for nothing


@contextmanager
def _starting_workers() -> Iterator[None]:
    """While a pool starts its processes (on submit): Ctrl-C held, as it is the build's (die_with_parent), and the main
    script hidden, so that they do not run it again (``_main_script_hidden``)."""
    with _interrupts_held(), _main_script_hidden():
        yield


@contextmanager
def _main_script_hidden() -> Iterator[None]:
    """A spawned process imports the parent's main module before its work, so a library script without
    `if __name__ == "__main__":` ran its whole build again in each worker ('another build of it is running', then 'a
    part worker died'). The workers run retriever's functions alone, so they are started without it."""
    main = sys.modules.get("__main__")
    held = vars(main) if main is not None else {}
    saved = {name: held[name] for name in ("__file__", "__spec__") if name in held}
    for name in saved:
        setattr(main, name, None) if name == "__spec__" else delattr(main, name)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(main, name, value)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT held back in this thread meanwhile: the processes it starts inherit that, so Ctrl-C cannot strike one
    while it imports (it printed the CLI's 'interrupted while starting; nothing was done', or broke the pool); held
    here, it comes when this ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers now, as Python 3.14's ``terminate_workers`` does; a part they leave unfinished is a
    dead process's temporary, which the next build deletes."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with suppress(OSError):
            process.terminate()


def die_with_parent(parent: int) -> None:
    """A part worker's initializer: exit when the build that started it dies. A killed parent (SIGKILL, OOM)
    cannot stop its pool, and the workers would otherwise wait for work, or keep filling parts, for ever.
    Linux kills the worker with the parent (``PR_SET_PDEATHSIG``); elsewhere a thread watches the parent id.
    Ctrl-C, which reaches every process of the terminal's group, is ignored: the build answers it and stops them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # held since it started (_interrupts_held): one that came is dropped
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (AttributeError, OSError):
            pass
    if os.getppid() != parent:  # died before the request above: nothing will signal it now
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="watch-parent").start()


def _watch_parent(parent: int, every: float = 1.0) -> None:
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)
