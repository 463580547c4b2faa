"""The open-files limit a server needs: a file descriptor per connection, idle ones included."""
from __future__ import annotations

MOST_OPEN_FILES = 1 << 20  # Linux's default fs.nr_open, for a hard limit of "unlimited"


def raise_open_files_limit() -> None:
    """Each connection holds a file descriptor until the request timeout closes an idle one: under a soft limit of 1,024
    (a common default) a thousand idle connections reset every new client. Raised to the hard limit the system allows."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MOST_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MOST_OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):  # refused (a container's cap): served within the soft limit
            pass
