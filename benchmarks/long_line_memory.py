"""Peak memory of `retriever encode` on a corpus holding one huge single-line document (issue #10 item 4).

Writes a JSONL corpus with a few short documents and one of --megabytes MB on one line, runs
`retriever encode` on it under /usr/bin/time -v in a fresh process, and prints the child's peak RSS
(maximum resident set size) against the --limit-mb target; exits 1 if the target is missed.

    python benchmarks/long_line_memory.py --megabytes 50 --limit-mb 1024
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import stamp  # noqa: E402

WORDS = "the cat sat on a mat by the river while rain fell over old stone bridges and quiet fields".split()


def write_corpus(path: Path, megabytes: int) -> None:
    rng = random.Random(0)
    chunk = " ".join(rng.choice(WORDS) for _ in range(20_000)) + " "
    repeats = megabytes * 2**20 // len(chunk) + 1
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(3):
            handle.write(json.dumps({"_id": f"short{i}", "text": " ".join(rng.choice(WORDS) for _ in range(30))}) + "\n")
        handle.write('{"_id": "huge", "text": "' + chunk * repeats + '"}\n')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=50)
    parser.add_argument("--limit-mb", type=int, default=1024)
    parser.add_argument("--model", default="minilm")
    args = parser.parse_args()
    print(stamp())
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus.jsonl"
        write_corpus(corpus, args.megabytes)
        size = corpus.stat().st_size
        command = ["/usr/bin/time", "-v", sys.executable, "-m", "retriever", "encode", str(corpus), "--output",
                   str(Path(folder) / "shards"), "--model", args.model, "--device", "cpu"]
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"encode failed:\n{result.stderr[-2000:]}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr).group(1))
    peak_mb = peak_kb / 1024
    verdict = "OK" if peak_mb < args.limit_mb else "OVER"
    print(f"corpus: {size / 2**20:.1f} MiB, one line of {args.megabytes} MB plus 3 short documents; model {args.model}")
    print(f"peak RSS of `retriever encode`: {peak_mb:.0f} MiB (target < {args.limit_mb} MiB: {verdict}); "
          f"wall {seconds:.1f} s")
    sys.exit(0 if verdict == "OK" else 1)


if __name__ == "__main__":
    main()
