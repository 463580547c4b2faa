"""What a malformed request's 400 says: the HTTP parser's reason, in the client's terms.

uvicorn answered every parser error with "invalid http request received", so a client could not tell a duplicate
Content-Length from a bad chunk, and ``curl 'http://host/search?q=café'`` (curl sends the UTF-8 bytes unencoded) got
no hint that the query wants percent-encoding. ``protocol.GuardedHttpProtocol`` sends what ``refusal`` returns.
A well-formed HTTP/1.1 request without exactly one Host header is refused by ``HostChecked``. A request line of an
HTTP version other than 1.0 and 1.1 is a 505 (``unsupported_version``): the parser takes HTTP/2.0 and HTTP/0.9,
and uvicorn answered them as HTTP/1.1; it refuses other digits (HTTP/1.2, HTTP/3.0), which were a 400. An address given
as a whole URL without a path (``GET http://host?q=x``) has the path ``/`` (``rooted``).
"""
from __future__ import annotations

import json
import logging

import httptools

log = logging.getLogger(__name__)
SUPPORTED_VERSIONS = ("1.0", "1.1")
PARSER_VERSION_ERROR = "Invalid HTTP version"  # llhttp's, for digits it has no parser for (its others say how)
PERCENT_ENCODE = ("percent-encode spaces, control characters and letters outside ASCII (the query's UTF-8 bytes as %XX), "
                  "e.g. with curl --get --data-urlencode 'q=...' URL")


def refusal(error: Exception) -> str:
    """A malformed request's 400 message, from the parser's error: what is wrong, and for an address, how to mend it.
    uvicorn checks the address itself as the head ends, so its failure comes as the callback's error's context."""
    if isinstance(error, httptools.HttpParserCallbackError) and isinstance(error.__context__, httptools.HttpParserError):
        return "malformed HTTP request (the address is not a valid URL)"
    reason = str(error).rstrip(".")
    if isinstance(error, httptools.HttpParserInvalidURLError) and "invalid char" in reason.lower():
        return f"malformed HTTP request: the address holds a character that must be percent-encoded; {PERCENT_ENCODE}"
    if reason.startswith("Expected HTTP/"):  # a third space in the request line: most often one in the address
        return f"malformed HTTP request: the request line is not METHOD ADDRESS HTTP/1.1; {PERCENT_ENCODE}"
    if reason.startswith("Pause on PRI"):
        reason = "an HTTP/2 connection preface: this server speaks HTTP/1.1"
    elif isinstance(error, httptools.HttpParserInvalidMethodError):
        reason = ("no method this server answers (GET, HEAD, POST) begins the request; after another request, that "
                  "one's Content-Length may be short of its body")
    elif isinstance(error, httptools.HttpParserInvalidURLError):
        reason = f"the address is not a path beginning with / or a URL: {reason[:1].lower()}{reason[1:]}"
    elif isinstance(error, httptools.HttpParserCallbackError):
        reason = "the server could not read it"
        log.warning("a parser callback failed on a request", exc_info=error.__context__)
    first, _, rest = reason.partition(" ")
    if first[1:].islower():  # "Duplicate Content-Length" reads on as "duplicate Content-Length"
        reason = first.lower() + (" " + rest if rest else "")
    return f"malformed HTTP request ({reason})"


def rooted(url: bytes) -> bytes:
    """An absolute-form address with no path (``http://host``, ``http://host?q=x``) with the path ``/`` HTTP gives it:
    httptools parses no path there, and uvicorn failed on its None (a 400 and a traceback in the log per request)."""
    if url.startswith(b"/"):
        return url
    try:
        parsed = httptools.parse_url(url)
    except httptools.HttpParserInvalidURLError:  # refused as it was, saying so (``refusal``)
        return url
    if parsed.path is not None or parsed.schema is None:
        return url
    scheme, mark, rest = url.partition(b"://")
    end = min([at for at in (rest.find(b"?"), rest.find(b"#")) if at >= 0], default=len(rest))
    return scheme + mark + rest[:end] + b"/" + rest[end:]


class UnsupportedVersion(Exception):
    """Raised from the parser's callback for a request of a version the parser takes but this server does not
    speak (its message is the version): the parser stops there, and nothing more of the connection is read."""


def unsupported_version(error: Exception) -> str | None:
    """The 505's message for a parser error that is a request line's HTTP version other than 1.0 and 1.1, else None."""
    if isinstance(error, httptools.HttpParserCallbackError) and isinstance(error.__context__, UnsupportedVersion):
        version = f"HTTP/{error.__context__}"
    elif str(error).startswith(PARSER_VERSION_ERROR):
        version = "its HTTP version"
    else:
        return None
    return (f"the request line names {version}, which this server does not speak: send the request as HTTP/1.1 (or "
            "HTTP/1.0)")


class HostChecked:
    """ASGI middleware: an HTTP/1.1 request without a Host header, or with several, is a 400 (RFC 9112 section 3.2
    asks a server so); both were served."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        hosts = sum(name == b"host" for name, _ in scope.get("headers", ())) if scope["type"] == "http" else 1
        if hosts == 1 or scope.get("http_version") != "1.1":
            return await self.app(scope, receive, send)
        said = "no Host header" if not hosts else f"{hosts} Host headers"
        body = json.dumps({"error": f"malformed HTTP request ({said}; HTTP/1.1 requires exactly one, naming the "
                                    "server's host and port)"}).encode()
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
                                (b"connection", b"close")]})  # as the protocol's refusals of malformed requests
        await send({"type": "http.response.body", "body": body})
