"""Names that carry their writer's pid and host (``retriever/pid_names.py``)."""
from __future__ import annotations

import os
import socket

from retriever.name_length import BESIDE_NAME_BYTES
from retriever.pid_names import HOST_CHARS, Writer, host_tag, left_by_dead_processes, writer_name, writer_of

LONGEST_PID = 4194304  # Linux's highest pid_max


def test_a_long_or_dotted_host_is_cut_and_hashed_so_names_stay_short_and_apart():
    """A host name of 64 characters (its limit) would have pushed names past the room left for them beside an output;
    a dot would have ended a temporary in a file suffix."""
    short, dotted = host_tag("node-7"), host_tag("node1.lab.example")
    first, second = host_tag("compute-" + "a" * 56), host_tag("compute-" + "a" * 55 + "b")
    assert short == "node-7" and "." not in dotted and dotted.startswith("node1-lab-e~")
    assert first != second and first.startswith("compute-aaa~") and len(first) == len(second) == HOST_CHARS
    longest = f".building-{LONGEST_PID}@{first}"  # the longest kind a name adds beside an output
    assert 1 + len(longest) <= BESIDE_NAME_BYTES
    assert writer_of(longest.partition("building-")[2]) == Writer(LONGEST_PID, first)


def test_a_name_without_a_host_is_this_hosts_and_one_of_another_host_is_never_judged(tmp_path, monkeypatch):
    """Names of earlier versions (a pid alone) are still cleaned when their process is gone; another host's are
    kept whatever its pid does here."""
    monkeypatch.setattr(socket, "gethostname", lambda: "node-a")
    assert writer_name() == f"{os.getpid()}@node-a"
    gone = LONGEST_PID + 1  # above any pid_max: no such process here
    names = [f".x.tmp-{gone}", f".x.tmp-{gone}@node-a", f".x.tmp-{gone}@node-b", f".x.tmp-{os.getpid()}@node-a",
             ".x.tmp-notapid"]
    for name in names:
        (tmp_path / name).write_text("partly written")
    assert [path.name for path in left_by_dead_processes(tmp_path, ".x.tmp-")] == names[:2]
    assert writer_of(f"{gone}@node-b").elsewhere and writer_of(f"{gone}@node.b") is None
