"""PostgresEventStore: the event log and pin scratch in PostgreSQL, for many writers on many machines."""

from __future__ import annotations

import itertools
import json
import math
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar, cast

import psycopg
from psycopg import generators, pq, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout
from typing_extensions import override

from anagrapheus.errors import SeqConflict, StoreError, StoreUnavailable, UnitBusy, UnitClosed, UsageError
from anagrapheus.timeline.events import PendingEvent, StoredEvent, new_uuid7
from anagrapheus.timeline.stores.ports import (
    ClosedUnit,
    OpenUnit,
    ScratchPin,
    UnitLeases,
    UnitOutcome,
    check_contiguous,
    check_outcome,
    event_row,
)
from anagrapheus.timeline.stores.postgres_schema import PostgresPlace, failure, is_migrated, migrate
from anagrapheus.timeline.stores.postgres_statements import EVENT_COLUMN_NAMES, PostgresStatements, Prepared
from anagrapheus.timeline.stores.stamps import stamped, utc_now

__all__ = ["PostgresEventStore"]

_READ_PAGE = 1000
# The client waits this much longer than `statement_timeout` for an answer, so that the server's own
# cancellation, which says what was cancelled, arrives first when the server is there to send it.
_ANSWER_GRACE = 1.0
# How many times in all a step is made whose failure a fresh try may clear (see `failure`): the retry is at once,
# for what it waits on is a fresh connection (a lost one) or a conflict the server has already resolved (a
# deadlock, a serialization failure).
_TRIES = 2

Conn = psycopg.Connection[tuple[Any, ...]]
Preparations = weakref.WeakKeyDictionary[Conn, set[bytes]]
"""The names of the statements a store prepared on each of its connections (see `_run`); an entry goes with its
connection."""
T = TypeVar("T")


@dataclass
class _Transaction:
    """A caller's open transaction: its connection, and what to do once it commits."""

    conn: Conn
    after_commit: list[Callable[[], None]] = field(default_factory=lambda: [])
    lock: threading.RLock = field(default_factory=threading.RLock)
    """Held by one thread at a time: the threads a holder hands work to take turns, a savepoint block at a time."""
    sent: list[tuple[psycopg.Cursor[tuple[Any, ...]], str]] = field(default_factory=lambda: [])
    """The statements sent in it, each with the step it serves: a pipelined one's error names its step."""


