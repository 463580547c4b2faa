import subprocess
import sys
from importlib.metadata import version

# Registered before the CLI is imported, so atexit runs it after every handler the CLI and its libraries register.
LAST_AT_EXIT = ("import atexit, gc, sys\n"
                "atexit.register(lambda: print(f'frozen={gc.get_freeze_count() > 0}', file=sys.stderr))\n"
                "from retriever.cli import main\n"
                "atexit.register(lambda: print('later handler ran', file=sys.stderr))\n"
                "main()\n")


def _run(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LAST_AT_EXIT, *arguments], capture_output=True, text=True,
                          timeout=120)


def test_the_interpreters_final_collections_are_skipped_and_the_rest_of_the_exit_kept():
    """A command went on for a second or more after its output while Python's final garbage collections walked
    torch's and transformers' objects; what is alive at exit is frozen out of them now, after every other atexit
    handler (a torchrun process leaving its group registers one later), with the output and exit status kept."""
    result = _run("--version")
    assert result.returncode == 0 and result.stdout.endswith(f", version {version('retriever')}\n"), result.stderr
    assert result.stderr.splitlines() == ["later handler ran", "frozen=True"], result.stderr
    usage = _run("serch")
    assert usage.returncode == 2 and usage.stderr.splitlines()[-1] == "frozen=True", usage.stderr
