"""A loopback proxy to PostgreSQL that counts what crosses the wire: round trips, statements, transactions.

Counts, not times: a loaded machine leaves them alone. Per proxied connection:

- a **round trip** is a burst the client sends after it asked for an answer (its last message was a Sync, a
  Flush or a simple Query) and the server has spoken since: the client waited before it could go on. Statements
  queued in pipeline mode, which the client sends without waiting, are not trips of their own; nor is a Flush
  sent alone while the client is still reading the answer it asked for;
- a **statement** is a frontend Query or Execute message (psycopg sends BEGIN and COMMIT as statements too);
- a **transaction** is a ReadyForQuery reporting the session idle (each autocommit statement or pipeline sync,
  or each BEGIN ... COMMIT, ends in one).

Connect through `dsn` (TLS and GSS negotiation off, so the stream is plain); counting starts at the client's
start-up message.

    with WireCounter(dsn) as wire:
        store = PostgresEventStore(wire.dsn)
        wire.reset()
        ...                       # the work to count
        print(wire.counts())      # Counts(round_trips=..., statements=..., transactions=...)
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
from dataclasses import dataclass
from types import TracebackType

from psycopg.conninfo import conninfo_to_dict, make_conninfo

_STARTUP = 196608  # protocol 3.0, the start-up message's code


@dataclass(frozen=True)
class Counts:
    """What crossed the wire since the last reset, over every proxied connection."""

    round_trips: int
    statements: int
    transactions: int


class _Pair:
    """One client connection and its server connection, with the client's and server's message framing."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.started = False  # past the untyped start-up messages
        self.server_spoke = True  # the first burst of the client counts as a trip
        self.asked = True  # the client's last message asked for an answer (Sync, Flush, Query)
        self.from_client = b""
        self.from_server = b""
        self.closed = False


class WireCounter:
    """A proxy on 127.0.0.1 to the server of `dsn`, counting per connection (see the module docstring)."""

    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        self._target = (str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.dsn = make_conninfo(
            dsn, host="127.0.0.1", port=self._listener.getsockname()[1], sslmode="disable", gssencmode="disable"
        )
        """The DSN to connect through the proxy."""
        self._lock = threading.Lock()
        self._trips = self._statements = self._transactions = 0
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="pg wire counter", daemon=True)

    def __enter__(self) -> WireCounter:
        self._thread.start()
        return self

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self._stop = True
        self._thread.join(timeout=5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def reset(self) -> None:
        """Start counting afresh."""
        with self._lock:
            self._trips = self._statements = self._transactions = 0

    def counts(self) -> Counts:
        """The counts since the last reset."""
        with self._lock:
            return Counts(self._trips, self._statements, self._transactions)

    def _run(self) -> None:
        while not self._stop:
            for key, _ in self._selector.select(timeout=0.05):
                if key.data is None:
                    self._accept()
                else:
                    pair, side = key.data
                    self._forward(pair, side)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        server = socket.create_connection(self._target)
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(client, server)
        self._selector.register(client, selectors.EVENT_READ, (pair, "client"))
        self._selector.register(server, selectors.EVENT_READ, (pair, "server"))

    def _forward(self, pair: _Pair, side: str) -> None:
        if pair.closed:
            return  # both ends closed by the other side's event in the same batch
        source, sink = (pair.client, pair.server) if side == "client" else (pair.server, pair.client)
        try:
            data = source.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            pair.closed = True
            for sock in (pair.client, pair.server):
                self._selector.unregister(sock)
                sock.close()
            return
        # Counted before forwarding: the answer cannot arrive before the count of what asked for it.
        if side == "client":
            self._client_bytes(pair, data)
        else:
            self._server_bytes(pair, data)
        try:
            sink.sendall(data)
        except OSError:
            return

    def _client_bytes(self, pair: _Pair, data: bytes) -> None:
        statements = 0
        last = b""
        only_flush = True
        pair.from_client += data
        buf = pair.from_client
        while True:
            if not pair.started:
                if len(buf) < 8:
                    break
                length, code = struct.unpack("!ii", buf[:8])
                if len(buf) < length:
                    break
                pair.started = code == _STARTUP
                buf = buf[length:]
                continue
            if len(buf) < 5:
                break
            kind = buf[:1]
            (length,) = struct.unpack("!i", buf[1:5])
            if len(buf) < 1 + length:
                break
            statements += kind in (b"Q", b"E")
            last = kind
            only_flush = only_flush and kind == b"H"
            buf = buf[1 + length :]
        pair.from_client = buf
        # A burst of Flush messages alone asks for nothing new: the client is still waiting on what it asked.
        nudge = bool(last) and only_flush
        with self._lock:
            if pair.started and pair.server_spoke and pair.asked and not nudge:
                self._trips += 1
            self._statements += statements
        if not nudge:
            pair.server_spoke = False
        if last:
            pair.asked = last in (b"Q", b"S", b"H")

    def _server_bytes(self, pair: _Pair, data: bytes) -> None:
        pair.server_spoke = True
        pair.from_server += data
        buf = pair.from_server
        ended = 0
        while pair.started and len(buf) >= 5:
            kind = buf[:1]
            (length,) = struct.unpack("!i", buf[1:5])
            if len(buf) < 1 + length:
                break
            if kind == b"Z" and buf[5:6] == b"I":
                ended += 1
            buf = buf[1 + length :]
        pair.from_server = buf if pair.started else b""
        with self._lock:
            self._transactions += ended
