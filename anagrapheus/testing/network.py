"""Loopback only: refuse every socket connection to a host that is not this machine."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

from anagrapheus.errors import RemoteConnectionRefused, UsageError

__all__ = ["loopback_only"]

_guard = threading.Lock()
# Process-wide because sockets are: a client connects from whatever thread or loop it runs on, so the check sits
# on the `socket.socket` class. Owned by the `loopback_only` scope, which puts the class's methods back as it closes.
_open = False
_LOOPBACK_NAMES = frozenset(("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"))


def _is_loopback(address: object) -> bool:
    """Whether a socket address names this machine; addresses of other families (AF_UNIX) always do."""
    if not isinstance(address, tuple) or not address:
        return True
    host: object = address[0]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(host, str):
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        # A name other than localhost would be resolved by whoever connects: it may leave the machine.
        return False


def _refusing(connect: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(sock: socket.socket, address: Any, /) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
            raise RemoteConnectionRefused(address)
        return connect(sock, address)

    return guarded


@contextmanager
def loopback_only() -> Generator[None]:
    """While open, a socket connecting to any host but loopback raises `RemoteConnectionRefused`.

    The check sits on `socket.socket.connect` and `connect_ex`, which every client in the process
    reaches (httpx and asyncio included), so a stub server on 127.0.0.1 stays reachable.
    """
    global _open
    with _guard:
        if _open:
            raise UsageError("loopback_only scopes do not nest")
        _open = True
        connect, connect_ex = socket.socket.connect, socket.socket.connect_ex
        socket.socket.connect = _refusing(connect)  # type: ignore[method-assign]
        socket.socket.connect_ex = _refusing(connect_ex)  # type: ignore[method-assign]
    try:
        yield
    finally:
        with _guard:
            socket.socket.connect, socket.socket.connect_ex = connect, connect_ex  # type: ignore[method-assign]
            _open = False
