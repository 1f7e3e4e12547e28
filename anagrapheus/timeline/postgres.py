"""PostgresEventStore: the event log and pin scratch in PostgreSQL, for many writers on many machines."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any, LiteralString

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from anagrapheus.errors import SeqConflict, StoreError, UnitClosed, UsageError
from anagrapheus.timeline.events import PendingEvent, StoredEvent, new_uuid7
from anagrapheus.timeline.postgres_schema import PostgresPlace, is_migrated, migrate
from anagrapheus.timeline.stamps import stamped, utc_now
from anagrapheus.timeline.store import (
    ClosedUnit,
    OpenUnit,
    ScratchPin,
    UnitLeases,
    UnitOutcome,
    check_contiguous,
    check_outcome,
    event_row,
)

__all__ = ["PostgresEventStore"]

_EVENT_COLUMNS: LiteralString = (
    "seq, event_id, namespace, type, schema_version, causation_id, correlation_id, created_at, payload"
)
_SCRATCH_COLUMNS: LiteralString = "unit_id, key, kind, raw, attempts, draw_no, fingerprint"
_READ_PAGE = 1000
# A unit lease outlives a vanished machine by about idle + interval * count seconds; a killed process
# closes its socket, and the server drops its leases at once.
_LEASE_KEEPALIVES: LiteralString = (
    "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3"
)

Conn = psycopg.Connection[tuple[Any, ...]]


def _owner() -> tuple[int, int]:
    """Who owns a transaction: the asyncio task if one runs here, else the thread."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return threading.get_ident(), id(task)


