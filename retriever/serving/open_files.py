"""The open-files limit a server needs: a file descriptor per connection, idle ones included.

With every descriptor taken, libuv (under uvloop) accepts each new client and closes it at once, its reserved-descriptor
trick, and tells no one: clients are reset while the log stays empty. ``DescriptorWatch`` sees it coming instead, from
the descriptor a new connection gets (the lowest free one, so a high one means all below it are taken)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

MOST_OPEN_FILES = 1 << 20  # Linux's default fs.nr_open, for a hard limit of "unlimited"
LOW_OPEN_FILES = 1024  # under this many descriptors serve warns at start: a few hundred idle clients fill them
SPARE = 4  # descriptors left when a new connection is counted as taking the last ones
LOG_EVERY = 60.0  # seconds between two lines about the limit being reached
log = logging.getLogger(__name__)


def _getrlimit() -> tuple[int, int]:
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _setrlimit(soft: int, hard: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def raise_open_files_limit() -> int | None:
    """Each connection holds a file descriptor until the request timeout closes an idle one: under a soft limit of 1,024
    (a common default) a thousand idle connections reset every new client. Raised to the hard limit the system allows;
    the soft limit in effect is returned (None where there is no such limit, or it is unlimited)."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return None
    soft, hard = _getrlimit()
    wanted = MOST_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MOST_OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            _setrlimit(wanted, hard)
        except (ValueError, OSError):  # refused (a container's cap): served within the soft limit
            pass
    soft = _getrlimit()[0]
    return None if soft == resource.RLIM_INFINITY else soft


def low_limit_warning(limit: int | None) -> str | None:
    """The start-up line for a limit the hard one keeps low, else None."""
    if limit is None or limit >= LOW_OPEN_FILES:
        return None
    return (f"warning: the open-files limit is {limit} (the hard limit, `ulimit -Hn`, keeps it there) and each "
            f"connection takes one: past some {max(limit - 30, 1)} open connections, idle ones included, new clients "
            "are reset; raise the hard limit (ulimit -Hn, or systemd's LimitNOFILE) for more")


class DescriptorWatch:
    """Logs (at most once per ``LOG_EVERY`` seconds) when a new connection takes one of the last descriptors."""

    def __init__(self, limit: int | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.clock, self.said = limit, clock, None

    def connected(self, fd: int) -> None:
        """``fd``: the new connection's descriptor (-1 when it has none)."""
        if self.limit is None or fd < self.limit - SPARE:
            return
        now = self.clock()
        if self.said is not None and now - self.said < LOG_EVERY:
            return
        self.said = now
        log.warning("the open-files limit (%d) is all but used up by open connections, idle ones included: new "
                    "clients are reset (closed at once) until some close; raise the hard limit (ulimit -Hn, or "
                    "systemd's LimitNOFILE), or lower --timeout-keep-alive", self.limit)
