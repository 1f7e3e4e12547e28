"""SQLiteEventStore: the embedded default store, and the only module with SQL for the timeline."""

from __future__ import annotations

import math
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, NoReturn, cast

import sqlite_utils

from anagrapheus.errors import (
    SeqConflict,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
    UnitBusy,
    UnitClosed,
    UsageError,
)
from anagrapheus.timeline.events import PendingEvent, StoredEvent, new_uuid7
from anagrapheus.timeline.stores.ownership import Ownership
from anagrapheus.timeline.stores.ports import (
    ClosedUnit,
    OpenUnit,
    ScratchPin,
    UnitLeases,
    UnitOutcome,
    check_contiguous,
    check_outcome,
    event_row,
    refuse_unknown_migrations,
)
from anagrapheus.timeline.stores.stamps import iso_timestamp, stamped, utc_now

__all__ = ["LeaseHolder", "SQLiteEventStore", "read_only_uri"]

# Each migration is a name and its statements; applied with its record in one transaction.
_MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "0001_events",
        (
            """CREATE TABLE events (
                seq INTEGER PRIMARY KEY,
                event_id TEXT NOT NULL UNIQUE,
                namespace TEXT NOT NULL,
                type TEXT NOT NULL,
                schema_version INTEGER NOT NULL,
                causation_id TEXT,
                correlation_id TEXT,
                created_at TEXT NOT NULL,
                payload TEXT NOT NULL
            ) STRICT""",
            "CREATE INDEX events_by_type ON events (namespace, type, seq)",
            """CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
                BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END""",
            """CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
                BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END""",
        ),
    ),
    (
        "0002_pin_scratch",
        (
            """CREATE TABLE pin_scratch (
                unit_id TEXT NOT NULL,
                key TEXT NOT NULL,
                kind TEXT NOT NULL,
                raw TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                draw_no INTEGER NOT NULL,
                fingerprint TEXT,
                UNIQUE (unit_id, key)
            ) STRICT""",
        ),
    ),
    (
        # Without it, finding a unit's next draw number reads every pin the unit holds.
        "0003_pin_scratch_draw_order",
        ("CREATE INDEX pin_scratch_draw_order ON pin_scratch (unit_id, draw_no)",),
    ),
    (
        # A closed unit takes no more pins, so a ledger on its id is refused instead of drawing a second result.
        # Units closed before this migration are found from their events in the log.
        "0004_closed_units",
        (
            """CREATE TABLE closed_units (
                unit_id TEXT PRIMARY KEY,
                outcome TEXT NOT NULL CHECK (outcome IN ('committed', 'abandoned'))
            ) STRICT""",
            """INSERT OR IGNORE INTO closed_units (unit_id, outcome)
                SELECT json_extract(payload, '$.unit_id'),
                    CASE type WHEN 'pins_abandoned' THEN 'abandoned' ELSE 'committed' END
                FROM events
                WHERE namespace = 'anagrapheus'
                    AND type IN ('pin_promoted', 'pins_abandoned', 'replay_diverged')
                    AND json_valid(payload)
                    AND json_type(payload, '$.unit_id') = 'text'
                ORDER BY seq""",
        ),
    ),
    (
        # One store at a time draws in an open unit (see `SQLiteEventStore`): the holder, and the process
        # that holds it, so that a lease left by a process that died can be taken over.
        "0005_unit_leases",
        (
            """CREATE TABLE unit_leases (
                unit_id TEXT PRIMARY KEY,
                holder TEXT NOT NULL,
                host TEXT NOT NULL,
                pid INTEGER NOT NULL
            ) STRICT""",
        ),
    ),
)
_MIGRATION_NAMES = tuple(name for name, _ in _MIGRATIONS)
# Needed only to write: a database from before it can still be read with read_only=True.
_WRITE_ONLY_MIGRATIONS = frozenset({"0005_unit_leases"})
_HOST = socket.gethostname()
# The stores of this process by holder id, while open: a lease whose holder is this process but not an
# open store here (closed, or dropped without close) is stale. Process-wide because a lease names this process;
# nothing to tear down: held weakly, a store leaves it when it is collected.
_OPEN_HOLDERS: weakref.WeakValueDictionary[str, SQLiteEventStore] = weakref.WeakValueDictionary()
_MIGRATIONS_TABLE = "anagrapheus_migrations"
_EVENT_COLUMNS = "seq, event_id, namespace, type, schema_version, causation_id, correlation_id, created_at, payload"
_SCRATCH_COLUMNS = "unit_id, key, kind, raw, attempts, draw_no, fingerprint"
# A unit's outcome (NULL while open) and its lease's holder (NULL if unleased), in one statement.
_UNIT_STATE = (
    "SELECT (SELECT outcome FROM closed_units WHERE unit_id = ?1), (SELECT holder FROM unit_leases WHERE unit_id = ?1)"
)
_READ_PAGE = 1000


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """Who held a unit's lease: one store object in one process on one host."""

    unit_id: str
    """The unit held."""
    host: str
    """The host name of the holder's machine (or container), as `socket.gethostname()` gave it."""
    pid: int
    """The holder's process id on that host."""
    holder: str
    """The holder store's own id."""


