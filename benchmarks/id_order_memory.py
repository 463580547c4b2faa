"""Memory and time of writing ids.sorted.arrow: the external sort (`retriever.id_order`) against the
in-memory sort it replaced, on a mapped doc store of N shuffled ids.

Each run is a fresh process that samples its own RssAnon (procmem.PeakSampler) from just before the
sort to its end, so the figure is the sort's own anonymous memory over the process's base; the two
methods alternate, and the files they write are compared byte for byte.

    python benchmarks/id_order_memory.py --ids 6000000 --repeats 2
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import stamp  # noqa: E402
from procmem import PeakSampler, status  # noqa: E402

from retriever.docstore import DOCSTORE_SCHEMA, open_mapped  # noqa: E402
from retriever.id_order import RUN_ROWS, write_id_order  # noqa: E402


def write_docstore(path: Path, count: int) -> None:
    """``count`` ids like ``s000001234`` in shuffled order, empty titles and texts, 50,000 rows a batch."""
    order = np.random.default_rng(0).permutation(count)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, DOCSTORE_SCHEMA) as writer:
        for start in range(0, count, 50_000):
            ids = [f"s{row:09d}" for row in order[start:start + 50_000]]
            writer.write_table(pa.table({"id": ids, "title": [""] * len(ids), "text": [""] * len(ids)},
                                        schema=DOCSTORE_SCHEMA))


def in_memory_sort(docstore: Path, target: Path) -> None:
    """The former ``write_id_order``: the whole id column and its sort order in memory."""
    ids = open_mapped(docstore).read_all().column("id")
    order = pc.sort_indices(ids)
    batch = pa.record_batch({"id": ids.take(order).combine_chunks(), "row": order.cast(pa.int64())})
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def child(method: str, docstore: Path, target: Path) -> None:
    base = status(os.getpid()).get("RssAnon", 0)
    started = time.perf_counter()
    with PeakSampler(os.getpid(), interval=0.01) as sampler:
        if method == "external":
            write_id_order(open_mapped(docstore), target)
        else:
            in_memory_sort(docstore, target)
    print(json.dumps({"seconds": time.perf_counter() - started, "base": base,
                      "peak": sampler.summary()["peak_rss_anon"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=6_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", nargs=3, metavar=("METHOD", "DOCSTORE", "TARGET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return
    print(stamp())
    print(f"{args.ids:,} ids, external sort runs of {RUN_ROWS:,}; peak RssAnon of the sort over the process's base")
    with tempfile.TemporaryDirectory() as folder:
        docstore = Path(folder) / "docstore.arrow"
        write_docstore(docstore, args.ids)
        for repeat in range(args.repeats):
            for method in ("in-memory", "external"):
                target = Path(folder) / f"{method}.arrow"
                line = subprocess.run([sys.executable, __file__, "--child", method, str(docstore), str(target)],
                                      check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
                result = json.loads(line)
                print(f"{method:>9}: +{(result['peak'] - result['base']) / 2**20:6.0f} MiB RssAnon, "
                      f"{result['seconds']:5.1f} s")
        same = (Path(folder) / "external.arrow").read_bytes() == (Path(folder) / "in-memory.arrow").read_bytes()
        print(f"files byte-identical: {same}")


if __name__ == "__main__":
    main()
