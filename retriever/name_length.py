"""The longest file name an output may have: the file system's limit less what the names made beside it add.

Its own module because both ``files`` (atomic writes, whose temporary adds a suffix) and ``folders`` (which
imports ``files``) refuse a name that is too long, with one message.
"""
from __future__ import annotations

import os
from pathlib import Path

from retriever.errors import RetrieverError

# The most a name made beside an output adds to it (.NAME.building-PID@HOST, .NAME.probe-PID-THREAD, .NAME.tmp-PID@HOST:
# a pid of up to 7 digits, a host of up to pid_names.HOST_CHARS)
BESIDE_NAME_BYTES = 40


def check_name_length(output: Path, flag: str, beside: int = BESIDE_NAME_BYTES) -> None:
    """Refuse a name the file system cannot hold with ``beside`` bytes added for the names made beside it (a
    temporary file, a probe): the failure came later, as a folder nothing could be created in, or a traceback."""
    existing = Path(os.path.abspath(output)).parent
    while not existing.is_dir() and existing != existing.parent:
        existing = existing.parent
    limit = os.pathconf(existing, "PC_NAME_MAX") - beside
    if len(os.fsencode(output.name)) > limit:
        raise RetrieverError(f"{output}: the name is {len(os.fsencode(output.name))} bytes long; the file system "
                             f"takes names of at most {limit + beside} bytes" + (f", and the names made beside it add up "
                             f"to {beside} more, so it may be at most {limit}" if beside else "")
                             + f"; choose a shorter {flag}")
