"""What a malformed request's 400 says: the HTTP parser's reason, in the client's terms.

uvicorn answered every parser error with "invalid http request received", so a client could not tell a duplicate
Content-Length from a bad chunk, and ``curl 'http://host/search?q=café'`` (curl sends the UTF-8 bytes unencoded) got
no hint that the query wants percent-encoding. ``protocol.GuardedHttpProtocol`` sends what ``refusal`` returns.
A well-formed request whose Host headers are not as HTTP asks (none in HTTP/1.1, several, or a value that is no
host and port, such as ``a b``) is refused by ``HostChecked``. A request line of an
HTTP version other than 1.0 and 1.1 is a 505 (``unsupported_version``): the parser takes HTTP/2.0 and HTTP/0.9,
and uvicorn answered them as HTTP/1.1; it refuses other digits (HTTP/1.2, HTTP/3.0), which were a 400. ``CONNECT
host:443`` (a tunnel, asked of a proxy) is a 405 naming CONNECT and the methods taken (``answer``). An address given
as a whole URL without a path (``GET http://host?q=x``) has the path ``/`` (``rooted``).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import re

import httptools

from retriever.serving.cors import ALLOWED_METHODS

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
        reason = (f"no method this server answers ({ALLOWED_METHODS}) begins the request; after another request, that "
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


class NotAProxy(Exception):
    """Raised from the parser's callback for ``CONNECT host:port`` (its message is the target): a tunnel, which a proxy
    opens; the parser takes it, and uvicorn's URL parsing then failed ("the address is not a valid URL")."""


def answer(error: Exception) -> tuple[int, str, str | None]:
    """The status, message and ``Allow`` (or None) of a request the parser stopped at: a CONNECT to a host is a 405 (as
    a method a path lacks is), another HTTP version a 505 (``unsupported_version``), anything else a 400 (``refusal``)."""
    if isinstance(error, httptools.HttpParserCallbackError) and isinstance(error.__context__, NotAProxy):
        from retriever.serving.problems import clipped

        return 405, (f"CONNECT {clipped(str(error.__context__))} asks for a tunnel, which a proxy opens, and this server "
                     f"is none: it takes {ALLOWED_METHODS} on its own paths, such as /search"), ALLOWED_METHODS
    version = unsupported_version(error)
    return (505, version, None) if version else (400, refusal(error), None)


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


# RFC 9110 section 7.2's Host: uri-host [":" port], uri-host an [IP literal], or a reg-name (RFC 3986 section 3.2.2).
_HOST = re.compile(rb"(?:\[(?P<literal>[^\]]*)\]|(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*)(?::[0-9]*)?")
_FUTURE_LITERAL = re.compile(rb"v[0-9A-Fa-f]+\.[A-Za-z0-9._~!$&'()*+,;=:-]+")


def host_problem(headers: list[tuple[bytes, bytes]], http_version: str) -> str | None:
    """What is wrong with a request's Host headers (RFC 9110 section 7.2 asks a 400 for it), or None: none in an
    HTTP/1.1 request, more than one in any, or a value that is no host name or address with an optional port."""
    hosts = [value for name, value in headers if name == b"host"]
    if len(hosts) > 1 or (not hosts and http_version == "1.1"):
        said = f"{len(hosts)} Host headers" if hosts else "no Host header"
        return f"{said}; HTTP/1.1 requires exactly one, naming the server's host and port"
    match = _HOST.fullmatch(hosts[0]) if hosts else None
    if not hosts or (match and (match["literal"] is None or _ip_literal(match["literal"]))):
        return None
    from retriever.serving.problems import clipped

    return (f"the Host header {clipped(hosts[0].decode('latin-1'))!r} is no host name or address with an optional "
            ":port; send the server's, such as 127.0.0.1:8000, [::1]:8000 or an ASCII name (punycode)")


def _ip_literal(text: bytes) -> bool:
    """Whether the inside of a Host's [brackets] is an IPv6 address or RFC 3986's IPvFuture."""
    try:
        ipaddress.IPv6Address(text.decode("ascii"))
        return True
    except ValueError:  # a UnicodeDecodeError too
        return bool(_FUTURE_LITERAL.fullmatch(text))


class HostChecked:
    """ASGI middleware: a request without a Host header (HTTP/1.1), with several, or with one that is no host and port
    is a 400 (RFC 9110 section 7.2 asks a server so); all were served."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        said = host_problem(scope.get("headers", ()), scope.get("http_version")) if scope["type"] == "http" else None
        if said is None:
            return await self.app(scope, receive, send)
        await send_closing_error(send, 400, f"malformed HTTP request ({said})")


async def send_closing_error(send, status: int, message: str) -> None:
    """An ASGI app's JSON ``{"error": message}`` response that closes the connection, as the protocol's refusals of
    malformed requests do (``protocol.GuardedHttpProtocol._refuse``): the client's next bytes are not to be read."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
