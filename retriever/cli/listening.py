"""Binding and listening for `retriever serve`: the sockets are bound before the indexes load (a taken port fails at
once) and listen once they are warm."""
from __future__ import annotations

import errno
import os
import re
import socket
from urllib.parse import urlsplit

from retriever.errors import RetrieverError

BACKLOG = 2048  # uvicorn's default


def unbracketed(host: str) -> str:
    """``[::1]`` as ``::1``: the URL form of an IPv6 address, which a user copies from an address bar, named no
    host to the resolver ("Name or service not known")."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") and ":" in host else host


def bare_host(host: str) -> str:
    """--host as ``listening_sockets`` takes it: a host name or address alone (an IPv6 one with or without brackets).
    A URL (``http://localhost``), a port (``127.0.0.1:8000``, ``[::1]:8000``) or a path is refused as a usage error
    giving the flags meant: the resolver took it as a host name, and said only "check --host and --port"."""
    if "://" in host:
        parts = urlsplit(host)
        try:
            name, port = parts.hostname or "", parts.port
        except ValueError:  # a port that is no number
            name, port = parts.hostname or "", None
    elif match := re.fullmatch(r"\[([^\]]*)\]:(\d*)|([^:\[\]]*):(\d*)", host):
        name, port = match[1] if match[1] is not None else match[3], match[2] or match[4]
    elif "/" in host:
        name, port = host.split("/")[0], None
    else:
        return unbracketed(host)
    advice = f"--host {name or 'NAME'} " + (f"--port {port}" if port else "(a port goes in --port)")
    raise ValueError(f"{host!r} is not a bare host name or address: give {advice}")


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound before the indexes load, so a taken port fails at once and as itself (uvicorn binds only after its
    startup and exits alike for both); bound as asyncio's ``create_server`` binds a host name. With --port 0 every
    address gets the port the first was given (each drew its own, and the one announced missed the others)."""
    sockets: list[socket.socket] = []
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)  # proto TCP: asyncio sets TCP_NODELAY only then
            sockets.append(sock)
            if os.name == "posix":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]  # with --port 0, the one drawn for the first address serves every address
    except OSError as error:
        for sock in sockets:
            sock.close()
        if error.errno == errno.EADDRINUSE:
            raise RetrieverError(f"port {port} on {host} is in use: stop what listens there or pick another "
                                 "--port") from None
        raise RetrieverError(f"cannot listen on {host}:{port} ({error.strerror or error}): check --host and "
                             "--port") from None
    return sockets


def start_listening(sockets: list[socket.socket], host: str, port: int, backlog: int = BACKLOG) -> None:
    """Listen on the sockets bound at start, once the indexes are warm. SO_REUSEADDR lets a second server bind
    the same port while neither listens yet (both loading); the one that listens second then gets EADDRINUSE,
    which uvloop drops: it announced itself and sat there answering nothing. Here that is the port error."""
    try:
        for sock in sockets:
            sock.listen(backlog)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise RetrieverError(f"port {port} on {host} was taken by another server while the indexes loaded: "
                                 "stop it or pick another --port") from None
        raise RetrieverError(f"cannot listen on {host}:{port} ({error.strerror or error})") from None
