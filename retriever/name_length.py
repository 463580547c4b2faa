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
# The most the paths made in an output folder add to its path (NAME.shards/.embeddings-w000of001-00000.parquet.tmp-
# PID@HOST, an index folder's BM25 files)
INSIDE_PATH_BYTES = 100


def check_name_length(output: Path, flag: str, beside: int = BESIDE_NAME_BYTES, inside: int = 0) -> None:
    """Refuse a path the system cannot hold with ``beside`` bytes added for the names made beside it (a temporary
    file, a probe) and ``inside`` for the paths made in it (a folder's files): a name past the file system's limit,
    or the whole absolute path past the system's (ENAMETOOLONG, later, blamed 'a name in the path' where none was
    too long). Both failures came later, as a folder nothing could be created in, or a traceback."""
    existing = Path(os.path.abspath(output)).parent
    while not os.path.isdir(existing) and existing != existing.parent:  # is_dir raises past PATH_MAX
        existing = existing.parent
    added = max(beside, inside)
    whole, most = len(os.fsencode(os.path.abspath(output))), os.pathconf(existing, "PC_PATH_MAX") - 1
    if whole + added > most:
        made = "beside it" if beside >= inside else "in it"
        raise RetrieverError(f"the path is {whole} bytes long as an absolute path" + (f", and the names made {made} "
                             f"add up to {added} more" if added else "") + f"; the system takes paths of at most "
                             f"{most} bytes; choose a shorter {flag}")
    limit = os.pathconf(existing, "PC_NAME_MAX") - beside
    if len(os.fsencode(output.name)) > limit:
        raise RetrieverError(f"{output}: the name is {len(os.fsencode(output.name))} bytes long; the file system "
                             f"takes names of at most {limit + beside} bytes" + (f", and the names made beside it add up "
                             f"to {beside} more, so it may be at most {limit}" if beside else "")
                             + f"; choose a shorter {flag}")
