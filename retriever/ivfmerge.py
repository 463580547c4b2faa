"""Merging an ivf-ondisk build's parts into one ``index.ivfdata`` file (as FAISS's ``merge_ondisk``), and keeping
FAISS's notes off the stdout ``search`` writes to while it works."""
from __future__ import annotations

import ctypes
import math
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import faiss
from tqdm import tqdm

from retriever.errors import OUT_OF_SPACE_HINT, MachineLimit
from retriever.part_processes import in_a_process
from retriever.wording import size_text

# Parts smaller than this are merged in this process: they take a fraction of a second, less than starting a process
IN_PROCESS_BYTES = 256 * 2**20


@contextmanager
def faiss_notes_silenced(heard: Callable[[str], None] | None = None) -> Iterator[None]:
    """FAISS's on-disk lists print notes (which file they map) on the C stdout, where `search` writes its
    results; they tell a user nothing they need, and FAISS reports failures by exception, not there. ``heard`` is
    given that text as it comes (a merge's progress), else it goes to /dev/null."""
    sys.stdout.flush()
    saved, relay = os.dup(1), None
    if heard is None:
        sink = os.open(os.devnull, os.O_WRONLY)
    else:  # FAISS releases the GIL while it works, so the relay keeps the pipe from filling up
        source, sink = os.pipe()
        relay = threading.Thread(target=_relay, args=(source, heard), daemon=True, name="faiss-stdout")
        relay.start()
    os.dup2(sink, 1)
    os.close(sink)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)  # what C stdio still holds goes where it was written, not to our stdout
        os.dup2(saved, 1)
        os.close(saved)
        if relay is not None:
            relay.join()  # the pipe's last writer is closed: the relay reads to its end


def _relay(source: int, heard: Callable[[str], None]) -> None:
    with os.fdopen(source, "rb") as pipe:
        for chunk in iter(lambda: pipe.read1(1 << 12), b""):
            heard(chunk.decode("utf-8", "replace"))


def merge_parts(trained: Path, parts: list[str], ivfdata: Path, progress: bool = True) -> faiss.Index:
    """One index whose inverted lists are the parts' lists merged into the ``ivfdata`` file.

    The result is final: adding to merged on-disk lists corrupts them (FAISS 1.15's merge leaves the
    free-space map behind), so vectors held out for tuning are merged in a second time instead. Parts of
    ``IN_PROCESS_BYTES`` or more are merged in a worker process, which Ctrl-C stops at once: FAISS's merge is one
    C++ call, and in this process Ctrl-C waited for its end (minutes, for a large index).
    """
    size = sum(Path(part).stat().st_size for part in parts)
    check_space(ivfdata, size)
    if size < IN_PROCESS_BYTES:
        return merged_index(str(trained), parts, str(ivfdata), progress)
    written = ivfdata.with_name(f"{ivfdata.name}.faiss")
    in_a_process(write_merged, str(trained), parts, str(ivfdata), str(written), progress, died=(
        f"the process merging the parts into {ivfdata.name} died (killed, or out of memory?); rerun the same command "
        "to resume (finished parts are kept)"))
    with faiss_notes_silenced():
        index = faiss.read_index(str(written), faiss.IO_FLAG_ONDISK_SAME_DIR)
    os.remove(written)
    return index


def merged_index(trained: str, parts: list[str], ivfdata: str, progress: bool) -> faiss.Index:
    """The trained index with the parts' lists merged into ``ivfdata``, under a bar that follows FAISS's notes."""
    index = faiss.read_index(trained)
    ivf = faiss.extract_index_ivf(index)
    with tqdm(total=ivf.nlist, desc="merge lists", unit="list", file=sys.stderr, disable=not progress) as bar:
        with faiss_notes_silenced(lambda text: bar.update(max(0, merged_lists(text, bar.n) - bar.n))):
            merged = faiss.OnDiskInvertedLists(ivf.nlist, ivf.code_size, ivfdata)
            vector = faiss.InvertedListsPtrVector()
            for part in parts:  # mapped, not read: the parts together may exceed the memory
                part_index = faiss.read_index(part, faiss.IO_FLAG_MMAP)  # held until its lists are let go
                part_ivf = faiss.extract_index_ivf(part_index)
                part_ivf.own_invlists = False  # the lists outlive their index, as in FAISS's merge_ondisk
                vector.push_back(part_ivf.invlists)
            index.ntotal = ivf.ntotal = merged.merge_from_multiple(vector.data(), vector.size(), False, True)
        bar.update(bar.total - bar.n)
    ivf.replace_invlists(merged, True)
    merged.this.disown()
    return index


def write_merged(trained: str, parts: list[str], ivfdata: str, output: str, progress: bool) -> None:
    """A worker process's merge (its bar on the stderr it shares): the merged index is written to ``output``,
    naming its lists' file bare (it lies beside), for the build to read back."""
    index = merged_index(trained, parts, ivfdata, progress)
    faiss.downcast_InvertedLists(faiss.extract_index_ivf(index).invlists).filename = Path(ivfdata).name
    faiss.write_index(index, output)


def merged_lists(text: str, before: int) -> int:
    """How many lists FAISS's verbose merge says it has merged (its 'merged N lists in T s' lines), else ``before``."""
    counts = re.findall(r"merged (\d+) lists", text)
    return int(counts[-1]) if counts else before


def check_space(ivfdata: Path, needed: int) -> None:
    """Refuse a merge the disk cannot hold: FAISS sizes the file first and then writes through a memory map,
    so running out of space midway kills the process with SIGBUS and no message. The parts' files hold the
    lists' codes and ids plus a little, so their total bounds the merged file."""
    free = shutil.disk_usage(ivfdata.parent).free
    if free < needed:  # named by the folder beside the output's: the one it is built in is hidden
        raise MachineLimit(f"{ivfdata.parent.parent}: {size_text(needed, math.ceil)} are needed for {ivfdata.name} "
                           f"and {size_text(free, math.floor)} are free on its file system; {OUT_OF_SPACE_HINT}")
