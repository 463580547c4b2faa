"""The open-files limit a server needs (``retriever.serving.open_files``), probe round 17."""
from __future__ import annotations

import logging
import resource

from retriever.serving import open_files
from retriever.serving.open_files import DescriptorWatch


def test_a_connection_on_the_last_descriptors_is_logged_once_a_minute(caplog):
    """With the descriptors used up, libuv accepts each new client and closes it at once (its reserved-descriptor
    trick), and uvloop says nothing: clients were reset with no line in the log."""
    clock = [100.0]
    watch = DescriptorWatch(limit=80, clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger=open_files.__name__):
        watch.connected(10)
        assert caplog.records == []
        watch.connected(77)
        watch.connected(78)
        clock[0] += 30
        watch.connected(78)
        assert len(caplog.records) == 1 and "open-files limit (80)" in caplog.records[0].getMessage()
        clock[0] += 31
        watch.connected(78)
    assert len(caplog.records) == 2


def test_the_real_limits_are_read_and_set(monkeypatch):
    assert open_files._getrlimit() == resource.getrlimit(resource.RLIMIT_NOFILE)