class _Watchdog:
    """Cuts the socket of a wait on the server that outlives its deadline, so no store call blocks without bound.

    A stalled server or a partition that still accepts packets (a proxy, a frozen host) answers nothing, and
    neither keepalives nor the server's own timeouts can end the wait; closing the socket under it does.
    """

    def __init__(self) -> None:
        # A plain lock under the condition: arming and disarming, twice a statement, enter it in C, not in Python.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._armed: dict[int, tuple[float, Conn]] = {}
        self._fired: set[int] = set()
        self._tokens = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._waking = math.inf

    def arm(self, conn: Conn, seconds: float) -> int:
        """Start the clock on one wait; 0 s means no deadline."""
        if seconds <= 0:
            return 0
        with self._lock:
            token = next(self._tokens)
            due = time.monotonic() + seconds
            self._armed[token] = (due, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="anagrapheus postgres watchdog", daemon=True)
                self._thread.start()
            if due < self._waking:
                # Woken only for a deadline before the one it sleeps until: not once per statement.
                self._changed.notify()
        return token

    def disarm(self, token: int) -> bool:
        """Stop the clock; return whether the deadline passed and the connection was cut."""
        if not token:
            return False
        with self._lock:
            self._armed.pop(token, None)
            fired = token in self._fired
            self._fired.discard(token)
        return fired

    def _run(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                for token in [t for t, (due, _) in self._armed.items() if due <= now]:
                    _, conn = self._armed.pop(token)
                    self._fired.add(token)
                    _cut(conn)
                self._waking = min((due for due, _ in self._armed.values()), default=math.inf)
                self._changed.wait(None if self._waking == math.inf else self._waking - now)


def _cut(conn: Conn) -> None:
    """Shut the connection's socket down, so that the thread waiting on it wakes with a lost connection."""
    with suppress(OSError, psycopg.Error, ValueError), socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()


class _Exchange:
    """One exchange with the server under the answer deadline (see `PostgresEventStore._io`).

    A class, not a generator-based context manager: a unit makes several exchanges, and entering and leaving
    a generator costs each of them time on the client.
    """

    __slots__ = ("_action", "_conn", "_store", "_token")

    def __init__(self, store: PostgresEventStore, conn: Conn, action: str) -> None:
        self._store = store
        self._conn = conn
        self._action = action
        self._token = 0

    def __enter__(self) -> None:
        self._token = _WATCHDOG.arm(self._conn, self._store._answer_within)  # pyright: ignore[reportPrivateUsage]

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        fired = _WATCHDOG.disarm(self._token)
        if error is None:
            return
        raised = self._store._exchange_failed(self._conn, self._action, error, fired)  # pyright: ignore[reportPrivateUsage]
        if raised is not None and raised is not error:
            raise raised


def _event_arrays(events: Sequence[StoredEvent]) -> dict[str, list[Any]]:
    """The parameters of an append's statement: the events' rows, one list a column."""
    columns = list(zip(*(event_row(event) for event in events), strict=True)) or [() for _ in EVENT_COLUMN_NAMES]
    return {name: list(column) for name, column in zip(EVENT_COLUMN_NAMES, columns, strict=True)}


def _parameter(value: str | bool | None) -> bytes | None:
    """A parameter as libpq sends it: text in UTF-8 (the connections' encoding), a boolean as `t` or `f`."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    return value.encode()


def _run(
    conn: Conn, statement: Prepared, params: Sequence[str | bool | None], *, prepared: Preparations
) -> pq.abc.PGresult:
    """Run a prepared statement on an idle pooled connection, through libpq; raise its error as psycopg would.

    Prepared on the connection at its first use there (as `prepared` records), and again if it was dropped since
    (psycopg deallocates every prepared statement after a rollback on the connection): a statement the server does
    not know fails at its bind, having done nothing.
    """
    values = [_parameter(value) for value in params]
    pgconn = conn.pgconn
    with conn.lock:
        _prepare(conn, statement, prepared=prepared)
        try:
            return _exchange(conn, pgconn.send_query_prepared, statement.name, values)
        except psycopg.errors.InvalidSqlStatementName:
            _prepare(conn, statement, prepared=prepared, again=True)
            return _exchange(conn, pgconn.send_query_prepared, statement.name, values)


def _exchange(conn: Conn, send: Callable[[bytes, Any], None], name: bytes, argument: Any) -> pq.abc.PGresult:
    """Send one command and wait for its one result; a failed one raised as its psycopg error."""
    send(name, argument)
    results = conn.wait(generators.execute(conn.pgconn))
    result = results[-1]
    if result.status == pq.ExecStatus.FATAL_ERROR:
        raise psycopg.errors.error_from_result(result, encoding="utf-8")
    return result


def _prepare(conn: Conn, *statements: Prepared, prepared: Preparations, again: bool = False) -> None:
    """Prepare on `conn` (outside a pipeline) those of `statements` not in `prepared` for it (`again`: each of them).

    Again after the server said one was gone: psycopg drops them all at once, but one made again since is there.
    """
    names = prepared.get(conn)
    if names is None:
        names = prepared[conn] = set()
    for statement in statements:
        if again or statement.name not in names:
            with suppress(psycopg.errors.DuplicatePreparedStatement):
                _exchange(conn, conn.pgconn.send_prepare, statement.name, statement.text)
            names.add(statement.name)


def _answer(conn: Conn, *, synced: bool = False) -> pq.abc.PGresult:
    """In the store's pipeline, the answer of the statement sent last (and, `synced`, the sync after it).

    Its error is raised once what the server sends for it has been read: the connection is left at a boundary.
    """
    conn.wait(generators.send(conn.pgconn))
    results = conn.wait(generators.fetch_many(conn.pgconn))
    if synced:
        conn.wait(generators.fetch_many(conn.pgconn))  # the sync's own result: the transaction is over
    result = results[-1]
    if result.status == pq.ExecStatus.FATAL_ERROR:
        raise psycopg.errors.error_from_result(result, encoding="utf-8")
    return result


def _listed(
    conn: Conn, listing: Prepared, params: list[bytes | None], closing: Prepared, *, prepared: Preparations
) -> pq.abc.PGresult:
    """In the store's pipeline, send `listing` and read its answer, the transaction left open (a flush, no sync).

    Dropped since it was prepared (see `_run`), the statements are prepared again and the listing sent again: the
    failed one did nothing.
    """
    pgconn = conn.pgconn
    pgconn.send_query_prepared(listing.name, params)
    pgconn.send_flush_request()
    try:
        return _answer(conn)
    except psycopg.errors.InvalidSqlStatementName:
        _leave_pipeline(conn, sync_sent=False)
        _prepare(conn, listing, closing, prepared=prepared, again=True)
        pgconn.enter_pipeline_mode()
        pgconn.send_query_prepared(listing.name, params)
        pgconn.send_flush_request()
        return _answer(conn)


def _leave_pipeline(conn: Conn, *, sync_sent: bool) -> None:
    """Leave the store's pipeline on a step that failed: what it sent rolled back, the connection left usable.

    A connection that cannot be brought back (lost, or cut by the watchdog) is closed: the pool drops it.
    """
    pgconn = conn.pgconn
    try:
        if not sync_sent:
            # Rolled back, not committed at the sync: the listing's locks go, nothing is written.
            pgconn.send_query_params(b"ROLLBACK", None)
            pgconn.pipeline_sync()
            conn.wait(generators.send(pgconn))
            for _ in range(8):
                results = conn.wait(generators.fetch_many(pgconn))
                if results and results[-1].status == pq.ExecStatus.PIPELINE_SYNC:
                    break
            else:
                raise psycopg.OperationalError("the pipeline's sync did not arrive")
        pgconn.exit_pipeline_mode()
    except (psycopg.Error, OSError):
        conn.close()


def _may_be(outcome: UnitOutcome) -> str:
    """What a settle that ended once its COMMIT was sent tells its caller: the unit's outcome is to be looked up."""
    return (
        f"so it may be {outcome} already: its outcome (PinLedger.state, the store's unit_outcome) says whether, and"
        " settling it again settles it once (refused with UnitClosed if it was)"
    )


def _retryable(error: StoreError) -> bool:
    """Whether a failed step may succeed on a fresh connection: the connection was lost, or a conflict aborted it."""
    # Classified by the psycopg error: a StoreUnavailable made from a StoreError (a wait cut by its deadline) is not.
    cause = error.__cause__
    return isinstance(cause, psycopg.Error) and failure(cause) == "retry"


def _check_seconds(name: str, value: float, *, zero: bool = True) -> float:
    """Refuse a bound that is not a finite number of seconds >= 0 (> 0 unless `zero` may turn it off)."""
    number = cast("object", value)
    least = 0 if zero else math.ulp(0)
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number) or number < least:
        relation = ">= 0" if zero else "> 0"
        raise UsageError(f"{name} must be a finite number of seconds {relation}, not {value!r}")
    return float(number)


def _idle_connection_alive(conn: Conn) -> bool:
    """Whether an idle connection still stands: nothing may arrive on one but the server's notice that it ended."""
    try:
        # A closed connection has no socket: psycopg says so with an error.
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        if readable:
            conn.execute("SELECT 1")
    except (OSError, ValueError, psycopg.Error):
        return False
    return True


