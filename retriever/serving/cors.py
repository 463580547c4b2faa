"""Cross-origin requests (CORS), opt-in with ``serve --allow-origin``: a search page on another origin may call the API.

Without allowed origins nothing changes (no header; an OPTIONS is a 405, as any method a path lacks). With them,
a response to a request whose ``Origin`` is allowed carries ``Access-Control-Allow-Origin`` (``*`` when every
origin is allowed), errors included (the protocol layer's 400, 431 and 505 too: with ``*`` always, else when the
Origin header was read before the refusal), and every response says ``Vary: Origin``, since the header depends on it.
A preflight (an OPTIONS with ``Access-Control-Request-Method``) from an allowed origin is a 204 naming the methods
and the one request header (``Content-Type``) the API reads; from another origin it is answered as without the
flag, which the browser then refuses. No credentials are allowed: the API reads no cookies.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders

from retriever.errors import RetrieverError

ANY = "*"
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}  # left out of an Origin by browsers
ALLOWED_METHODS = "GET, HEAD, POST"  # every method some route takes (a test checks the routes): CORS, OPTIONS *
ALLOWED_HEADERS = "Content-Type"
# What a browser sends as Origin: scheme://host[:port], nothing after it (not even "/").
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#\s@]+", re.IGNORECASE)


def checked_origins(origins: Iterable[str]) -> tuple[str, ...]:
    """The ``--allow-origin`` values as browsers send them (``_as_sent``), refused in one line where no browser
    would send one (a trailing slash or a path never matches, so the flag would go unused without a word)."""
    checked = []
    for origin in origins:
        sent = origin if origin == ANY else _as_sent(origin) if _ORIGIN.fullmatch(origin) else None
        if sent is None:
            raise RetrieverError(f"{origin!r} is no origin: give scheme://host[:port] with nothing after it (e.g. "
                                 "https://search.example.com or http://localhost:3000), or * for any")
        checked.append(sent)
    return tuple(dict.fromkeys(checked))


def _as_sent(origin: str) -> str | None:
    """An origin as a browser's Origin header gives it (RFC 6454): lower case, without the scheme's default port,
    an international host name in punycode (`https://a.example:443` and `https://bücher.example` never matched);
    None if it has no host or its port is out of range."""
    parts = urlsplit(origin.lower())
    try:
        port, host = parts.port, parts.hostname
        host = host if host is None or host.isascii() else host.encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        return None
    if not host:
        return None
    shown = f"[{host}]" if ":" in host else host
    default = DEFAULT_PORTS.get(parts.scheme)
    return f"{parts.scheme}://{shown}" + (f":{port}" if port is not None and port != default else "")


def cross_origin_headers(origins: tuple[str, ...], origin: str | None) -> dict[str, str]:
    """The CORS headers of a response to a request from ``origin`` (None: the request named none)."""
    if not origins:
        return {}
    allowed = ANY if ANY in origins else origin if origin is not None and origin.lower() in origins else None
    return {"vary": "Origin", **({"access-control-allow-origin": allowed} if allowed else {})}


class CrossOrigin:
    """ASGI middleware adding ``cross_origin_headers`` to every response and answering allowed preflights. Bugs'
    500s are sent around it (Starlette's outermost middleware), so their handler adds the headers itself."""

    def __init__(self, app, origins: tuple[str, ...]) -> None:
        self.app, self.origins = app, origins

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Headers(scope=scope)
        added = cross_origin_headers(self.origins, request.get("origin"))
        if scope["method"] == "OPTIONS" and "access-control-request-method" in request and len(added) == 2:
            headers = {**added, "access-control-allow-methods": ALLOWED_METHODS,
                       "access-control-allow-headers": ALLOWED_HEADERS}
            await send({"type": "http.response.start", "status": 204,
                        "headers": [(name.encode(), value.encode()) for name, value in headers.items()]})
            return await send({"type": "http.response.body", "body": b""})

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in added.items():
                    if name == "vary":
                        headers.add_vary_header(value)
                    else:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
