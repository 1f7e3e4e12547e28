"""A loopback TCP proxy to the test PostgreSQL server, for the store's fault tests: a partition, a held answer, a cut.

What it holds back waits in the kernel, unread, and nothing is closed: to the client and the server alike, the
network is silent. `cut` closes one connection's both ends, so each side finds it lost.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from anagrapheus.timeline.stores.postgres_schema import PostgresPlace


class Proxy:
    """A loopback TCP proxy to the server that can stop forwarding, hold the server's answers back, or cut."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.forwarding = threading.Event()
        """Cleared: a partition. Nothing goes either way, and a new connection is accepted and never answered."""
        self.forwarding.set()
        self.answering = threading.Event()
        """Cleared: what the server sends waits in the kernel, unread; what the client sends still goes through."""
        self.answering.set()
        self._stop = threading.Event()
        self._unanswered: list[socket.socket] = []
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._listener], [], [], 0.05)
            if not ready:
                continue
            client, _ = self._listener.accept()
            if not self.forwarding.is_set():
                self._unanswered.append(client)  # accepted, and never answered
                continue
            server = socket.create_connection(self._target)
            self._pairs.append((client, server))
            for source, sink, gates in (
                (client, server, (self.forwarding,)),
                (server, client, (self.forwarding, self.answering)),
            ):
                thread = threading.Thread(target=self._pipe, args=(source, sink, gates), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _pipe(self, source: socket.socket, sink: socket.socket, gates: tuple[threading.Event, ...]) -> None:
        while not self._stop.is_set():
            if not all(gate.is_set() for gate in gates):
                time.sleep(0.01)  # held: whatever arrives waits in the kernel, unread
                continue
            try:
                ready, _, _ = select.select([source], [], [], 0.05)
                if not ready or not all(gate.is_set() for gate in gates):
                    continue
                data = source.recv(65536)
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
            except (OSError, ValueError):  # cut: the socket is closed under the thread
                return

    def cut(self, server_port: int) -> None:
        """Close both ends of the connection whose server session sees this client port: each side finds it lost."""
        for client, server in self._pairs:
            if server.getsockname()[1] == server_port:
                for sock in (client, server):
                    hang_up(sock)
                return
        raise AssertionError(f"no connection on port {server_port}")

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._listener.close()
        for sock in [*self._unanswered, *(sock for pair in self._pairs for sock in pair)]:
            hang_up(sock)


def hang_up(sock: socket.socket) -> None:
    """Shut a socket down and close it, whatever state it is in: its peer reads the end of the stream."""
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@contextmanager
def proxied(postgres_dsn: str) -> Iterator[tuple[Proxy, str]]:
    """A proxy to the server of `postgres_dsn`, and the DSN that connects through it; closed afterwards."""
    place = PostgresPlace.of(postgres_dsn, "public")
    host, port = place.server.rsplit(":", 1)
    proxy = Proxy(host, int(port))
    try:
        yield proxy, f"postgresql://postgres@127.0.0.1:{proxy.port}/{place.database}"
    finally:
        proxy.close()
