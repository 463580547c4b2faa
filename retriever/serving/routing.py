"""How requests meet the routes, where Starlette's own answers were wrong for an API.

- **HEAD** is answered wherever GET is (``HeadAsGet``), as HTTP requires and health checkers expect; ``OPTIONS *``
  (about the server as a whole) is a 200 naming every method it takes, any other method on ``*`` a 400
  (``ServerOptions``); a 405's ``Allow`` names every method of the path (``allowed_methods``), and a 404 for a path
  with a trailing or doubled slash names the path without it (``path_without_slash``), any other the routes there are
  (``not_found``).
"""
from __future__ import annotations

import re
from urllib.parse import unquote

from starlette.routing import Match
from starlette.staticfiles import StaticFiles

from retriever.serving.cors import ALLOWED_METHODS
from retriever.serving.malformed import send_closing_error


class HeadAsGet:
    """ASGI middleware: the app routes a HEAD as a GET; uvicorn, whose scope still says HEAD, sends the
    reply's headers (its length included) without the body."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            scope = {**scope, "method": "GET"}
        await self.app(scope, receive, send)


class ServerOptions:
    """ASGI middleware: ``OPTIONS *`` asks about the server in general, not a resource (RFC 9110 section 9.3.7; a ping,
    or a probe of what it supports): a 200 without content whose ``Allow`` names every method some route takes
    (``cors.ALLOWED_METHODS``, which CORS and the parser's refusals name too). It
    was routed as a path, a 404 `no route at *`. Any other method on ``*`` is a malformed request (RFC 9110 section
    7.1 keeps that form for OPTIONS), a 400 closing the connection as the other malformed requests' do; it was that
    404 naming the routes."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] != "*":
            return await self.app(scope, receive, send)
        if scope["method"] != "OPTIONS":
            return await send_closing_error(send, 400, "malformed HTTP request (the target * (the server as a whole) "
                                                       f"is asked only with OPTIONS, not {scope['method']}; give a "
                                                       "path, such as /search)")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"allow", ALLOWED_METHODS.encode()), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


def allowed_methods(routes: list, scope: dict) -> str:
    """The ``Allow`` of a 405: every method some route takes at this path. Starlette names only the first
    route's, so a DELETE or OPTIONS on /search said ``allow: GET`` though POST is served there too; HEAD is
    added wherever GET is, as ``HeadAsGet`` answers it. A mount's file (the API docs' ``app.DOCS_ASSETS``) raises its
    405 with the mount's path moved into ``root_path``, which is put back to the app's to match the routes."""
    return _allow(_route_methods(routes, {**scope, "root_path": scope.get("app_root_path", scope.get("root_path", ""))}))


def _allow(methods: set[str]) -> str:
    """An ``Allow`` header's value: the methods, HEAD among them wherever GET is (``HeadAsGet`` answers it)."""
    return ", ".join(sorted(methods | ({"HEAD"} if "GET" in methods else set())))


def path_without_slash(routes: list, scope: dict) -> str | None:
    """The path as sent (``sent_path``) without its trailing or doubled slashes, where a route serves that decoded:
    Starlette's redirect of ``/search/`` was an empty 307 to ``http://`` plus the client's Host header, wrong behind a
    proxy and not JSON; ``//search`` (a base URL ending in a slash, joined to ``/search``) was a bare "Not Found". The
    path decoded named it beside the path as sent (``/indexes/a%20b/search/``, ``/indexes/a b/search``), and took an
    escaped slash (``%2F``) for one that could be dropped."""
    from retriever.serving.problems import sent_path

    path = sent_path(scope, clip=False)
    bare = re.sub("//+", "/", path).rstrip("/")
    if bare and bare != path and _route_methods(routes, {**scope, "path": unquote(bare)}):
        return bare
    return None


def not_found(routes: list, scope: dict) -> str:
    """A 404's message: the path without its slashes where a route serves that (``path_without_slash``), else the
    routes there are. ``/indexes/NAME`` (the search route's start), ``/api/search`` and other near misses got a bare
    "Not Found" that named none of them."""
    from retriever.serving.problems import clipped, sent_path

    bare = path_without_slash(routes, scope)
    if bare:
        return f"no route at {sent_path(scope)}; the path is {clipped(bare)}, without the slash"
    listed = dict.fromkeys(route.path.replace("{name}", "NAME") for route in _flattened(routes)
                           if getattr(route, "include_in_schema", False))
    return f"no route at {sent_path(scope)}; the routes are / (the search page), {', '.join(listed)}; API docs at /docs"


def _route_methods(routes: list, scope: dict) -> set[str]:
    methods: set[str] = set()
    for route in routes:
        if route.matches(scope)[0] == Match.NONE:
            continue
        methods |= set(getattr(route, "methods", None) or ())
        if isinstance(getattr(route, "app", None), StaticFiles):  # the API docs' files: a POST's Allow was empty
            methods.add("GET")
        included = getattr(route, "original_router", route)  # FastAPI wraps an included router (no prefix here)
        methods |= _route_methods(getattr(included, "routes", None) or [], scope)
    return methods


def _flattened(routes: list) -> list:
    """The routes, an included router's (which FastAPI wraps) in its place."""
    found = []
    for route in routes:
        included = getattr(route, "original_router", None)
        found += _flattened(included.routes) if included is not None else [route]
    return found
