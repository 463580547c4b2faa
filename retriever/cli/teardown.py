"""The end of a `retriever` process: the interpreter's last garbage collections are skipped, nothing else is.

After its atexit handlers, Python unloads every module and runs full garbage collections over every object still
alive. After a command that loaded torch and transformers (thousands of modules, hundreds of thousands of objects)
those collections were most of the second or more the process went on for after its output was complete. The
objects alive then are frozen instead (``gc.freeze``): they are still freed as the modules unload, by reference
counting; only the reference cycles among them are left to the operating system, as ``os._exit`` would leave
everything. The rest of an exit is unchanged: every other atexit handler (a torchrun process leaving its process
group), standard output and error flushed, the exit status.
"""
from __future__ import annotations

import atexit
import gc


def freeze_what_is_left() -> None:
    """Objects alive at exit out of the interpreter's final collections; they are not garbage a process keeps."""
    gc.freeze()


def skip_final_collections() -> None:
    """Called when the CLI is imported, before any library it uses registers its own atexit handlers: atexit runs
    handlers last-registered first, so theirs run before this one, with the collector as usual."""
    atexit.unregister(freeze_what_is_left)
    atexit.register(freeze_what_is_left)
