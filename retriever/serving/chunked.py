"""Where a chunked request body ends, read from its chunk sizes, so the protocol can feed the parser up to there.

The protocol (``protocol.GuardedHttpProtocol``) measures each request head from its first byte, so it must stop
feeding the parser where a body ends: fed past it, the parser takes in the head behind it uncounted. A chunked
body's end is the blank line after its last (zero-size) chunk and trailer fields; a blank line inside a chunk's data
is not one, and cutting at every blank line made a body of blank lines thousands of parser calls, so the
protocol cut at the first 64 of a read and fed the rest whole, and a head behind more than 64 was counted from the
next read, so one over the cap was served. Here the chunk sizes are read, one step a chunk (as the parser's own
callbacks are), and a chunk's data is skipped unread: the end is found exactly however the bytes arrive.
The framing between two pieces of data (size lines with their extensions, trailer fields) is counted here too, so
the protocol refuses a run over its head cap before the parser reads it: counted a read at a time, a read holding any
data was not counted, and a whole trailer over the cap that came with the data before it was served.
The chunk sizes are added up as they are read (``announced``), so the protocol refuses a body they take past the
body limit at once, before the data comes: the app saw it only as the data came, so a chunk of 2**64-1 bytes waited
for the request timeout. The parser checks the framing; this only follows it. At a size line the parser refuses (a 400) it stops following,
and the protocol feeds the rest of the body whole.
"""
from __future__ import annotations

import re

LINE_KEPT = 64  # bytes of a size or trailer line kept while it spans reads: its size digits, or whether it is empty
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]+)(?:[;\r][^\n]*)?\n")  # a whole size line, and its size
_SIZE_START = re.compile(rb"[0-9A-Fa-f]+(?:[;\r]|\Z)")  # how a size line, or the part of one come so far, begins


class ChunkedEnd:
    """Follows one chunked body through the reads it arrives in (``end``), counting its framing as it goes:
    ``longest`` is the longest run of bytes between two pieces of data (a size line with its extensions, the CRLFs
    around data, trailer fields), which the protocol caps as it caps a head."""

    def __init__(self) -> None:
        self._skip = 0  # bytes of the current chunk's data and the CRLF after it still to come
        self._line = b""  # the start of a size or trailer line that has not ended yet
        self._trailers = False  # the last chunk came: what follows is trailer lines up to a blank one
        self._run = 0  # framing bytes since the last data (the CRLF after data counted once the data begins)
        self._broken = False  # a size line the parser refuses (a 400): not followed further
        self.longest = 0
        self.announced = 0  # the bytes of data the chunk sizes read so far add up to, sent or yet to come

    def end(self, data: bytes, start: int) -> int | None:
        """The offset in ``data`` just past the body's end, reading from ``start`` on (where the last call left the
        body), or None if the body goes on past ``data``."""
        at = start
        while at < len(data) and not self._broken:
            if self._skip:
                step = min(self._skip, len(data) - at)
                self._skip -= step
                at += step
                continue
            if not (self._line or self._trailers) and (past := self._whole_chunks(data, at)) > at:
                at = past
                continue
            newline = data.find(b"\n", at)
            if not self._trailers and not _SIZE_START.match(self._line + data[at:at + LINE_KEPT]):
                self._broken = True
                break
            self._framing((len(data) if newline < 0 else newline + 1) - at)
            if newline < 0:
                self._line = (self._line + data[at:at + LINE_KEPT])[:LINE_KEPT]
                return None
            line = (self._line + data[at:min(newline, at + LINE_KEPT)]).rstrip(b"\r")
            self._line, at = b"", newline + 1
            if self._trailers and not line:
                return at
            if not self._trailers:
                self._chunk(_SIZE_START.match(line).group().rstrip(b";\r"))
        return None

    def _whole_chunks(self, data: bytes, at: int) -> int:
        """Past the chunks whose size lines ``data`` holds whole from ``at`` (the common case, a match a chunk). A chunk
        of 2**63 bytes or more puts ``at`` past any offset ``match`` takes (an OverflowError): only ``data`` is read."""
        match, size = _SIZE_LINE.match, 1
        while size and at < len(data) and (line := match(data, at)):
            self._framing(line.end() - at)
            size = int(line[1], 16)
            self.announced += size
            at = line.end() + (size + 2 if size else 0)
            self._run = 2 if size else self._run
        self._trailers, self._skip = not size, max(0, at - len(data))
        return min(at, len(data))

    def _chunk(self, digits: bytes) -> None:
        size = int(digits, 16)
        self.announced += size
        self._trailers = not size
        self._skip = size + 2 if size else 0
        self._run = 2 if size else self._run

    def _framing(self, count: int) -> None:
        self._run += count
        self.longest = max(self.longest, self._run)
