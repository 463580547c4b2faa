"""Where a chunked request body ends, read from its chunk sizes, so the protocol can feed the parser up to there.

The protocol (``protocol.GuardedHttpProtocol``) measures each request head from its first byte, so it must stop
feeding the parser where a body ends: fed past it, the parser takes in the head behind it uncounted. A chunked
body's end is the blank line after its last (zero-size) chunk and trailer fields; a blank line inside a chunk's data
is not one, and cutting at every blank line made a body of blank lines thousands of parser calls, so the
protocol cut at the first 64 of a read and fed the rest whole, and a head behind more than 64 was counted from the
next read, so one over the cap was served. Here the chunk sizes are read, one step a chunk (as the parser's own
callbacks are), and a chunk's data is skipped unread: the end is found exactly however the bytes arrive.
The parser checks the framing; this only follows it. Where the two part (framing the parser refuses, so the
request fails with a 400 anyway), the protocol feeds the rest of the read whole.
"""
from __future__ import annotations

import re

LINE_KEPT = 64  # bytes of a size or trailer line kept while it spans reads: its size digits, or whether it is empty
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]*)[^\n]*\n")


class ChunkedEnd:
    """Follows one chunked body through the reads it arrives in (``end``)."""

    def __init__(self) -> None:
        self._skip = 0  # bytes of the current chunk's data and the CRLF after it still to come
        self._line = b""  # the start of a size or trailer line that has not ended yet
        self._trailers = False  # the last chunk came: what follows is trailer lines up to a blank one

    def end(self, data: bytes, start: int) -> int | None:
        """The offset in ``data`` just past the body's end, reading from ``start`` on (where the last call left the
        body), or None if the body goes on past ``data``."""
        at = start
        while at < len(data):
            if self._skip:
                step = min(self._skip, len(data) - at)
                self._skip -= step
                at += step
                continue
            if not (self._line or self._trailers) and (past := self._whole_chunks(data, at)) > at:
                at = past
                continue
            newline = data.find(b"\n", at)
            if newline < 0:
                self._line = (self._line + data[at:at + LINE_KEPT])[:LINE_KEPT]
                return None
            line = (self._line + data[at:min(newline, at + LINE_KEPT)]).rstrip(b"\r")
            self._line, at = b"", newline + 1
            if self._trailers and not line:
                return at
            if not self._trailers:
                self._chunk(_SIZE_LINE.match(line + b"\n").group(1))
        return None

    def _whole_chunks(self, data: bytes, at: int) -> int:
        """Past the chunks whose size lines ``data`` holds whole from ``at`` (the common case, a match a chunk)."""
        match, size = _SIZE_LINE.match, 1
        while size and (line := match(data, at)):
            size = int(line[1] or b"0", 16)
            at = line.end() + (size + 2 if size else 0)
        self._trailers, self._skip = not size, max(0, at - len(data))
        return min(at, len(data))

    def _chunk(self, digits: bytes) -> None:
        size = int(digits, 16) if digits else 0  # no digits: the parser refuses it (a 400)
        self._trailers = not size
        self._skip = size + 2 if size else 0
