"""Command lines run in Python processes of their own: many CLI runs in one process (commands_in_one_process), and a
process started early with its heavy imports done, held until a test needs it (warmed_process)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Runs each [cwd, arguments] of argv[1] (JSON) through the CLI in turn, in one process, ending each command's
# standard error with '== EXIT_CODE [heavy libraries imported so far]'; a crash prints its traceback first.
_COMMANDS_IN_ONE_PROCESS = """
import json, os, sys, traceback
from retriever.cli import main
for cwd, arguments in json.loads(sys.argv[1]):
    os.chdir(cwd)
    try:
        main(arguments, prog_name="retriever")
        code = 0
    except SystemExit as exit:
        code = 0 if exit.code is None else exit.code
    except BaseException:
        traceback.print_exc()
        code = "crashed"
    imported = sorted(name for name in ("faiss", "ray", "torch", "transformers") if name in sys.modules)
    print(f"== {code} {json.dumps(imported)}", file=sys.stderr, flush=True)
"""


def commands_in_one_process(runs: list[tuple[Path, list[str]]]) -> list[tuple[int | str, list[str], list[str]]]:
    """Each command line (run in its folder) as (exit code, its lines of standard error, which of FAISS, Ray, torch
    and transformers were imported once it ended), from one process: a launch per command line cost seconds of imports each. A library
    once imported stays imported, so a command's list covers the commands before it."""
    result = subprocess.run([sys.executable, "-c", _COMMANDS_IN_ONE_PROCESS,
                             json.dumps([[str(cwd), arguments] for cwd, arguments in runs])],
                            capture_output=True, text=True, timeout=600)
    answers, lines = [], []
    for line in result.stderr.splitlines():
        if line.startswith("== "):
            code, imported = line[3:].split(" ", 1)
            answers.append((int(code) if code.lstrip("-").isdigit() else code, lines, json.loads(imported)))
            lines = []
        else:
            lines.append(line)
    assert result.returncode == 0 and len(answers) == len(runs) and not lines, result.stderr
    return answers


# Imports what a CLI run spends its first seconds on, then waits for a line on standard input before running the code
# after it (a process started early, for a test that needs it only later)
_WARMED_PRELUDE = """
import sys
import faiss, torch
from transformers import AutoModel, AutoTokenizer
sys.stdin.readline()
"""


def warmed_process(code: str, arguments: list[str], **popen):
    """``python -c CODE ARGUMENTS``, with torch, transformers and FAISS imported and the process then held until a
    line comes on its standard input (``communicate("go\\n")``, or bytes): started while an earlier process of the
    test runs, its seconds of imports overlap that one's instead of adding to the test's time."""
    return subprocess.Popen([sys.executable, "-c", _WARMED_PRELUDE + code, *arguments], stdin=subprocess.PIPE, **popen)