class PostgresEventStore:
    """The event log and pin scratch in one PostgreSQL schema, shared by writers on many machines.

    Seq is gap-free and strictly increasing in commit order: each append takes its numbers from a
    counter row whose lock it holds until it commits. Connections come from a `psycopg_pool` pool, so
    threads work in parallel; a unit of work is held by one store at a time (see `UnitBusy`).
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
    ) -> None:
        if pool_size < 1:
            raise UsageError("pool_size must be >= 1")
        self.place = PostgresPlace.of(dsn, schema)
        """Where the store lives: server, database and schema (never the password)."""
        self._dsn = dsn
        self._clock = clock
        self._new_event_id = new_event_id
        self._connect_timeout = connect_timeout
        self._held: dict[tuple[int, int], Conn] = {}
        self._held_lock = threading.Lock()
        self._leases = UnitLeases(self._try_lease, wait=unit_wait)
        self._lease_conn: Conn | None = None
        self._put_lock = threading.Lock()
        self._events = self.place.table("events")
        self._head = self.place.table("log_head")
        self._scratch = self.place.table("pin_scratch")
        self._closed = self.place.table("closed_units")
        # A direct connection first: a refused or misconfigured server surfaces with libpq's own reason,
        # not as a pool timeout.
        with self._connect() as conn:
            if not is_migrated(conn, self.place):
                migrate(conn, self.place)
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": max(1, round(connect_timeout))},
            open=False,
            name=f"anagrapheus {self.place}",
            timeout=connect_timeout,
        )
        with self.place.translated("opening the connection pool"):
            self._pool.open(wait=True, timeout=connect_timeout)

    def _connect(self) -> Conn:
        with self.place.translated("connecting"):
            return psycopg.connect(self._dsn, autocommit=True, connect_timeout=max(1, round(self._connect_timeout)))

    def __repr__(self) -> str:
        return f"PostgresEventStore({self.place})"

    # Connections and transactions.

    @contextmanager
    def _connection(self) -> Generator[Conn]:
        """The connection of the caller's open transaction, or one borrowed from the pool."""
        owner = _owner()
        with self._held_lock:
            held = self._held.get(owner)
        if held is not None:
            yield held
            return
        with self.place.translated("borrowing a connection"), self._pool.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Generator[None]:
        """Run the block in one transaction on one connection; nested blocks are savepoints."""
        owner = _owner()
        with self._connection() as conn:
            with self._held_lock:
                outer = owner not in self._held
                self._held[owner] = conn
            try:
                with self.place.translated("committing a transaction"), ExitStack() as stack:
                    if outer:
                        # Pipeline mode sends BEGIN with the first statement and the writes with COMMIT:
                        # a unit commit costs two round trips, not one per statement.
                        stack.enter_context(conn.pipeline())
                    stack.enter_context(conn.transaction())
                    yield
            finally:
                if outer:
                    with self._held_lock:
                        del self._held[owner]

    # The event log.

    def append(self, events: Sequence[PendingEvent], *, expected_last_seq: int | None = None) -> list[StoredEvent]:
        """Append events in one transaction; with `expected_last_seq`, raise `SeqConflict` if the log moved."""
        if not events and expected_last_seq is None:
            return []
        with self.transaction(), self._connection() as conn:
            with self.place.translated("taking seq numbers"):
                row = conn.execute(
                    sql.SQL("UPDATE {h} SET last_seq = last_seq + %s RETURNING last_seq").format(h=self._head),
                    (len(events),),
                ).fetchone()
            assert row is not None, "the log_head row is created by the first migration"
            last = int(row[0]) - len(events)
            if expected_last_seq is not None and expected_last_seq != last:
                # Raising rolls the transaction back, and with it the numbers taken.
                raise SeqConflict(expected=expected_last_seq, actual=last)
            stored = stamped(events, after=last, clock=self._clock, new_event_id=self._new_event_id)
            self._insert(conn, stored)
        return stored

    def _insert(self, conn: Conn, events: Sequence[StoredEvent]) -> None:
        insert = sql.SQL("INSERT INTO {e} ({c}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)").format(
            e=self._events, c=sql.SQL(_EVENT_COLUMNS)
        )
        with self.place.translated("appending events"), conn.cursor() as cur:
            cur.executemany(insert, [event_row(event) for event in events])

    def append_stored(self, events: Sequence[StoredEvent]) -> None:
        """Append events copied from another log verbatim (seq, ids, times); the first must follow `last_seq()`."""
        if not events:
            return
        check_contiguous(events)
        with self.transaction(), self._connection() as conn:
            with self.place.translated("taking seq numbers"):
                row = conn.execute(
                    sql.SQL("UPDATE {h} SET last_seq = %s WHERE last_seq = %s RETURNING last_seq").format(h=self._head),
                    (events[-1].seq, events[0].seq - 1),
                ).fetchone()
            if row is None:
                raise SeqConflict(expected=events[0].seq - 1, actual=self.last_seq())
            self._insert(conn, events)

    def last_seq(self) -> int:
        """Return the seq of the last committed event, or 0 for an empty log."""
        with self._connection() as conn, self.place.translated("reading the last seq"):
            row = conn.execute(sql.SQL("SELECT last_seq FROM {h}").format(h=self._head)).fetchone()
        return 0 if row is None else int(row[0])

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
        where: list[sql.Composable] = [sql.SQL("seq > %s")]
        filters: list[Any] = []
        if namespace is not None:
            where.append(sql.SQL("namespace = %s"))
            filters.append(namespace)
        if type is not None:
            where.append(sql.SQL("type = %s"))
            filters.append(type)
        query = sql.SQL("SELECT {c} FROM {e} WHERE {w} ORDER BY seq LIMIT %s").format(
            c=sql.SQL(_EVENT_COLUMNS), e=self._events, w=sql.SQL(" AND ").join(where)
        )
        return self._pages(query, since, filters, limit)

    def _pages(self, query: sql.Composed, since: int, filters: list[Any], limit: int | None) -> Iterator[StoredEvent]:
        remaining = limit
        after = since
        while remaining is None or remaining > 0:
            page = _READ_PAGE if remaining is None else min(_READ_PAGE, remaining)
            # Each page is its own statement on a pooled connection: a slow consumer holds nothing open,
            # and seq order is commit order, so no event can appear later behind a page already read.
            with self._connection() as conn, self.place.translated("reading events"):
                rows = conn.execute(query, (after, *filters, page)).fetchall()
            for row in rows:
                yield StoredEvent(*row)
            if len(rows) < page:
                return
            after = int(rows[-1][0])
            if remaining is not None:
                remaining -= len(rows)

    # Unit leases: one store at a time draws in a unit.

    def _claim(self, unit_id: str) -> None:
        """Hold the unit's lease for this store, waiting up to `unit_wait` s; raise `UnitBusy` if another holds it."""
        self._leases.hold(unit_id)

    def _try_lease(self, unit_id: str) -> bool:
        conn = self._lease_conn
        if conn is None or conn.closed:
            conn = self._lease_conn = self._connect()
            with self.place.translated("configuring the lease connection"):
                conn.execute(_LEASE_KEEPALIVES)
        try:
            with self.place.translated(f"taking the lease of unit {unit_id}"):
                row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (self._lease_name(unit_id),))
                taken = row.fetchone()
        except StoreError:
            # A broken lease connection took every lease with it: forget them, so each is taken again.
            self._drop_leases()
            raise
        return bool(taken and taken[0])

    def _lease_name(self, unit_id: str) -> str:
        return f"anagrapheus unit {self.place.schema} {unit_id}"

    def _release(self, unit_id: str) -> None:
        with self._leases.lock:
            if unit_id not in self._leases.held or self._lease_conn is None:
                return
            self._leases.held.discard(unit_id)
            try:
                self._lease_conn.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (self._lease_name(unit_id),)
                )
            except psycopg.Error:
                # The unit is settled: its commit must not be reported as failed. A broken lease connection took
                # every lease with it (the server lets them go), so forget them, and each is taken again.
                self._drop_leases()

    def _drop_leases(self) -> None:
        self._leases.held.clear()
        if self._lease_conn is not None:
            self._lease_conn.close()
            self._lease_conn = None

    # The pin scratch.

    def scratch_get(self, unit_id: str, key: str) -> ScratchPin | None:
        """Return the unit's pin for `key`, if drawn; the first call for a unit takes its lease."""
        self._claim(unit_id)
        with self._connection() as conn, self.place.translated("reading scratch"):
            row = conn.execute(
                sql.SQL("SELECT {c} FROM {p} WHERE unit_id = %s AND key = %s").format(
                    c=sql.SQL(_SCRATCH_COLUMNS), p=self._scratch
                ),
                (unit_id, key),
            ).fetchone()
        return None if row is None else ScratchPin(*row)

    def _lock_unit(self, conn: Conn, unit_id: str) -> None:
        """Serialise, until the transaction ends, the writes that must see whether the unit is closed."""
        with self.place.translated(f"locking unit {unit_id}"):
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 1))", (self._lease_name(unit_id),))

    def _outcome(self, conn: Conn, unit_id: str) -> UnitOutcome | None:
        with self.place.translated("reading a unit's outcome"):
            row = conn.execute(
                sql.SQL("SELECT outcome FROM {u} WHERE unit_id = %s").format(u=self._closed), (unit_id,)
            ).fetchone()
        return None if row is None else row[0]

    def unit_outcome(self, unit_id: str) -> UnitOutcome | None:
        """Return how the unit was closed, or None while it is open (or unknown)."""
        with self._connection() as conn:
            return self._outcome(conn, unit_id)

    def closed_units(self) -> Iterator[ClosedUnit]:
        """Stream the units closed for good, by unit id, a page at a time."""
        query = sql.SQL(
            'SELECT unit_id, outcome FROM {u} WHERE %(after)s::text IS NULL OR unit_id COLLATE "C" > %(after)s'
            ' ORDER BY unit_id COLLATE "C" LIMIT %(page)s'
        ).format(u=self._closed)
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
                sql.SQL(
                    "WITH new AS (INSERT INTO {u} (unit_id, outcome) SELECT * FROM unnest(%s::text[], %s::text[])"
                    " ON CONFLICT (unit_id) DO NOTHING RETURNING 1) SELECT count(*) FROM new"
                ).format(u=self._closed),
                ([unit.unit_id for unit in units], [unit.outcome for unit in units]),
            ).fetchone()
        return 0 if row is None else int(row[0])

    def scratch_put(self, unit_id: str, key: str, *, kind: str, raw: str, fingerprint: str | None) -> ScratchPin:
        """Write a first draw durably (attempts 1, next draw number) and return the key's pin (see the port).

        Raises `UnitClosed` (carrying `raw`) if the unit was committed or abandoned meanwhile.
        """
        self._claim(unit_id)
        # The lease keeps other stores out of the unit; this lock keeps this store's threads from taking
        # one draw number twice.
        with self._put_lock, self.transaction(), self._connection() as conn:
            self._lock_unit(conn, unit_id)
            closed = self._outcome(conn, unit_id)
            if closed is not None:
                raise UnitClosed(unit_id, state=closed, raw=raw)
            with self.place.translated("writing scratch"):
                row = conn.execute(
                    sql.SQL(
                        "INSERT INTO {p} AS s ({c}) SELECT %s, %s, %s, %s, 1, coalesce(max(draw_no), 0) + 1, %s"
                        " FROM {p} WHERE unit_id = %s"
                        " ON CONFLICT (unit_id, key) DO UPDATE SET attempts = s.attempts + 1 RETURNING {c}"
                    ).format(p=self._scratch, c=sql.SQL(_SCRATCH_COLUMNS)),
                    (unit_id, key, kind, raw, fingerprint, unit_id),
                ).fetchone()
        assert row is not None
        return ScratchPin(*row)

    def scratch_bump(self, unit_id: str, key: str) -> int:
        """Count one more attempt at an existing pin and return the new count."""
        self._claim(unit_id)
        with self._connection() as conn, self.place.translated("counting an attempt"):
            row = conn.execute(
                sql.SQL(
                    "UPDATE {p} SET attempts = attempts + 1 WHERE unit_id = %s AND key = %s RETURNING attempts"
                ).format(p=self._scratch),
                (unit_id, key),
            ).fetchone()
        if row is None:
            raise StoreError(f"no scratch pin {key} in unit {unit_id} ({self.place})")
        return int(row[0])

    def scratch_reuse(self, unit_id: str, key: str) -> ScratchPin | None:
        """Count one more attempt at the unit's pin for `key` and return it, or None if not drawn, in one step.

        Raises `UnitClosed` if the unit is committed or abandoned.
        """
        self._claim(unit_id)
        with self._connection() as conn:
            with self.place.translated("reusing a pin"):
                row = conn.execute(
                    sql.SQL(
                        "UPDATE {p} SET attempts = attempts + 1 WHERE unit_id = %s AND key = %s RETURNING {c}"
                    ).format(p=self._scratch, c=sql.SQL(_SCRATCH_COLUMNS)),
                    (unit_id, key),
                ).fetchone()
            if row is None:
                closed = self._outcome(conn, unit_id)
                if closed is not None:
                    raise UnitClosed(unit_id, state=closed)
        return None if row is None else ScratchPin(*row)

    def scratch_list(self, unit_id: str) -> list[ScratchPin]:
        """Return the unit's pins in draw order (reading takes no lease)."""
        with self._connection() as conn:
            return self._scratch_list(conn, unit_id, lock="")

    def _scratch_list(self, conn: Conn, unit_id: str, *, lock: LiteralString) -> list[ScratchPin]:
        with self.place.translated("listing scratch"):
            rows = conn.execute(
                sql.SQL("SELECT {c} FROM {p} WHERE unit_id = %s ORDER BY draw_no" + lock).format(
                    c=sql.SQL(_SCRATCH_COLUMNS), p=self._scratch
                ),
                (unit_id,),
            ).fetchall()
        return [ScratchPin(*row) for row in rows]

    def open_units(self) -> list[OpenUnit]:
        """Return the units that have pins in scratch, oldest first draw first."""
        with self._connection() as conn, self.place.translated("listing open units"):
            rows = conn.execute(
                sql.SQL("SELECT unit_id, count(*) FROM {p} GROUP BY unit_id ORDER BY min(put_order)").format(
                    p=self._scratch
                )
            ).fetchall()
        return [OpenUnit(str(unit_id), int(count)) for unit_id, count in rows]

    def settle_unit(
        self,
        unit_id: str,
        *,
        outcome: UnitOutcome,
        events: Callable[[list[ScratchPin]], Sequence[PendingEvent]],
    ) -> list[StoredEvent]:
        """List, promote and clear the unit's pins and record it closed, in one transaction (see the port)."""
        check_outcome(outcome)
        self._claim(unit_id)
        with self.transaction(), self._connection() as conn:
            self._lock_unit(conn, unit_id)
            closed = self._outcome(conn, unit_id)
            if closed is not None:
                raise UnitClosed(unit_id, state=closed)
            # FOR UPDATE: an attempt counted after the listing waits for the commit, and then finds no pin.
            stored = self.append(events(self._scratch_list(conn, unit_id, lock=" FOR UPDATE")))
            with self.place.translated("closing the unit"):
                conn.execute(sql.SQL("DELETE FROM {p} WHERE unit_id = %s").format(p=self._scratch), (unit_id,))
                conn.execute(
                    sql.SQL("INSERT INTO {u} (unit_id, outcome) VALUES (%s, %s)").format(u=self._closed),
                    (unit_id, outcome),
                )
        self._release(unit_id)
        return stored

    def close(self) -> None:
        """Close the pool and the lease connection (freeing every unit this store holds)."""
        with self._leases.lock:
            self._drop_leases()
        with self.place.translated("closing the store"):
            self._pool.close()

    def __enter__(self) -> PostgresEventStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
