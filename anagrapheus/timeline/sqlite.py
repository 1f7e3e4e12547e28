"""SQLiteEventStore: the embedded default store, and the only module with SQL for the timeline."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import sqlite_utils

from anagrapheus.errors import SchemaTooNew, SeqConflict, StoreError, UsageError
from anagrapheus.timeline.events import PendingEvent, StoredEvent, new_uuid7
from anagrapheus.timeline.stamps import iso_timestamp, stamped, utc_now
from anagrapheus.timeline.store import OpenUnit, ScratchPin, check_contiguous, event_row

__all__ = ["SQLiteEventStore"]

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
)
_MIGRATIONS_TABLE = "anagrapheus_migrations"
_EVENT_COLUMNS = "seq, event_id, namespace, type, schema_version, causation_id, correlation_id, created_at, payload"
_SCRATCH_COLUMNS = "unit_id, key, kind, raw, attempts, draw_no, fingerprint"
_READ_PAGE = 1000


@contextmanager
def _translated(action: str) -> Generator[None]:
    """The one choke point where sqlite3 errors become the library's own."""
    try:
        yield
    except sqlite3.Error as e:
        raise StoreError(f"{action} failed: {e}") from e


class SQLiteEventStore:
    """The event log and pin scratch in one SQLite file (WAL, STRICT tables, named migrations).

    One connection, guarded by a lock so the store can be shared between threads; each
    write is a `BEGIN IMMEDIATE` transaction, and `transaction()` nests with savepoints.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], datetime] = utc_now,
        new_event_id: Callable[[], str] = new_uuid7,
        busy_timeout: float = 30.0,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise UsageError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        self.path = Path(path)
        """The database file."""
        self._clock = clock
        self._new_event_id = new_event_id
        self._lock = threading.RLock()
        self._depth = 0
        with _translated(f"opening {self.path}"):
            self._conn = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            self._open(busy_timeout, synchronous)
        except BaseException:
            self._conn.close()
            raise

    def _open(self, busy_timeout: float, synchronous: str) -> None:
        with _translated(f"opening {self.path}"):
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
        known = [name for name, _ in _MIGRATIONS]
        # Inside the one choke point: a migration's sqlite3 error (or sqlite-utils') surfaces as StoreError.
        with self.transaction(), _translated(f"migrating {self.path}"):
            # Over our own connection, without side effects: sqlite-utils would otherwise switch on
            # recursive triggers and run every installed plugin's connection hook.
            db = sqlite_utils.Database(self._conn, recursive_triggers=False, execute_plugins=False)
            table = db.table(_MIGRATIONS_TABLE)
            if not table.exists():
                table.create({"name": str, "applied_at": str}, pk="name", strict=True)
            applied = {str(row["name"]) for row in table.rows}
            unknown = sorted(applied - set(known))
            if unknown:
                raise SchemaTooNew(
                    f"{self.path} was migrated by a newer anagrapheus (unknown migrations: {', '.join(unknown)})"
                )
            for name, statements in _MIGRATIONS:
                if name in applied:
                    continue
                with _translated(f"migration {name}"):
                    for statement in statements:
                        self._conn.execute(statement)
                # The wall clock, not the injected one: migrating is not an event, and a recording made
                # with a scripted clock must not change when a release adds a migration.
                table.insert({"name": name, "applied_at": iso_timestamp(utc_now())})

    @contextmanager
    def transaction(self) -> Generator[None]:
        """Run the block in one write transaction; nested blocks are savepoints."""
        with self._lock:
            outer = self._depth == 0
            name = f"anagrapheus_{self._depth}"
            with _translated("beginning a transaction"):
                self._conn.execute("BEGIN IMMEDIATE" if outer else f"SAVEPOINT {name}")
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                # A failed rollback must not mask the error that caused it.
                try:
                    if outer:
                        self._conn.execute("ROLLBACK")
                    else:
                        self._conn.execute(f"ROLLBACK TO {name}")
                        self._conn.execute(f"RELEASE {name}")
                except sqlite3.Error:
                    pass
                raise
            self._depth -= 1
            try:
                with _translated("committing a transaction"):
                    self._conn.execute("COMMIT" if outer else f"RELEASE {name}")
            except StoreError:
                # A commit that failed leaves the transaction open; close it so the store stays usable.
                if outer and self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    # The event log.

    def append(self, events: Sequence[PendingEvent], *, expected_last_seq: int | None = None) -> list[StoredEvent]:
        """Append events in one transaction; with `expected_last_seq`, raise `SeqConflict` if the log moved."""
        with self.transaction():
            last = self._last_seq()
            if expected_last_seq is not None and expected_last_seq != last:
                raise SeqConflict(expected=expected_last_seq, actual=last)
            stored = stamped(events, after=last, clock=self._clock, new_event_id=self._new_event_id)
            with _translated("appending events"):
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
            with _translated("appending copied events"):
                self._conn.executemany(
                    f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                    [event_row(event) for event in events],
                )

    def _last_seq(self) -> int:
        with _translated("reading the last seq"):
            row = self._conn.execute("SELECT max(seq) FROM events").fetchone()
        return int(row[0] or 0)

    def last_seq(self) -> int:
        """Return the seq of the last event, or 0 for an empty log."""
        with self._lock:
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
        if limit is not None and limit < 0:
            raise UsageError("limit must be >= 0")
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
            with self._lock, _translated("reading events"):
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
        with self._lock, _translated("reading scratch"):
            row = self._conn.execute(
                f"SELECT {_SCRATCH_COLUMNS} FROM pin_scratch WHERE unit_id = ? AND key = ?", (unit_id, key)
            ).fetchone()
        return None if row is None else ScratchPin(*row)

    def scratch_put(self, unit_id: str, key: str, *, kind: str, raw: str, fingerprint: str | None) -> ScratchPin:
        """Write a first draw durably, with attempts 1 and the next draw number; the key must be new."""
        with self.transaction(), _translated("writing scratch"):
            (draw_no,) = self._conn.execute(
                "SELECT coalesce(max(draw_no), 0) + 1 FROM pin_scratch WHERE unit_id = ?", (unit_id,)
            ).fetchone()
            self._conn.execute(
                f"INSERT INTO pin_scratch ({_SCRATCH_COLUMNS}) VALUES (?,?,?,?,1,?,?)",
                (unit_id, key, kind, raw, draw_no, fingerprint),
            )
        return ScratchPin(unit_id, key, kind, raw, 1, int(draw_no), fingerprint)

    def scratch_bump(self, unit_id: str, key: str) -> int:
        """Count one more attempt at an existing pin and return the new count."""
        with self.transaction(), _translated("counting an attempt"):
            row = self._conn.execute(
                "UPDATE pin_scratch SET attempts = attempts + 1 WHERE unit_id = ? AND key = ? RETURNING attempts",
                (unit_id, key),
            ).fetchone()
        if row is None:
            raise StoreError(f"no scratch pin {key} in unit {unit_id}")
        return int(row[0])

    def scratch_list(self, unit_id: str) -> list[ScratchPin]:
        """Return the unit's pins in draw order."""
        with self._lock, _translated("listing scratch"):
            rows = self._conn.execute(
                f"SELECT {_SCRATCH_COLUMNS} FROM pin_scratch WHERE unit_id = ? ORDER BY draw_no", (unit_id,)
            ).fetchall()
        return [ScratchPin(*row) for row in rows]

    def open_units(self) -> list[OpenUnit]:
        """Return the units that have pins in scratch, oldest first draw first."""
        with self._lock, _translated("listing open units"):
            rows = self._conn.execute(
                "SELECT unit_id, count(*) FROM pin_scratch GROUP BY unit_id ORDER BY min(rowid)"
            ).fetchall()
        return [OpenUnit(unit_id, int(count)) for unit_id, count in rows]

    def settle_unit(self, unit_id: str, events: Sequence[PendingEvent]) -> list[StoredEvent]:
        """Append `events` and clear the unit's scratch in one transaction (commit or abandon)."""
        with self.transaction():
            stored = self.append(events)
            with _translated("clearing scratch"):
                self._conn.execute("DELETE FROM pin_scratch WHERE unit_id = ?", (unit_id,))
        return stored

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        with self._lock, _translated("closing the store"):
            self._conn.close()

    def __enter__(self) -> SQLiteEventStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
