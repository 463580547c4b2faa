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

from starlette.datastructures import Headers, MutableHeaders

from retriever.errors import RetrieverError

ANY = "*"
ALLOWED_METHODS = "GET, HEAD, POST"
ALLOWED_HEADERS = "Content-Type"
# What a browser sends as Origin: scheme://host[:port], nothing after it (not even "/").
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#\s@]+", re.IGNORECASE)


def checked_origins(origins: Iterable[str]) -> tuple[str, ...]:
    """The ``--allow-origin`` values, lower-cased as browsers send them, refused in one line where no browser
    would send one (a trailing slash or a path never matches, so the flag would go unused without a word)."""
    checked = []
    for origin in origins:
        if origin != ANY and not _ORIGIN.fullmatch(origin):
            raise RetrieverError(f"{origin!r} is no origin: give scheme://host[:port] with nothing after it (e.g. "
                                 "https://search.example.com or http://localhost:3000), or * for any")
        checked.append(origin.lower())
    return tuple(dict.fromkeys(checked))


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