class PostgresEventStore:
    """The event log and pin scratch in one PostgreSQL schema, shared by writers on many machines.

    Seq is gap-free and strictly increasing in commit order: each append takes its numbers from a
    counter row whose lock it holds until it commits. Connections come from a `psycopg_pool` pool, so
    threads work in parallel; a unit of work is held by one store at a time (see `UnitBusy`). Every wait
    on the server is bounded and ends in `StoreUnavailable` (see the how-to for the bounds).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "anagrapheus",
        clock: Callable[[], datetime] = utc_now,
        new_event_id: Callable[[], str] = new_uuid7,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        unit_wait: float = 2.0,
        statement_timeout: float = 30.0,
        lock_timeout: float = 10.0,
        idle_in_transaction_timeout: float = 300.0,
        pool_timeout: float = 30.0,
        keepalive_idle: float = 10.0,
        keepalive_interval: float = 5.0,
        keepalive_count: int = 3,
    ) -> None:
        if pool_size < 1:
            raise UsageError("pool_size must be >= 1")
        count = cast("object", keepalive_count)  # typed, but a caller may pass anything at run time
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise UsageError(f"keepalive_count must be an integer >= 1, not {keepalive_count!r}")
        self.place = PostgresPlace.of(dsn, schema)
        """Where the store lives: server, database and schema (never the password)."""
        self._clock = clock
        self._new_event_id = new_event_id
        self._connect_timeout = _check_seconds("connect_timeout", connect_timeout, zero=False)
        statement = _check_seconds("statement_timeout", statement_timeout)
        self._answer_within = statement + _ANSWER_GRACE if statement else 0.0
        # Its own id, not one from `new_event_id`: a seeded id source would give two workers one holder.
        self._holder = new_uuid7()
        self._dsn = self._conninfo(
            dsn,
            statement_timeout=statement,
            lock_timeout=_check_seconds("lock_timeout", lock_timeout),
            idle_in_transaction_timeout=_check_seconds("idle_in_transaction_timeout", idle_in_transaction_timeout),
            keepalives=(
                _check_seconds("keepalive_idle", keepalive_idle, zero=False),
                _check_seconds("keepalive_interval", keepalive_interval, zero=False),
                keepalive_count,
            ),
        )
        self._pool_timeout = _check_seconds("pool_timeout", pool_timeout, zero=False)
        self._closed_store = False
        self._tx: ContextVar[_Transaction | None] = ContextVar(f"anagrapheus_pg_{id(self)}", default=None)
        self._leases = UnitLeases(self._try_lease, wait=_check_seconds("unit_wait", unit_wait))
        self._beacon_conn: Conn | None = None
        self._beacon_lock = threading.Lock()
        self._sql = PostgresStatements.of(self.place)
        # This store's own record: its pool's connections are its own, and so is what is prepared on them.
        self._prepared: Preparations = weakref.WeakKeyDictionary()
        # A direct connection first: a refused or misconfigured server surfaces with libpq's own reason,
        # not as a pool timeout.
        with self._connect() as conn:
            if not is_migrated(conn, self.place):
                migrate(conn, self.place)
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            self._dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True},
            open=False,
            name=f"anagrapheus {self.place}",
            timeout=self._pool_timeout,
        )
        with self.place.translated("opening the connection pool"):
            self._pool.open(wait=True, timeout=self._connect_timeout)

    def _conninfo(
        self,
        dsn: str,
        *,
        statement_timeout: float,
        lock_timeout: float,
        idle_in_transaction_timeout: float,
        keepalives: tuple[float, float, int],
    ) -> str:
        """The DSN with the store's bounds on every connection, after whatever server options the DSN sets."""
        idle, interval, count = keepalives
        settings = {
            "statement_timeout": statement_timeout,
            "lock_timeout": lock_timeout,
            "idle_in_transaction_session_timeout": idle_in_transaction_timeout,
        }
        options = [str(conninfo_to_dict(dsn).get("options") or "")]
        options += [f"-c {name}={round(seconds * 1000)}" for name, seconds in settings.items()]
        # The server's side of keepalives: it drops the sessions, and with them the unit leases, of a vanished worker.
        options += [
            f"-c tcp_keepalives_idle={max(1, round(idle))}",
            f"-c tcp_keepalives_interval={max(1, round(interval))}",
            f"-c tcp_keepalives_count={count}",
        ]
        return make_conninfo(
            dsn,
            options=" ".join(option for option in options if option),
            connect_timeout=max(1, round(self._connect_timeout)),
            application_name=self._holder_name,
            # The draws' statements are run through libpq (see `_run`), their text encoded and decoded as UTF-8.
            client_encoding="UTF8",
            keepalives=1,
            keepalives_idle=max(1, round(idle)),
            keepalives_interval=max(1, round(interval)),
            keepalives_count=count,
            # Sent data left unacknowledged this long ends the connection (a partition during a request).
            tcp_user_timeout=round((idle + interval * count) * 1000),
        )

    @property
    def _holder_name(self) -> str:
        """The `application_name` of this store's connections: a holder lives while one of them does."""
        return f"anagrapheus {self._holder}"

    def _connect(self) -> Conn:
        with self.place.translated("connecting"):
            return psycopg.connect(self._dsn, autocommit=True)

    @override
    def __repr__(self) -> str:
        return f"PostgresEventStore({self.place})"

    # Connections, bounds and transactions.

    def _io(self, conn: Conn, action: str) -> _Exchange:
        """Run one exchange with the server under the answer deadline, its errors translated at the choke point."""
        return _Exchange(self, conn, action)

    def _exchange_failed(self, conn: Conn, action: str, error: BaseException, fired: bool) -> BaseException | None:
        """What an exchange that raised `error` raises instead (None: `error` itself); `fired`: its deadline passed."""
        if isinstance(error, psycopg.Error):
            try:
                with self.place.translated(self._failed_step(conn) or action):
                    raise error
            except StoreError as e:
                error = e
        if not isinstance(error, StoreError):
            return None
        if fired:
            unanswered = self._no_answer(action)
            unanswered.__cause__ = error
            return unanswered
        return error

    def _send(
        self, conn: Conn, action: str, query: bytes | sql.SQL | sql.Composed, params: Any = None
    ) -> psycopg.Cursor[tuple[Any, ...]]:
        """Send one statement of a step (in pipeline mode, it is answered when the trip ends); return its cursor."""
        with self._io(conn, action):
            cursor = conn.execute(query, params)
        tx = self._tx.get()
        assert tx is not None and tx.conn is conn, "a step's statements are sent in the store's transaction"
        tx.sent.append((cursor, action))
        return cursor

    def _failed_step(self, conn: Conn) -> str | None:
        """The step of the first statement sent in the open transaction that got no answer: the one that failed.

        In pipeline mode a statement's error arrives with a later read or with the COMMIT; the statements after
        the failed one are skipped by the server, and those before it were answered.
        """
        tx = self._tx.get()
        if tx is None or tx.conn is not conn:
            return None
        return next((action for cursor, action in tx.sent if cursor.pgresult is None), None)

    @contextmanager
    def _pipelined(self, conn: Conn) -> Generator[None]:
        """A transaction in pipeline mode: what is sent until the pipeline's one sync, committed there at once.

        No BEGIN or COMMIT is sent: the statements between two syncs are one transaction, and the server commits
        it at the sync (or rolls it back if one failed). Reading an answer on the way (a flush) costs a round trip
        but ends nothing. A step whose statements need no answer before the end is one round trip.
        """
        try:
            with conn.pipeline():
                try:
                    yield
                except BaseException:
                    # Refused, or failed, in the block: what was sent must not be committed at the sync.
                    with suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                    raise
        except psycopg.Error:
            with self.place.translated(self._failed_step(conn) or "committing a transaction"):
                raise

    def _no_answer(self, action: str) -> StoreUnavailable:
        """The error for a wait the watchdog cut; raised from the StoreError, so the step is not tried again."""
        return StoreUnavailable(
            f"{action} got no answer from {self.place} within {self._answer_within:g} s (a stalled server"
            " or a network partition); try again once the server answers"
        )

    @contextmanager
    def _connection(self) -> Generator[Conn]:
        """The connection of the caller's open transaction, or one borrowed from the pool."""
        tx = self._tx.get()
        if tx is not None:
            if not tx.lock.acquire(timeout=self._pool_timeout):
                raise StoreUnavailable(
                    f"waited {self._pool_timeout:g} s for another thread of this transaction to finish its block"
                    f" on {self.place} (a savepoint block left open across an await?)"
                )
            try:
                yield tx.conn
            finally:
                tx.lock.release()
            return
        if self._closed_store:
            raise StoreError(f"using the store failed on {self.place}: it is closed")
        with self.place.translated("borrowing a connection"), self._pool.connection() as conn:
            yield conn

    def _borrowed(self) -> Conn:
        """A connection borrowed from the pool, for a step that gives it back itself (`_pool.putconn`)."""
        if self._closed_store:
            raise StoreError(f"using the store failed on {self.place}: it is closed")
        try:
            return self._pool.getconn()
        except psycopg.Error:
            with self.place.translated("borrowing a connection"):
                raise

    def _row(
        self, action: str, statement: Prepared, params: Sequence[str | bool | None], *, savepoint: bool = False
    ) -> tuple[Any, ...] | None:
        """Make a step of one statement and return its first row.

        On a pooled connection, in a transaction of its own, the statement prepared there and run through libpq
        (`_run`); inside a caller's transaction, in it (behind a savepoint with `savepoint`, so that a refusal
        ends the step alone). The pooled path is `_connection`'s written out: a draw makes several such steps,
        and each context manager costs it time on the client.
        """
        if self._tx.get() is not None:
            with ExitStack() as stack:
                if savepoint:
                    stack.enter_context(self._transaction())
                conn = stack.enter_context(self._connection())
                with self._io(conn, action):
                    return conn.execute(statement.query, params).fetchone()
        conn = self._borrowed()
        try:
            with _Exchange(self, conn, action):
                return statement.row(_run(conn, statement, params, prepared=self._prepared))
        finally:
            self._pool.putconn(conn)

    def _retried(
        self,
        step: Callable[[], T],
        *,
        unless: Callable[[], bool] = lambda: False,
        fresh: Callable[[], None] | None = None,
    ) -> T:
        """Run an idempotent step; if its connection was lost (or a conflict aborted it), run it again, fresh.

        The one retry loop of the store: `_TRIES` in all, each after `fresh()` (by default, the pool testing its
        idle connections). A pooled step is not retried inside a caller's transaction: the transaction itself
        was lost with its connection. Nor when `unless()` says the failure may have come after the step took
        effect. The last failure is raised as it was classified: a lost connection as `StoreUnavailable`.
        """
        tries = 1
        while True:
            try:
                return step()
            except StoreError as e:
                caller_tx = fresh is None and self._tx.get() is not None
                if tries >= _TRIES or not _retryable(e) or caller_tx or unless():
                    raise
            tries += 1
            if fresh is None:
                # The pool may hold more connections the same cause ended (an idle timeout, a restart): test them.
                with suppress(psycopg.Error):
                    self._pool.check()
            else:
                fresh()

    def transaction(self) -> AbstractContextManager[None]:
        """Run the block in one transaction on one connection; nested blocks are savepoints.

        The transaction belongs to the context that opened it: the asyncio task (or the thread) and the
        worker threads it hands work to (`asyncio.to_thread`, as `acommit` does), which join it. Another
        task or thread works on a connection of its own. Left idle longer than `idle_in_transaction_timeout`,
        it is ended by the server.
        """
        # Not pipelined: the block may wait on anything, and a server does not time out a pipelined session,
        # which never reports itself idle.
        return self._transaction(pipelined=False)

    @contextmanager
    def _transaction(self, *, pipelined: bool = True) -> Generator[None]:
        """A transaction for the store's own steps, pipelined when it is outermost (see `transaction`)."""
        tx = self._tx.get()
        with self._connection() as conn:
            token = None
            if tx is None:
                tx = _Transaction(conn)
                token = self._tx.set(tx)
            # Beginning and ending are the server's to answer, each within the deadline; the block in between
            # may wait on anything (a model call).
            armed = [_WATCHDOG.arm(conn, self._answer_within)]
            fired: list[bool] = []
            try:
                with self.place.translated("committing a transaction"), ExitStack() as stack:
                    stack.callback(lambda: fired.append(_WATCHDOG.disarm(armed[0])))
                    if token is not None and pipelined:
                        stack.enter_context(self._pipelined(conn))
                    else:
                        stack.enter_context(conn.transaction())
                    fired.append(_WATCHDOG.disarm(armed[0]))
                    try:
                        yield
                    finally:
                        armed[0] = _WATCHDOG.arm(conn, self._answer_within)
            except StoreError as e:
                if any(fired):
                    raise self._no_answer("a transaction") from e
                raise
            finally:
                if token is not None:
                    try:
                        self._tx.reset(token)
                    except ValueError:
                        # Left in another context than it was entered in (a generator closed elsewhere).
                        self._tx.set(None)
        if token is not None:
            for hook in tx.after_commit:
                hook()

    def _after_commit(self, hook: Callable[[], None]) -> None:
        """Run `hook` once the outermost transaction, open here, commits; a rollback drops it."""
        tx = self._tx.get()
        assert tx is not None, "called inside transaction()"
        tx.after_commit.append(hook)

    # The event log.

    def append(self, events: Sequence[PendingEvent], *, expected_last_seq: int | None = None) -> list[StoredEvent]:
        """Append events in one transaction; with `expected_last_seq`, raise `SeqConflict` if the log moved."""
        if not events and expected_last_seq is None:
            return []
        with self._transaction(), self._connection() as conn:
            appended = self._append_statements(conn, events, expected_last_seq=expected_last_seq)
        return appended()

    def _append_statements(
        self, conn: Conn, events: Sequence[PendingEvent], *, expected_last_seq: int | None
    ) -> Callable[[], list[StoredEvent]]:
        """Send the statements that number and insert `events`; return what reads their answer.

        The seq numbers are taken from the log_head row by the server and read back by the insert, so nothing
        waits on an answer in between: the row's lock is held from there to the commit, sent in the same round
        trip when the transaction is the store's own. With `expected_last_seq` the numbers are read first, and
        nothing is appended unless the log ends there (`SeqConflict`).
        """
        stamped_events = stamped(events, after=0, clock=self._clock, new_event_id=self._new_event_id)
        count = len(stamped_events)
        if not count and expected_last_seq is None:
            return lambda: []  # nothing to number: the log_head row is not locked
        taken = self._send(
            conn,
            "taking seq numbers",
            self._sql.take_seq,
            (count, count),
        )
        numbered: list[int] = []
        if expected_last_seq is not None:
            numbered.append(self._after(taken))
            if numbered[0] != expected_last_seq:
                # Raising rolls the transaction back, and with it the numbers taken.
                raise SeqConflict(expected=expected_last_seq, actual=numbered[0])
        if count:
            self._send(
                conn,
                "appending events",
                self._sql.append_numbered,
                {"n": count, **_event_arrays(stamped_events)},
            )

        def read() -> list[StoredEvent]:
            after = numbered[0] if numbered else self._after(taken)
            return [replace(event, seq=after + event.seq) for event in stamped_events]

        return read

    def _after(self, taken: psycopg.Cursor[tuple[Any, ...]]) -> int:
        """The seq the numbers taken by an append follow, read from its answer."""
        with self._io(taken.connection, "taking seq numbers"):
            row = taken.fetchone()
        assert row is not None, "the log_head row is created by the first migration"
        return int(row[0])

    def append_stored(self, events: Sequence[StoredEvent]) -> None:
        """Append events copied from another log verbatim (seq, ids, times); the first must follow `last_seq()`."""
        if not events:
            return
        check_contiguous(events)
        with self._transaction(), self._connection() as conn:
            taken = self._send(
                conn,
                "taking seq numbers",
                self._sql.take_seq_at,
                (events[-1].seq, events[0].seq - 1),
            )
            if taken.fetchone() is None:
                raise SeqConflict(expected=events[0].seq - 1, actual=self.last_seq())
            self._send(
                conn,
                "appending events",
                self._sql.append_stored,
                _event_arrays(events),
            )

    def last_seq(self) -> int:
        """Return the seq of the last committed event, or 0 for an empty log."""

        def read() -> int:
            with self._connection() as conn, self._io(conn, "reading the last seq"):
                row = conn.execute(self._sql.last_seq).fetchone()
            return 0 if row is None else int(row[0])

        return self._retried(read)

    def read(
        self,
        *,
        since: int = 0,
        limit: int | None = None,
        namespace: str | None = None,
        type: str | None = None,
    ) -> Iterator[StoredEvent]:
        """Stream events with seq > `since` in seq order, a page at a time, optionally filtered."""
        if limit is not None and limit < 0:
            raise UsageError("limit must be >= 0")
        filters = [value for value in (namespace, type) if value is not None]
        query = self._sql.read_events(namespace=namespace is not None, type=type is not None)
        return self._pages(query, since, filters, limit)

    def _pages(self, query: sql.Composed, since: int, filters: list[Any], limit: int | None) -> Iterator[StoredEvent]:
        remaining = limit
        after = since
        while remaining is None or remaining > 0:
            page = _READ_PAGE if remaining is None else min(_READ_PAGE, remaining)

            # Each page is its own statement on a pooled connection: a slow consumer holds nothing open,
            # and seq order is commit order, so no event can appear later behind a page already read.
            def fetch(after: int = after, page: int = page) -> list[tuple[Any, ...]]:
                with self._connection() as conn, self._io(conn, "reading events"):
                    return conn.execute(query, (after, *filters, page)).fetchall()

            rows = self._retried(fetch)
            for row in rows:
                yield StoredEvent(*row)
            if len(rows) < page:
                return
            after = int(rows[-1][0])
            if remaining is not None:
                remaining -= len(rows)

    # Unit leases: one store at a time draws in a unit.
    #
    # A lease is a row naming the holder store; the holder lives while any connection of its own does (they all
    # carry its name as `application_name`). A dedicated, never-idle-timed-out connection keeps it alive between
    # draws. Another store takes a unit only from a holder with no connection left (closed, killed, vanished); and
    # every write checks in its own transaction that the row still names its store, so a holder that lost the
    # unit meanwhile is refused rather than drawing beside the new one.

    def _claim(self, unit_id: str) -> None:
        """Hold the unit's lease for this store, waiting up to `unit_wait` s; raise `UnitBusy` if another holds it."""
        self._beacon()
        self._leases.hold(unit_id)

    def _beacon(self) -> Conn:
        """The connection that shows this store alive, opened again if the server or the network dropped it."""
        with self._beacon_lock:
            if self._closed_store:
                raise StoreError(f"using the store failed on {self.place}: it is closed")
            conn = self._beacon_conn
            if conn is not None and _idle_connection_alive(conn):
                return conn
            self._drop_beacon()
            conn = self._beacon_conn = self._connect()
            with self._io(conn, "configuring the lease connection"):
                # Idle between draws by design: a server's idle_session_timeout (PostgreSQL 14+) must not end it.
                conn.execute(
                    "SELECT set_config('idle_session_timeout', '0', false)"
                    " WHERE current_setting('server_version_num')::int >= 140000"
                )
            return conn

    def _try_lease(self, unit_id: str) -> bool:
        # On the lease connection, not the caller's transaction's: retried inside one too.
        return self._retried(lambda: self._take(self._beacon(), unit_id), fresh=self._renew_beacon)

    def _renew_beacon(self) -> None:
        """Drop the lease connection, lost after it looked alive (its end was still on the way): the next opens it."""
        with self._beacon_lock:
            self._drop_beacon()

    def _drop_beacon(self) -> None:
        """Close the lease connection, if open; the caller holds `_beacon_lock`."""
        if self._beacon_conn is not None:
            self._beacon_conn.close()
            self._beacon_conn = None

    def _take(self, conn: Conn, unit_id: str) -> bool:
        """Take the unit's lease row for this store, if free, already its own, or left by a holder with no session.

        One statement, one transaction (see `take_lease` in the 0005_pin_functions migration).
        """
        try:
            with self._io(conn, f"taking the lease of unit {unit_id}"):
                row = conn.execute(
                    self._sql.take_lease,
                    (unit_id, self._holder),
                ).fetchone()
        except StoreError as e:
            if isinstance(e.__cause__, psycopg.errors.LockNotAvailable):
                return False  # the holder is writing in the unit right now
            raise
        assert row is not None
        return bool(row[1])

    def _fenced(self, unit_id: str, row: tuple[Any, ...] | None, *, raw: str | None = None) -> None:
        """Refuse a write to a unit that is closed, or whose lease another store took (this one lost it)."""
        assert row is not None
        closed, holder = row[0], row[1]
        if closed is not None:
            raise UnitClosed(unit_id, state=closed, raw=raw)
        if holder != self._holder:
            self._leases.held.discard(unit_id)
            raise UnitBusy(unit_id, waited=0)

    def _release(self, unit_id: str) -> None:
        """Forget a settled unit's lease (its row went with the settling transaction)."""
        self._leases.held.discard(unit_id)

    # The pin scratch.

    def scratch_get(self, unit_id: str, key: str) -> ScratchPin | None:
        """Return the unit's pin for `key`, if drawn; the first call for a unit takes its lease."""
        self._claim(unit_id)

        def read() -> ScratchPin | None:
            with self._connection() as conn, self._io(conn, "reading scratch"):
                row = conn.execute(
                    self._sql.read_pin,
                    (unit_id, key),
                ).fetchone()
            return None if row is None else ScratchPin(*row)

        return self._retried(read)

    def _lease_name(self, unit_id: str) -> str:
        return f"anagrapheus unit {self.place.schema} {unit_id}"

    def _outcome(self, conn: Conn, unit_id: str) -> UnitOutcome | None:
        with self._io(conn, "reading a unit's outcome"):
            row = conn.execute(self._sql.unit_outcome, (unit_id,)).fetchone()
        return None if row is None else row[0]

    def unit_outcome(self, unit_id: str) -> UnitOutcome | None:
        """Return how the unit was closed, or None while it is open (or unknown)."""

        def read() -> UnitOutcome | None:
            with self._connection() as conn:
                return self._outcome(conn, unit_id)

        return self._retried(read)

    def closed_units(self) -> Iterator[ClosedUnit]:
        """Stream the units closed for good, by unit id, a page at a time."""
        query = self._sql.list_closed_units
        after: str | None = None
        while True:
            with self._connection() as conn, self.place.translated("listing closed units"):
                rows = conn.execute(query, {"after": after, "page": _READ_PAGE}).fetchall()
            for unit_id, outcome in rows:
                yield ClosedUnit(str(unit_id), outcome)
            if len(rows) < _READ_PAGE:
                return
            after = str(rows[-1][0])

    def import_closed_units(self, units: Sequence[ClosedUnit]) -> int:
        """Record units closed in another store (an outcome recorded here already is kept); return how many are new."""
        for unit in units:
            check_outcome(unit.outcome)
        if not units:
            return 0
        with self.transaction(), self._connection() as conn, self.place.translated("recording closed units"):
            row = conn.execute(
                self._sql.import_closed_units,
                ([unit.unit_id for unit in units], [unit.outcome for unit in units]),
            ).fetchone()
        return 0 if row is None else int(row[0])

    def scratch_put(self, unit_id: str, key: str, *, kind: str, raw: str, fingerprint: str | None) -> ScratchPin:
        """Write a first draw durably (attempts 1, next draw number) and return the key's pin (see the port).

        Raises `UnitClosed` (carrying `raw`) if the unit was committed or abandoned meanwhile. A write whose
        connection was lost (an idle timeout, a restart) is made once more on a fresh connection. One statement
        (`put_pin`): the unit's lock, the fenced write and the commit. The unit's lock, not one of this store's,
        keeps two threads from taking one draw number: the write after it sees what the one before committed.
        """
        self._claim(unit_id)
        query = self._sql.put_pin
        params = (unit_id, key, kind, raw, fingerprint, self._holder, self._lease_name(unit_id))

        def write() -> ScratchPin:
            row = self._row("writing scratch", query, params, savepoint=True)
            self._fenced(unit_id, row, raw=raw)
            assert row is not None
            return ScratchPin(*row[2:])

        return self._retried(write)

    def scratch_reuse(self, unit_id: str, key: str) -> ScratchPin | None:
        """Count one more attempt at the unit's pin for `key` and return it, or None if not drawn, in one step.

        Raises `UnitClosed` if the unit is committed or abandoned, and `UnitBusy` if another store took the unit.
        """
        # A held unit's ask (every one after its first) goes straight to the reuse.
        first = None if unit_id in self._leases.held else self._retried(lambda: self._take_and_reuse(unit_id, key))
        if first is not None:
            return first[0]
        self._claim(unit_id)
        query = self._sql.reuse_pin

        def write() -> ScratchPin | None:
            return self._reused(unit_id, self._row("reusing a pin", query, (unit_id, key, self._holder, False)))

        return self._retried(write)

    def _reused(self, unit_id: str, row: tuple[Any, ...] | None) -> ScratchPin | None:
        """The pin `reuse_pin` counted an attempt at, or None if not drawn (refused if the unit is not this one's).

        Its fence is read after the update, in a statement of its own: one that waited on a pin being settled sees
        the unit closed, as a separate look afterwards would.
        """
        assert row is not None
        if row[4] is None:
            self._fenced(unit_id, row[1:3])
            return None
        return ScratchPin(*row[3:])

    def _take_and_reuse(self, unit_id: str, key: str) -> tuple[ScratchPin | None] | None:
        """A unit's first ask in one statement: its lease taken, then the pin reused (`reuse_pin`).

        None when that could not be done (another store holds the unit, a statement was refused, or a caller's
        transaction is open, which the lease must not join): the usual steps take over, waiting or saying why.
        """
        if self._tx.get() is not None:
            return None
        self._beacon()  # the connection that keeps this store's leases alive between draws
        with self._leases.lock:
            if unit_id in self._leases.held:
                return None
            try:
                row = self._row(
                    f"taking the lease of unit {unit_id}", self._sql.reuse_pin, (unit_id, key, self._holder, True)
                )
            except StoreError as e:
                if isinstance(e.__cause__, psycopg.errors.LockNotAvailable):
                    return None  # its holder is writing in it: the usual steps wait for it
                if isinstance(e, StoreUnavailable):
                    raise  # lost (the caller tries once more) or a bound ran out
                return None  # refused: the usual steps make the statements again and say which one failed
            if row is None or not row[0]:
                return None
            self._leases.held.add(unit_id)
        return (self._reused(unit_id, row),)

    def scratch_list(self, unit_id: str) -> list[ScratchPin]:
        """Return the unit's pins in draw order (reading takes no lease)."""

        def read() -> list[ScratchPin]:
            with self._connection() as conn, self._io(conn, "listing scratch"):
                rows = conn.execute(self._sql.list_pins, (unit_id,)).fetchall()
            return [ScratchPin(*row) for row in rows]

        return self._retried(read)

    def open_units(self) -> list[OpenUnit]:
        """Return the units that have pins in scratch, oldest first draw first."""

        def read() -> list[OpenUnit]:
            with self._connection() as conn, self._io(conn, "listing open units"):
                rows = conn.execute(self._sql.list_open_units).fetchall()
            return [OpenUnit(str(unit_id), int(count)) for unit_id, count in rows]

        return self._retried(read)

    def settle_unit(
        self,
        unit_id: str,
        *,
        outcome: UnitOutcome,
        events: Callable[[list[ScratchPin]], Sequence[PendingEvent]],
    ) -> list[StoredEvent]:
        """List, promote and clear the unit's pins and record it closed, in one transaction (see the port).

        Inside a caller's `transaction()` it joins it: the unit is closed if, and when, that commits.
        """
        check_outcome(outcome)
        self._claim(unit_id)
        committing: list[bool] = []
        if self._tx.get() is None:
            settle = lambda: self._settle_pooled(unit_id, outcome, events, committing)  # noqa: E731
        else:
            settle = lambda: self._settle_joined(unit_id, outcome, events, committing)  # noqa: E731
        # A connection lost before COMMIT was sent rolled everything back: settling again is safe. Lost at the
        # COMMIT itself, the unit may be closed already, and the caller must look (`unit_outcome`) before retrying.
        return self._retried(settle, unless=lambda: bool(committing))

    def _settle_pooled(
        self,
        unit_id: str,
        outcome: UnitOutcome,
        events: Callable[[list[ScratchPin]], Sequence[PendingEvent]],
        committing: list[bool],
    ) -> list[StoredEvent]:
        """Settle on a pooled connection in libpq's pipeline mode: two round trips, two statements, one transaction.

        The pins are listed under the unit's locks (`list_to_settle`), flushed and read with the transaction left
        open; then the events are appended, the unit closed (`close_unit`) and the transaction committed at the
        pipeline's sync, in one trip, so the log_head lock is held for that trip alone. psycopg's own pipeline
        did the same at twice the client's time; its statements are prepared on the connection before.
        """
        conn = self._borrowed()
        listing, closing = self._sql.list_to_settle, self._sql.close_unit
        pgconn = conn.pgconn
        try:
            with conn.lock:
                if not {listing.name, closing.name} <= self._prepared.get(conn, set()):
                    with _Exchange(self, conn, "listing scratch"):
                        _prepare(conn, listing, closing, prepared=self._prepared)
                pgconn.enter_pipeline_mode()
                sync_sent = False
                try:
                    params = [_parameter(unit_id), _parameter(self._holder), _parameter(self._lease_name(unit_id))]
                    with _Exchange(self, conn, "listing scratch"):
                        listed = _listed(conn, listing, params, closing, prepared=self._prepared)
                    rows = listing.rows(listed)
                    self._fenced(unit_id, rows[0])
                    pins = [ScratchPin(*row[2:]) for row in rows[1:]]
                    stamped_events = stamped(events(pins), after=0, clock=self._clock, new_event_id=self._new_event_id)
                    # The events as one JSON text, not an array a column: the JSON encoder quotes them all in C.
                    payload = json.dumps([event_row(event) for event in stamped_events], ensure_ascii=False)
                    committing.append(True)
                    with _Exchange(self, conn, "closing the unit"):
                        pgconn.send_query_prepared(
                            closing.name, [_parameter(unit_id), _parameter(outcome), payload.encode()]
                        )
                        pgconn.pipeline_sync()
                        sync_sent = True
                        closed = _answer(conn, synced=True)
                    pgconn.exit_pipeline_mode()
                except BaseException as e:
                    _leave_pipeline(conn, sync_sent=sync_sent)
                    if sync_sent and isinstance(e, StoreUnavailable) and conn.closed:
                        raise self._undecided(unit_id, outcome, e) from e
                    if sync_sent and not isinstance(e, StoreError):
                        # A Ctrl-C (or a bug) while the COMMIT is out: raised as it is, saying what it left undecided.
                        e.add_note(f"unit {unit_id}'s closing was sent when this was raised, {_may_be(outcome)}")
                    raise
        finally:
            self._pool.putconn(conn)
        self._release(unit_id)
        after = closing.row(closed)
        assert after is not None
        return [replace(event, seq=after[0] + event.seq) for event in stamped_events]

    def _undecided(self, unit_id: str, outcome: UnitOutcome, error: StoreUnavailable) -> StoreUnavailable:
        """The error for a settle whose connection was lost once its COMMIT was sent: it may have taken effect.

        Raised from the StoreError, so it is not settled again on its own; settling again is safe, for the listing
        refuses a closed unit.
        """
        return StoreUnavailable(
            f"{error}; the connection went after unit {unit_id}'s closing was sent, {_may_be(outcome)}"
        )

    def _settle_joined(
        self,
        unit_id: str,
        outcome: UnitOutcome,
        events: Callable[[list[ScratchPin]], Sequence[PendingEvent]],
        committing: list[bool],
    ) -> list[StoredEvent]:
        """Settle inside a caller's transaction, behind a savepoint: the unit is closed if, and when, that commits."""
        listing, closing = self._sql.list_to_settle.query, self._sql.close_unit.query
        with self._transaction(), self._connection() as conn:
            listed = self._send(conn, "listing scratch", listing, (unit_id, self._holder, self._lease_name(unit_id)))
            with self._io(conn, "listing scratch"):
                rows = listed.fetchall()
            self._fenced(unit_id, rows[0])
            pins = [ScratchPin(*row[2:]) for row in rows[1:]]
            stamped_events = stamped(events(pins), after=0, clock=self._clock, new_event_id=self._new_event_id)
            payload = json.dumps([event_row(event) for event in stamped_events], ensure_ascii=False)
            closed = self._send(conn, "closing the unit", closing, (unit_id, outcome, payload))
            self._after_commit(lambda: self._release(unit_id))
            committing.append(True)
        row = closed.fetchone()
        assert row is not None
        return [replace(event, seq=row[0] + event.seq) for event in stamped_events]

    def close(self) -> None:
        """Let go of this store's units and close its connections; the store cannot be used afterwards."""
        with self._leases.lock, self._beacon_lock:
            self._closed_store = True
            held = bool(self._leases.held)
            self._leases.held.clear()
            self._drop_beacon()
        if held:
            # Best effort: a lease left behind is taken over anyway, its holder having no connection left.
            with (
                suppress(StoreError, PoolTimeout),
                self._pool.connection() as conn,
                self._io(conn, "releasing unit leases"),
            ):
                conn.execute(self._sql.release_leases, (self._holder,))
        with self.place.translated("closing the store"):
            self._pool.close()

    def __enter__(self) -> PostgresEventStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