class _Translated:
    """The one choke point where sqlite3 errors become the library's own, naming the database.

    A plain context manager, not a generator's: it wraps about 70 statements a recorded run.

    Typed as the PostgreSQL store's are: a lock held past `busy_timeout` or a full disk is `StoreUnavailable` (try
    again later), a breached constraint `StoreIntegrityError`, anything else `StoreError`.
    """

    __slots__ = ("_action", "_where")

    def __init__(self, where: object, action: str) -> None:
        self._where = where
        self._action = action

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        if isinstance(error, sqlite3.Error):
            raise _raised(error)(f"{self._where}: {self._action} failed: {error}") from error


def _raised(error: sqlite3.Error) -> type[StoreError]:
    """The error class for a sqlite3 error, by what the caller can do about it."""
    code = getattr(error, "sqlite_errorcode", None)
    # A full disk (or a page limit reached) rolls the write back, as PostgreSQL's class 53 does: room may come.
    if code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_FULL):
        return StoreUnavailable
    # A trigger's refusal (the log is append-only) is a plain StoreError, as PostgreSQL's RAISE is.
    if isinstance(error, sqlite3.IntegrityError) and code != sqlite3.SQLITE_CONSTRAINT_TRIGGER:
        return StoreIntegrityError
    return StoreError


class SQLiteEventStore:
    """The event log and pin scratch in one SQLite file (WAL, STRICT tables, named migrations).

    One connection, shared by threads and tasks: it belongs to one context at a time (an asyncio
    task or a thread, see `transaction`); each write is a `BEGIN IMMEDIATE` transaction, and
    `transaction()` nests with savepoints. A second, read-only one only reads a unit's fence on an
    event loop's thread (`fence_unit_here`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], datetime] = utc_now,
        new_event_id: Callable[[], str] = new_uuid7,
        busy_timeout: float = 30.0,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        read_only: bool = False,
        unit_wait: float = 2.0,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise UsageError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        _check_seconds("busy_timeout", busy_timeout)
        _check_seconds("unit_wait", unit_wait)
        self.path = Path(path)
        """The database file."""
        if "\0" in str(self.path):
            raise UsageError(f"the database path {str(self.path)!r} holds a NUL character")
        self._clock = clock
        self._new_event_id = new_event_id
        # Its own id, not one from `new_event_id`: a seeded id source would give two processes one holder.
        self._holder = new_uuid7()
        self._leases = UnitLeases(self._try_lease, wait=float(unit_wait))
        self.read_only = read_only
        """Opened for reading only (replay, inspection): every write is refused with `StoreError`."""
        self._owner = Ownership(where=str(self.path), timeout=busy_timeout)
        self._depth = 0
        self._synchronous = synchronous
        # Whether the connection may be at NORMAL for an unsynced transaction (see `unsynced_transaction`).
        self._unsynced = False
        # The units whose lease row this store committed in a transaction of its own (not inside a caller's): their
        # fence can be read on a second connection, which sees committed rows only (`fence_unit_here`).
        self._leased: set[str] = set()
        self._fence_reader: sqlite3.Connection | None = None
        self._fence_lock = threading.Lock()
        with self._sql("opening the database"):
            self._conn = sqlite3.connect(
                self._read_only_uri() if read_only else self.path,
                uri=read_only,
                timeout=busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        try:
            if read_only:
                self._open_read_only(busy_timeout)
            else:
                self._open(busy_timeout, synchronous)
        except BaseException:
            self._conn.close()
            raise
        _OPEN_HOLDERS[self._holder] = self

    def _read_only_uri(self) -> str:
        if not self.path.is_file():
            raise StoreError(f"{self.path}: no database to open read-only")
        return read_only_uri(self.path)

    def _open_read_only(self, busy_timeout: float) -> None:
        with self._sql("opening the database read-only"):
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            db = sqlite_utils.Database(self._conn, recursive_triggers=False, execute_plugins=False)
            table = db.table(_MIGRATIONS_TABLE)
            applied = {str(row["name"]) for row in table.rows} if table.exists() else set[str]()
        refuse_unknown_migrations(self.path, applied, _MIGRATION_NAMES)
        if missing := [name for name in _MIGRATION_NAMES if name not in applied and name not in _WRITE_ONLY_MIGRATIONS]:
            raise StoreError(
                f"{self.path}: its schema lacks migrations {', '.join(missing)}; open it once without read_only"
                " to migrate it (or it is not an anagrapheus database)"
            )

    def _sql(self, action: str) -> AbstractContextManager[None]:
        return _Translated(self.path, action)

    def _open(self, busy_timeout: float, synchronous: str) -> None:
        with self._sql("opening the database"):
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            # Two processes creating one file at once can collide on the switch to WAL outside the
            # busy handler ("database is locked" at once), so the switch is retried until the timeout.
            deadline = time.monotonic() + busy_timeout
            delay = 0.005
            while True:
                try:
                    mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                    break
                except sqlite3.OperationalError as e:
                    if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                        raise
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: could not switch to WAL (journal_mode is {mode})")
            self._conn.execute(f"PRAGMA synchronous = {synchronous}")
            self._conn.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    def _migrate(self) -> None:
        # Inside the one choke point: a migration's sqlite3 error (or sqlite-utils') surfaces as StoreError.
        with self.transaction(), self._sql("migrating the schema"):
            # Over our own connection, without side effects: sqlite-utils would otherwise switch on
            # recursive triggers and run every installed plugin's connection hook.
            db = sqlite_utils.Database(self._conn, recursive_triggers=False, execute_plugins=False)
            table = db.table(_MIGRATIONS_TABLE)
            if not table.exists():
                table.create({"name": str, "applied_at": str}, pk="name", strict=True)
            applied = {str(row["name"]) for row in table.rows}
            refuse_unknown_migrations(self.path, applied, _MIGRATION_NAMES)
            for name, statements in _MIGRATIONS:
                if name in applied:
                    continue
                with self._sql(f"migration {name}"):
                    for statement in statements:
                        self._conn.execute(statement)
                # The wall clock, not the injected one: migrating is not an event, and a recording made
                # with a scripted clock must not change when a release adds a migration.
                table.insert({"name": name, "applied_at": iso_timestamp(utc_now())})

    @contextmanager
    def transaction(self) -> Generator[None]:
        """Run the block in one write transaction; nested blocks are savepoints.

        The transaction belongs to the context that opened it: the asyncio task (or the thread)
        and the worker threads it hands work to. Another task or thread waits until it ends, and
        never becomes part of it.
        """
        with self._transaction(synced=True):
            yield

    @contextmanager
    def unsynced_transaction(self) -> Generator[None]:
        """`transaction`, its commit not synced to disk on its own: the next synced commit syncs it, in WAL order.

        For writes nothing durable is built on before a later synced commit (a unit's lease, a run's ids and
        clocks held until the run's next draw, whose own synced write comes after them in the log's WAL). A
        killed process loses nothing (the operating system has the write); a power cut loses it together with
        everything after it. At `synchronous="NORMAL"`, and nested in another transaction, it is `transaction`.
        """
        with self._transaction(synced=False):
            yield

    @contextmanager
    def _transaction(self, *, synced: bool, savepoint: bool = True) -> Generator[None]:
        """A write transaction (see `transaction`); nested, a savepoint, unless `savepoint=False`.

        `savepoint=False` is for a block whose one write is a single statement, which SQLite makes atomic on its
        own: nested (a held draw written in the flush's transaction), it needs no savepoint to undo it.
        """
        if self.read_only:
            raise StoreError(f"{self.path}: opened read_only, so it takes no writes (open it without read_only)")
        with self._owner.held(exclusive=False) as outermost:
            if outermost:
                relaxed = not synced and self._synchronous == "FULL"
                # Whatever ends the block, KeyboardInterrupt and CancelledError included, and wherever it
                # falls (in the block, or just after BEGIN returned, or before COMMIT ran), the transaction is
                # rolled back: left open, it would refuse every later write on this connection ("cannot start
                # a transaction within a transaction") and lock every other process out until close().
                try:
                    # The block may span awaits; only its own statements need the connection to itself.
                    with self._owner.held(), self._sql("beginning a transaction"):
                        if relaxed != self._unsynced:
                            # Set only when it changes: a synced transaction after unsynced ones sets FULL back
                            # before its BEGIN, so the unsynced ones in a row pay one PRAGMA, not two each.
                            self._relax_sync(relaxed)
                        self._conn.execute("BEGIN IMMEDIATE")
                    self._depth = 1
                    yield
                    self._depth = 0
                    with self._owner.held():
                        self._finish("COMMIT")
                except BaseException:
                    self._depth = 0
                    with self._owner.held():
                        self._roll_back_open()
                    raise
            elif not savepoint:
                with self._owner.held():
                    yield
            else:
                # A savepoint holds the connection to this thread for the whole block, so two threads of
                # one holder never interleave savepoints.
                with self._owner.held():
                    name = f"anagrapheus_{self._depth}"
                    with self._sql("beginning a savepoint"):
                        self._conn.execute(f"SAVEPOINT {name}")
                    self._depth += 1
                    try:
                        yield
                    except BaseException:
                        self._depth -= 1
                        self._roll_back(f"ROLLBACK TO {name}", f"RELEASE {name}")
                        raise
                    self._depth -= 1
                    self._finish(f"RELEASE {name}")

    def _relax_sync(self, relaxed: bool) -> None:
        """Set the connection's `synchronous` for the next commit: NORMAL for an unsynced one, else back to FULL.

        Set outside a transaction (SQLite reads it at the commit), just before the BEGIN of the transaction it is for,
        by the context holding the connection. It stays NORMAL after an unsynced commit until the next synced
        transaction sets it back, before its BEGIN: every commit on the connection is made by `_transaction`, which
        reads the mark first, so no synced transaction commits at NORMAL. Marked before it is set and cleared after it
        is set back, so a restore cut short (Ctrl-C) is made again by the next synced transaction.
        """
        if relaxed:
            self._unsynced = True
            self._conn.execute("PRAGMA synchronous = NORMAL")
        else:
            self._conn.execute("PRAGMA synchronous = FULL")
            self._unsynced = False

    def _roll_back(self, *statements: str) -> None:
        # A failed rollback must not mask the error that caused it.
        try:
            for statement in statements:
                self._conn.execute(statement)
        except sqlite3.Error:
            pass

    def _roll_back_open(self) -> None:
        """Roll back the connection's transaction, if one is open (a failed COMMIT or BEGIN may have ended it)."""
        # A failed rollback must not mask the error that caused it.
        with suppress(sqlite3.Error):
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")

    def _finish(self, statement: str) -> None:
        try:
            with self._sql("committing a transaction"):
                self._conn.execute(statement)
        except StoreError:
            # A commit that failed leaves the transaction open; close it so the store stays usable.
            if statement == "COMMIT" and self._conn.in_transaction:
                self._roll_back("ROLLBACK")
            raise

    # The event log.

    def append(self, events: Sequence[PendingEvent], *, expected_last_seq: int | None = None) -> list[StoredEvent]:
        """Append events in one transaction; with `expected_last_seq`, raise `SeqConflict` if the log moved."""
        with self.transaction():
            return self._append_now(events, expected_last_seq=expected_last_seq)

    def _append_now(self, events: Sequence[PendingEvent], *, expected_last_seq: int | None = None) -> list[StoredEvent]:
        """`append`'s statements, in the transaction open on this connection (a failure rolls it back whole)."""
        last = self._last_seq()
        if expected_last_seq is not None and expected_last_seq != last:
            raise SeqConflict(expected=expected_last_seq, actual=last)
        stored = stamped(events, after=last, clock=self._clock, new_event_id=self._new_event_id)
        with self._sql("appending events"):
            self._conn.executemany(
                f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)", [event_row(e) for e in stored]
            )
        return stored

    def append_stored(self, events: Sequence[StoredEvent]) -> None:
        """Append events copied from another log verbatim (seq, ids, times); the first must follow `last_seq()`."""
        if not events:
            return
        check_contiguous(events)
        with self.transaction():
            last = self._last_seq()
            if events[0].seq != last + 1:
                raise SeqConflict(expected=events[0].seq - 1, actual=last)
            with self._sql("appending copied events"):
                self._conn.executemany(
                    f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                    [event_row(event) for event in events],
                )

    def _last_seq(self) -> int:
        with self._sql("reading the last seq"):
            row = self._conn.execute("SELECT max(seq) FROM events").fetchone()
        return int(row[0] or 0)

    def last_seq(self) -> int:
        """Return the seq of the last event, or 0 for an empty log."""
        with self._owner.held():
            return self._last_seq()

    def read(
        self,
        *,
        since: int = 0,
        limit: int | None = None,
        namespace: str | None = None,
        type: str | None = None,
    ) -> Iterator[StoredEvent]:
        """Stream events with seq > `since` in seq order, a page at a time, optionally filtered."""
        # Typed, but a caller may pass anything at run time; SQLite would compare a text `since` as greater
        # than every seq and quietly return nothing.
        bounds = cast("tuple[object, object]", (since, limit))
        if isinstance(bounds[0], bool) or not isinstance(bounds[0], int) or since < 0:
            raise UsageError(f"since must be an integer seq >= 0, not {since!r}")
        if bounds[1] is not None and (isinstance(bounds[1], bool) or not isinstance(bounds[1], int) or bounds[1] < 0):
            raise UsageError(f"limit must be an integer >= 0, not {limit!r}")
        where = "seq > ?"
        filters: list[Any] = []
        if namespace is not None:
            where += " AND namespace = ?"
            filters.append(namespace)
        if type is not None:
            where += " AND type = ?"
            filters.append(type)
        query = f"SELECT {_EVENT_COLUMNS} FROM events WHERE {where} ORDER BY seq LIMIT ?"
        remaining = limit
        after = since
        while remaining is None or remaining > 0:
            page = _READ_PAGE if remaining is None else min(_READ_PAGE, remaining)
            # Each page is its own statement, so a slow consumer never holds a read transaction open.
            with self._owner.held(), self._sql("reading events"):
                rows = self._conn.execute(query, (after, *filters, page)).fetchall()
            for row in rows:
                yield StoredEvent(*row)
            if len(rows) < page:
                return
            after = rows[-1][0]
            if remaining is not None:
                remaining -= len(rows)

    # The pin scratch.

    def scratch_get(self, unit_id: str, key: str) -> ScratchPin | None:
        """Return the unit's pin for `key`, if drawn."""
        with self._owner.held(), self._sql("reading scratch"):
            row = self._conn.execute(
                f"SELECT {_SCRATCH_COLUMNS} FROM pin_scratch WHERE unit_id = ? AND key = ?", (unit_id, key)
            ).fetchone()
        return None if row is None else ScratchPin(*row)

    def _outcome(self, unit_id: str) -> UnitOutcome | None:
        with self._sql("reading a unit's outcome"):
            row = self._conn.execute("SELECT outcome FROM closed_units WHERE unit_id = ?", (unit_id,)).fetchone()
        return None if row is None else row[0]

    # Unit leases: one store at a time draws in an open unit, as in the PostgreSQL store. Within a store, the
    # ledgers on a unit share its draws in flight; across stores (processes) nothing would tell one process
    # that another is drawing, so the second could run an effect just before the first closes the unit.

    def _try_lease(self, unit_id: str) -> bool:
        # Unsynced: a lease guards a live process's draws; one lost in a power cut went with the process holding it.
        with self.unsynced_transaction(), self._sql(f"taking the lease of unit {unit_id}"):
            # Committed by this block (not by a caller's transaction around it, which may yet roll it back)?
            own = self._depth == 1
            # The unit's outcome and its lease's holder in one statement (a row of NULLs for an open, unleased unit).
            outcome, *row = self._conn.execute(
                "SELECT (SELECT outcome FROM closed_units WHERE unit_id = ?1), holder, host, pid"
                " FROM (SELECT 1) LEFT JOIN unit_leases ON unit_id = ?1",
                (unit_id,),
            ).fetchone()
            if outcome is not None:
                return True  # a closed unit needs no lease: the caller refuses it
            if row[0] is not None and row[0] != self._holder and _holder_alive(*row):
                return False
            self._conn.execute(
                "INSERT OR REPLACE INTO unit_leases (unit_id, holder, host, pid) VALUES (?, ?, ?, ?)",
                (unit_id, self._holder, _HOST, os.getpid()),
            )
        if own:
            self._leased.add(unit_id)
        return True

    def _unit_state(self, unit_id: str) -> tuple[UnitOutcome | None, str | None]:
        """The unit's outcome (None while open) and its lease's holder (None if unleased), in one statement.

        What a draw's claim, a write and a close read before they go on: a closed unit is refused as closed, and an
        open one fenced (`_fence_open`).
        """
        with self._sql(f"checking unit {unit_id}"):
            row = self._conn.execute(_UNIT_STATE, (unit_id,)).fetchone()
        return row[0], row[1]

    def _refuse_unless_open(self, unit_id: str, *, raw: str | None = None) -> None:
        """Refuse a closed unit as closed (`UnitClosed`, carrying `raw`), and fence an open one (`_fence_open`)."""
        outcome, holder = self._unit_state(unit_id)
        if outcome is not None:
            raise UnitClosed(unit_id, state=outcome, raw=raw)
        self._fence_open(unit_id, holder)

    def _fence_open(self, unit_id: str, holder: str | None) -> None:
        """Refuse an open unit whose lease this store took and has since lost: `unlock` broke it, and another may draw.

        Checked, with the holder `_unit_state` read, in the transaction of every draw's first store step (before its
        effect runs), of every write and of the unit's close, as the PostgreSQL store fences a lost unit (issue #35):
        the old holder stops, loudly.
        """
        if unit_id in self._leases.held and holder != self._holder:
            self._lost(unit_id)

    def _lost(self, unit_id: str) -> NoReturn:
        self._let_go(unit_id)
        busy = UnitBusy(unit_id, waited=0.0)
        busy.add_note(
            f"anagrapheus: this store held unit {unit_id} and its lease was broken (`anagrapheus unlock`, or"
            " SQLiteEventStore.break_lease): another worker may be drawing in it, so this one stops before any effect"
        )
        raise busy

    def _let_go(self, unit_id: str) -> None:
        """Forget the unit's lease (closed, broken or lost): a later draw takes it again, or is refused."""
        self._leases.held.discard(unit_id)
        self._leased.discard(unit_id)

    def hold_unit(self, unit_id: str) -> None:
        """Take the unit's lease now, as its first write would (`UnitBusy` if another live store holds it)."""
        self._leases.hold(unit_id)

    def fence_unit(self, unit_id: str) -> None:
        """The claim of a key scratch cannot hold: the lease held (taken, the unit's first write), the unit checked.

        A closed unit is refused (`UnitClosed`), an open one fenced (`UnitBusy` once its lease was lost), as a claim's
        write transaction would, by one read and no transaction: with no pin to count, that write changed nothing.
        """
        self._leases.hold(unit_id)
        with self._owner.held():
            self._refuse_unless_open(unit_id)

    def fence_unit_here(self, unit_id: str) -> bool:
        """`fence_unit`'s read on the calling thread (an event loop's), never waiting; False where it cannot say so.

        For a unit whose lease this store committed: read on a connection of its own, which never waits for a lock
        and sees committed rows only, so neither this store's connection nor a hop to a worker thread is needed.
        True once the unit was read open and still this store's; `UnitClosed` or `UnitBusy` as `fence_unit` raises.
        False, with nothing decided, when the lease is not committed yet, another thread is reading, or SQLite
        would have to wait: the caller then claims as before, in a worker thread.
        """
        if unit_id not in self._leased or not self._fence_lock.acquire(blocking=False):
            return False
        try:
            reader = self._fence_reader
            if reader is None:
                # Read-only, and never waiting (timeout 0): a lock in the way is a False, not a stall of the loop.
                reader = self._fence_reader = sqlite3.connect(
                    f"{self.path.resolve().as_uri()}?mode=ro",
                    uri=True,
                    timeout=0,
                    isolation_level=None,
                    check_same_thread=False,
                )
            outcome, holder = reader.execute(_UNIT_STATE, (unit_id,)).fetchone()
        except sqlite3.Error:
            return False
        finally:
            self._fence_lock.release()
        if outcome is not None:
            raise UnitClosed(unit_id, state=outcome)
        self._fence_open(unit_id, holder)
        return True

    def lease_holder(self, unit_id: str) -> LeaseHolder | None:
        """Return who holds the unit's lease, or None when no store does."""
        with self._owner.held(), self._sql("reading a unit's lease"):
            row = self._conn.execute(
                "SELECT host, pid, holder FROM unit_leases WHERE unit_id = ?", (unit_id,)
            ).fetchone()
        return None if row is None else LeaseHolder(unit_id, row[0], int(row[1]), row[2])

    def break_lease(self, unit_id: str, *, force: bool = False) -> LeaseHolder | None:
        """Free the unit's lease, whoever holds it, so a store can take the unit over; return who held it.

        A lease left by a process that died on this host is taken over without this. One left on
        another host cannot be checked from here, and stands until it is broken: call this once that
        worker is gone for good (a container that restarted under a new host name, say); the unit
        then resumes with the pins it drew. A holder alive on this host (another process, or another
        open store of this one) is refused with `UnitBusy` unless `force=True`: breaking a live
        worker's lease lets two workers draw in one unit. The store whose lease is broken is fenced: its next
        draw, write or close in the unit raises `UnitBusy` before any effect runs, however alive it was.
        """
        with self.transaction(), self._sql(f"breaking the lease of unit {unit_id}"):
            row = self._conn.execute(
                "SELECT holder, host, pid FROM unit_leases WHERE unit_id = ?", (unit_id,)
            ).fetchone()
            if row is None:
                return None
            holder, host, pid = row[0], row[1], int(row[2])
            if not force and holder != self._holder and host == _HOST and _holder_alive(holder, host, pid):
                raise UnitBusy(unit_id, waited=0.0)
            self._conn.execute("DELETE FROM unit_leases WHERE unit_id = ?", (unit_id,))
        self._let_go(unit_id)
        return LeaseHolder(unit_id, host, pid, holder)

    def scratch_put(self, unit_id: str, key: str, *, kind: str, raw: str, fingerprint: str | None) -> ScratchPin:
        """Write a first draw durably (attempts 1, next draw number) and return the key's pin (see the port).

        Raises `UnitClosed` (carrying `raw`) if the unit was committed or abandoned meanwhile.
        """
        self._leases.hold(unit_id)
        # One write statement, atomic on its own: nested in the flush's transaction, no savepoint.
        with self._transaction(synced=True, savepoint=False):
            self._refuse_unless_open(unit_id, raw=raw)
            with self._sql("writing scratch"):
                row = self._conn.execute(
                    f"INSERT INTO pin_scratch ({_SCRATCH_COLUMNS})"
                    " SELECT ?, ?, ?, ?, 1, coalesce(max(draw_no), 0) + 1, ? FROM pin_scratch WHERE unit_id = ?"
                    " ON CONFLICT (unit_id, key) DO UPDATE SET attempts = attempts + 1"
                    f" RETURNING {_SCRATCH_COLUMNS}",
                    (unit_id, key, kind, raw, fingerprint, unit_id),
                ).fetchone()
        return ScratchPin(*row)

    def scratch_put_many(self, unit_id: str, pins: Sequence[tuple[str, str, str, str | None, int]]) -> None:
        """Write several drawn results as `scratch_put` writes each, their attempts counted, in one statement's steps.

        Each of `pins` is a key, a kind, a raw, a fingerprint and the attempts asked (at least 1): a new pin takes the
        next draw number and those attempts, a key already there counts them on top of its own, as `scratch_put`
        then `scratch_reuse` for each further attempt would. The unit is checked once (closed: `UnitClosed`, carrying
        the first pin's raw; its lease lost: `UnitBusy`). For a block that rolls back whole if it fails (the held
        draws' flush): it takes no savepoint of its own.
        """
        self._leases.hold(unit_id)
        with self._transaction(synced=True, savepoint=False):
            self._refuse_unless_open(unit_id, raw=pins[0][2])  # the first's, as its own put would say
            with self._sql("writing scratch"):
                self._conn.executemany(
                    f"INSERT INTO pin_scratch ({_SCRATCH_COLUMNS})"
                    " SELECT ?1, ?2, ?3, ?4, ?6, coalesce(max(draw_no), 0) + 1, ?5 FROM pin_scratch WHERE unit_id = ?1"
                    " ON CONFLICT (unit_id, key) DO UPDATE SET attempts = attempts + ?6",
                    [
                        (unit_id, key, kind, raw, fingerprint, attempts)
                        for key, kind, raw, fingerprint, attempts in pins
                    ],
                )

    def scratch_reuse(self, unit_id: str, key: str) -> ScratchPin | None:
        """Count one more attempt at the unit's pin for `key` and return it, or None if not drawn, in one step.

        Raises `UnitClosed` if the unit is committed or abandoned. Being a write, it also proves
        the store writable before an effect runs.
        """
        self._leases.hold(unit_id)
        with self._transaction(synced=True, savepoint=False):  # one write statement (see `scratch_put`)
            outcome, holder = self._unit_state(unit_id)
            if outcome is None:
                self._fence_open(unit_id, holder)  # a closed unit is refused as closed, below
            with self._sql("reusing a pin"):
                row = self._conn.execute(
                    "UPDATE pin_scratch SET attempts = attempts + 1 WHERE unit_id = ? AND key = ?"
                    f" RETURNING {_SCRATCH_COLUMNS}",
                    (unit_id, key),
                ).fetchone()
            if row is None and outcome is not None:
                raise UnitClosed(unit_id, state=outcome)
        return None if row is None else ScratchPin(*row)

    def scratch_list(self, unit_id: str) -> list[ScratchPin]:
        """Return the unit's pins in draw order."""
        with self._owner.held():
            return self._scratch_list(unit_id)

    def _scratch_list(self, unit_id: str) -> list[ScratchPin]:
        with self._sql("listing scratch"):
            rows = self._conn.execute(
                f"SELECT {_SCRATCH_COLUMNS} FROM pin_scratch WHERE unit_id = ? ORDER BY draw_no", (unit_id,)
            ).fetchall()
        return [ScratchPin(*row) for row in rows]

    def open_units(self) -> list[OpenUnit]:
        """Return the units that have pins in scratch, oldest first draw first."""
        with self._owner.held(), self._sql("listing open units"):
            rows = self._conn.execute(
                "SELECT unit_id, count(*) FROM pin_scratch GROUP BY unit_id ORDER BY min(rowid)"
            ).fetchall()
        return [OpenUnit(unit_id, int(count)) for unit_id, count in rows]

    def unit_outcome(self, unit_id: str) -> UnitOutcome | None:
        """Return how the unit was closed, or None while it is open (or unknown)."""
        with self._owner.held():
            return self._outcome(unit_id)

    def closed_units(self) -> Iterator[ClosedUnit]:
        """Stream the units closed for good, by unit id, a page at a time."""
        after: str | None = None
        while True:
            with self._owner.held(), self._sql("listing closed units"):
                rows = self._conn.execute(
                    "SELECT unit_id, outcome FROM closed_units WHERE ?1 IS NULL OR unit_id > ?1"
                    " ORDER BY unit_id LIMIT ?2",
                    (after, _READ_PAGE),
                ).fetchall()
            for unit_id, outcome in rows:
                yield ClosedUnit(unit_id, outcome)
            if len(rows) < _READ_PAGE:
                return
            after = rows[-1][0]

    def import_closed_units(self, units: Sequence[ClosedUnit]) -> int:
        """Record units closed in another store (an outcome recorded here already is kept); return how many are new."""
        for unit in units:
            check_outcome(unit.outcome)
        with self.transaction(), self._sql("recording closed units"):
            before = self._conn.total_changes
            self._conn.executemany(
                "INSERT OR IGNORE INTO closed_units (unit_id, outcome) VALUES (?, ?)",
                [(unit.unit_id, unit.outcome) for unit in units],
            )
            return self._conn.total_changes - before

    def settle_unit(
        self,
        unit_id: str,
        *,
        outcome: UnitOutcome,
        events: Callable[[list[ScratchPin]], Sequence[PendingEvent]],
    ) -> list[StoredEvent]:
        """List, promote and clear the unit's pins and record it closed, in one transaction (see the port)."""
        check_outcome(outcome)
        self._leases.hold(unit_id)
        with self.transaction():
            self._refuse_unless_open(unit_id)
            # Appended in this transaction, with no savepoint of its own: the whole close rolls back together.
            stored = self._append_now(events(self._scratch_list(unit_id)))
            with self._sql("closing the unit"):
                self._conn.execute("DELETE FROM pin_scratch WHERE unit_id = ?", (unit_id,))
                self._conn.execute("INSERT INTO closed_units (unit_id, outcome) VALUES (?, ?)", (unit_id, outcome))
                self._conn.execute("DELETE FROM unit_leases WHERE unit_id = ?", (unit_id,))
        self._let_go(unit_id)
        return stored

    def close(self) -> None:
        """Release this store's unit leases and close the connection; the store cannot be used afterwards."""
        _OPEN_HOLDERS.pop(self._holder, None)
        if self._leases.held:
            # Best effort: a lease left behind is taken over anyway, its holder being no open store.
            with suppress(StoreError), self.transaction(), self._sql("releasing unit leases"):
                self._conn.execute("DELETE FROM unit_leases WHERE holder = ?", (self._holder,))
            self._leases.held.clear()
            self._leased.clear()
        with self._fence_lock:
            if self._fence_reader is not None:
                self._fence_reader.close()
        with self._owner.held(), self._sql("closing the store"):
            self._conn.close()

    def __enter__(self) -> SQLiteEventStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_only_uri(path: str | os.PathLike[str]) -> str:
    """The URI that opens a SQLite file for reading only, its WAL included; `StoreError` where the WAL cannot be read.

    Reading a WAL database needs its -shm file, which SQLite creates beside it. In a folder this
    process cannot write (a read-only checkout or mount), a WAL with commits in it is read through
    the -shm file already there; with none, reading would answer from the main file alone and miss
    those commits, so it is refused. With no WAL to read, the file is opened as immutable (no locks,
    no -shm), which is right while nothing writes to it, as is the case for a committed log.
    """
    database = Path(path)
    uri = f"{database.resolve().as_uri()}?mode=ro"
    if os.access(database.parent, os.W_OK):
        return uri
    wal = Path(f"{database}-wal")
    if not (wal.is_file() and wal.stat().st_size > 0):
        return uri + "&immutable=1"
    if Path(f"{database}-shm").is_file():
        return uri
    raise StoreError(
        f"{database}: its write-ahead log {wal} holds commits not yet in the main file, and they cannot be read"
        f" here: this process cannot create {database.name}-shm in {database.parent}. Copy the database with its"
        " -wal file to a folder it can write, or checkpoint it where it is written"
        f" (sqlite3 {database.name} 'PRAGMA wal_checkpoint(TRUNCATE)'), then read it again"
    )


def _holder_alive(holder: str, host: str, pid: int) -> bool:
    """Whether a lease's holder may still draw: an open store of this process, or a live process elsewhere."""
    if host != _HOST:
        return True  # another machine's process cannot be checked: its lease stands
    if pid == os.getpid():
        return holder in _OPEN_HOLDERS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, run by another user
    return True


def _check_seconds(name: str, value: float) -> None:
    """Refuse a wait that is not a finite number of seconds >= 0 (nan or a negative waits forever or not at all)."""
    # A caller's value may be anything at run time, whatever its annotation says.
    number = cast("object", value)
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number) or number < 0:
        raise UsageError(f"{name} must be a finite number of seconds >= 0, not {value!r}")
