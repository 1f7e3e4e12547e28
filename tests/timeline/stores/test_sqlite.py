"""The SQLite store: the conformance suite plus what only SQLite has (files, migrations, pragmas, leases), who a
transaction belongs to, and each failing write named by file and step."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import pytest

from anagrapheus.errors import (
    AnagrapheusError,
    SchemaTooNew,
    SeqConflict,
    StoreError,
    UnitBusy,
    UnitClosed,
    UsageError,
)
from anagrapheus.testing.conformance import StoreConformance, pending
from anagrapheus.timeline import SQLiteEventStore, TimelineStore

from ...store_conformance import copied_event


class TestSQLiteConformance(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Iterator[Callable[[], TimelineStore]]:
        opened: list[SQLiteEventStore] = []

        def make() -> TimelineStore:
            store = SQLiteEventStore(tmp_path / "log.db")
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()


def test_file_is_wal_with_strict_tables(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    SQLiteEventStore(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {name: sql for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")}
    assert {"events", "pin_scratch", "anagrapheus_migrations"} <= set(tables)
    assert all(tables[name].rstrip().endswith("STRICT") for name in ("events", "pin_scratch"))
    names = [row[0] for row in conn.execute("SELECT name FROM anagrapheus_migrations ORDER BY name")]
    assert names == [
        "0001_events",
        "0002_pin_scratch",
        "0003_pin_scratch_draw_order",
        "0004_closed_units",
        "0005_unit_leases",
    ]


def test_reopening_keeps_the_log_and_applies_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    with SQLiteEventStore(path) as store:
        store.append([pending(1)])
        store.scratch_put("u", "k", kind="model_call", raw="1", fingerprint=None)
    with SQLiteEventStore(path) as store:
        assert [e.payload for e in store.read()] == ['{"n":1}']
        assert [p.key for p in store.scratch_list("u")] == ["k"]


def test_the_log_refuses_updates_and_deletes(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    with SQLiteEventStore(path) as store:
        store.append([pending(1)])
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE events SET payload = '{}'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM events")


def test_injected_clock_and_ids_give_identical_logs(tmp_path: Path) -> None:
    def make(path: Path) -> SQLiteEventStore:
        ids = count(1)
        return SQLiteEventStore(
            path,
            clock=lambda: datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
            new_event_id=lambda: f"01900000-0000-7000-8000-{next(ids):012d}",
        )

    logs = []
    for name in ("a.db", "b.db"):
        with make(tmp_path / name) as store:
            store.append([pending(1), pending(2)])
            logs.append(list(store.read()))
    assert logs[0] == logs[1]
    assert logs[0][0].created_at == "2026-01-02T03:04:05.000000Z"
    assert logs[0][1].event_id == "01900000-0000-7000-8000-000000000002"


def test_naive_clock_is_a_usage_error(tmp_path: Path) -> None:
    with (
        SQLiteEventStore(tmp_path / "x.db", clock=lambda: datetime(2026, 1, 1)) as store,
        pytest.raises(UsageError, match="timezone-aware"),
    ):
        store.append([pending(1)])


def test_sqlite_errors_surface_as_store_errors(tmp_path: Path) -> None:
    (tmp_path / "not-a-db").write_bytes(b"this is not a sqlite database, not at all" * 100)
    with pytest.raises(StoreError) as caught:
        SQLiteEventStore(tmp_path / "not-a-db")
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)
    store = SQLiteEventStore(tmp_path / "ok.db")
    store.close()
    with pytest.raises(StoreError):
        store.last_seq()


def test_an_older_database_is_migrated_forward(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SQLiteEventStore(path) as store:
        store.append([pending(1)])
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX pin_scratch_draw_order")
    conn.execute("DELETE FROM anagrapheus_migrations WHERE name = '0003_pin_scratch_draw_order'")
    conn.commit()
    conn.close()
    with SQLiteEventStore(path) as store:
        assert [e.payload for e in store.read()] == ['{"n":1}']
    conn = sqlite3.connect(path)
    plan = " ".join(
        str(row)
        for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT coalesce(max(draw_no), 0) + 1 FROM pin_scratch WHERE unit_id = 'u'"
        )
    )
    assert "pin_scratch_draw_order" in plan


def test_opening_leaves_recursive_triggers_off(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        # The store's own connection: the only place the pragma can be read.
        assert store._conn.execute("PRAGMA recursive_triggers").fetchone()[0] == 0  # pyright: ignore[reportPrivateUsage]


def test_opening_runs_no_sqlite_utils_plugin(tmp_path: Path) -> None:
    import sqlite_utils.plugins

    seen: list[object] = []

    class Plugin:
        @sqlite_utils.hookimpl
        def prepare_connection(self, conn: object) -> None:
            seen.append(conn)

    plugin = Plugin()
    sqlite_utils.plugins.pm.register(plugin, name="anagrapheus-test-plugin")
    try:
        SQLiteEventStore(tmp_path / "log.db").close()
    finally:
        sqlite_utils.plugins.pm.unregister(plugin)
    assert seen == []


def test_a_migration_failure_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    conn = sqlite3.connect(path)
    # Recording an applied migration fails inside SQLite, outside the statements of the migration itself.
    conn.execute("CREATE TABLE anagrapheus_migrations (name TEXT PRIMARY KEY, applied_at TEXT) STRICT")
    conn.execute(
        "CREATE TRIGGER no_record BEFORE INSERT ON anagrapheus_migrations BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="migrating") as caught:
        SQLiteEventStore(path)
    assert isinstance(caught.value.__cause__, sqlite3.Error)


def test_read_only_store_reads_and_refuses_every_write_before_an_effect(tmp_path: Path) -> None:
    from anagrapheus.timeline import EventTypeRegistry, PinLedger, pin_key

    path = tmp_path / "log.db"
    with SQLiteEventStore(path) as store:
        store.append([pending(1)])
        store.scratch_put("open-unit", "k1", kind="model_call", raw='"r"', fingerprint=None)
    before = path.read_bytes()
    with SQLiteEventStore(path, read_only=True) as store:
        assert store.read_only
        assert [e.seq for e in store.read()] == [1]
        assert [p.raw_text for p in store.scratch_list("open-unit")] == ['"r"']
        with pytest.raises(StoreError, match="read_only"):
            store.append([pending(2)])
        effects: list[int] = []
        ledger = PinLedger(store, EventTypeRegistry())
        with pytest.raises(StoreError, match=str(path)):
            ledger.resolve(
                pin_key("model_call", {"p": 1}), kind="model_call", effect=lambda: effects.append(1), interpret=str
            )
        assert effects == []
    assert path.read_bytes() == before


def test_read_only_refuses_a_missing_or_unmigrated_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no database"):
        SQLiteEventStore(tmp_path / "absent.db", read_only=True)
    assert not (tmp_path / "absent.db").exists()
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError, match="lacks migrations"):
        SQLiteEventStore(tmp_path / "other.db", read_only=True)


def test_a_database_with_garbage_in_a_page_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    with SQLiteEventStore(path) as store:
        store.append([pending(1)])
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    assert len(data) >= 2 * page
    data[page : 2 * page] = bytes(range(256)) * (page // 256)  # page 2 (the log's table) overwritten
    path.write_bytes(bytes(data))
    for leftover in ("log.db-wal", "log.db-shm"):
        (tmp_path / leftover).unlink(missing_ok=True)
    for read_only in (False, True):
        with pytest.raises(StoreError, match=str(path)), SQLiteEventStore(path, read_only=read_only) as store:
            list(store.read())


def test_a_log_from_before_unit_leases_reads_read_only_and_migrates_when_opened_to_write(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SQLiteEventStore(path) as store:
        store.append([pending(1)])
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE unit_leases")
    conn.execute("DELETE FROM anagrapheus_migrations WHERE name = '0005_unit_leases'")
    conn.commit()
    conn.close()
    with SQLiteEventStore(path, read_only=True) as store:
        assert [e.seq for e in store.read()] == [1]
    with SQLiteEventStore(path) as store:
        store.scratch_put("u", "k", kind="model_call", raw='"r"', fingerprint=None)
    assert "unit_leases" in sqlite_tables(path)


def sqlite_tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


# No process has this id: it is beyond every system's largest pid.
DEAD_PID = 2**31 - 1


def test_copied_events_are_appended_verbatim_and_must_follow_the_log(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "from.db") as source:
        events = source.append([pending(1), pending(2), pending(3)])
    with SQLiteEventStore(tmp_path / "to.db") as copy:
        copy.append_stored([])
        assert copy.last_seq() == 0
        copy.append_stored(events[:2])
        assert list(copy.read()) == events[:2]
        with pytest.raises(SeqConflict) as conflict:
            copy.append_stored(events[:1])
        assert (conflict.value.expected, conflict.value.actual) == (0, 2)
        with pytest.raises(UsageError, match="1 is followed by 3"):
            copy.append_stored([events[0], events[2]])
        copy.append_stored(events[2:])
        assert list(copy.read()) == events


@pytest.mark.parametrize("since", [True, "1", -1, 1.0], ids=repr)
def test_a_since_that_is_no_seq_is_refused(tmp_path: Path, since: object) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store, pytest.raises(UsageError) as raised:
        list(store.read(since=since))  # pyright: ignore[reportArgumentType]
    assert str(raised.value) == f"since must be an integer seq >= 0, not {since!r}"


@pytest.mark.parametrize("limit", [True, "1", -1, 1.0], ids=repr)
def test_a_limit_that_is_no_count_is_refused(tmp_path: Path, limit: object) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store, pytest.raises(UsageError) as raised:
        list(store.read(limit=limit))  # pyright: ignore[reportArgumentType]
    assert str(raised.value) == f"limit must be an integer >= 0, not {limit!r}"


def test_a_limit_of_one_reads_one_event_and_zero_reads_none(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        store.append([pending(1), pending(2)])
        assert [e.seq for e in store.read(limit=1)] == [1]
        assert list(store.read(limit=0)) == []


def test_a_closed_store_refuses_each_read_naming_the_database_and_the_read(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = SQLiteEventStore(path)
    store.close()
    reads = {
        "reading the last seq": store.last_seq,
        "reading events": lambda: list(store.read()),
        "reading scratch": lambda: store.scratch_get("u", "k"),
        "listing scratch": lambda: store.scratch_list("u"),
        "listing open units": store.open_units,
        "reading a unit's outcome": lambda: store.unit_outcome("u"),
    }
    for action, read in reads.items():
        with pytest.raises(StoreError) as raised:
            read()
        assert str(raised.value).startswith(f"{path}: {action} failed: "), action


def test_synchronous_normal_is_taken_and_anything_else_refused(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "log.db", synchronous="NORMAL") as store:
        store.append([pending(1)])
    with pytest.raises(UsageError) as raised:
        SQLiteEventStore(tmp_path / "log.db", synchronous="normal")  # pyright: ignore[reportArgumentType]
    assert str(raised.value) == "synchronous must be 'FULL' or 'NORMAL', not 'normal'"


def test_an_unsynced_transaction_commits_and_every_synced_one_after_it_is_synced(tmp_path: Path) -> None:
    # A lease and a run's held ids are written without their own sync; every synced write that follows them,
    # committed or rolled back, commits at FULL (read inside it on the store's own connection: the setting is per
    # connection, and SQLite reads it at the commit). Between them the connection may stay at NORMAL (#43: one
    # PRAGMA for unsynced transactions in a row, not two each).
    def synchronous(store: SQLiteEventStore) -> int:
        return store._conn.execute("PRAGMA synchronous").fetchone()[0]  # pyright: ignore[reportPrivateUsage]

    def in_a_synced_transaction(store: SQLiteEventStore) -> int:
        with store.transaction():
            store.append([pending(store.last_seq() + 1)])
            return synchronous(store)

    with SQLiteEventStore(tmp_path / "log.db") as store:
        assert synchronous(store) == 2  # FULL
        with store.unsynced_transaction():
            assert synchronous(store) == 1  # NORMAL
            store.append([pending(1)])
        assert in_a_synced_transaction(store) == 2
        with store.unsynced_transaction():
            store.append([pending(3)])
        with store.unsynced_transaction():
            assert synchronous(store) == 1
            store.append([pending(4)])
        assert in_a_synced_transaction(store) == 2
        with pytest.raises(RuntimeError), store.unsynced_transaction():
            store.append([pending(6)])
            raise RuntimeError("rolled back")
        assert in_a_synced_transaction(store) == 2
        assert [event.seq for event in store.read()] == [1, 2, 3, 4, 5, 6]
    with SQLiteEventStore(tmp_path / "log.db", synchronous="NORMAL") as store:
        with store.unsynced_transaction():
            store.append([pending(7)])
        assert synchronous(store) == 1  # NORMAL, as opened
        assert in_a_synced_transaction(store) == 1
        assert [event.seq for event in store.read()][-2:] == [7, 8]


def test_a_path_with_a_nul_is_refused_naming_it(tmp_path: Path) -> None:
    path = f"{tmp_path}/log\0.db"
    with pytest.raises(UsageError) as raised:
        SQLiteEventStore(path)
    assert str(raised.value) == f"the database path {path!r} holds a NUL character"


def test_a_file_that_is_no_database_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are notes, not a database; " * 200)
    with pytest.raises(StoreError) as raised:
        SQLiteEventStore(path)
    assert str(raised.value).startswith(f"{path}: opening the database failed: ")
    with pytest.raises(StoreError) as raised:
        SQLiteEventStore(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path}: opening the database failed: ")


def test_read_only_names_the_migrations_a_database_lacks(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError) as raised:
        SQLiteEventStore(path, read_only=True)
    assert str(raised.value) == (
        f"{path}: its schema lacks migrations 0001_events, 0002_pin_scratch, 0003_pin_scratch_draw_order,"
        " 0004_closed_units; open it once without read_only to migrate it (or it is not an anagrapheus database)"
    )


@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read_only"])
def test_a_database_newer_than_the_code_is_refused_naming_it(tmp_path: Path, read_only: bool) -> None:
    path = tmp_path / "log.db"
    SQLiteEventStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO anagrapheus_migrations VALUES ('0099_from_the_future', '2030-01-01T00:00:00Z')")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew) as raised:
        SQLiteEventStore(path, read_only=read_only)
    assert str(raised.value).startswith(f"{path} was migrated by a newer anagrapheus")
    assert "0099_from_the_future" in str(raised.value)


def test_the_migrations_table_is_strict_and_keyed_by_name(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    SQLiteEventStore(path).close()
    conn = sqlite3.connect(path)
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'anagrapheus_migrations'").fetchone()
        columns = [(row[1], row[2], row[5]) for row in conn.execute("PRAGMA table_info(anagrapheus_migrations)")]
    finally:
        conn.close()
    assert sql.rstrip().endswith("STRICT")
    assert columns == [("name", "TEXT", 1), ("applied_at", "TEXT", 0)]


# Unit leases: one store at a time draws in an open unit; a lease whose holder is gone is taken over.


def leases(path: Path) -> list[tuple[str, str, str, int]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT unit_id, holder, host, pid FROM unit_leases ORDER BY unit_id").fetchall()
    finally:
        conn.close()


def lease(path: Path, unit_id: str, *, host: str, pid: int) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO unit_leases VALUES (?, 'another-holder', ?, ?)", (unit_id, host, pid))
        conn.commit()
    finally:
        conn.close()


def draws(store: SQLiteEventStore, unit_id: str) -> bool:
    """Whether the store may draw in the unit now (it takes the lease), or is refused as busy."""
    try:
        store.scratch_put(unit_id, "k", kind="model_call", raw="1", fingerprint=None)
    except UnitBusy:
        return False
    return True


def test_a_lease_is_taken_over_only_from_a_holder_that_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    SQLiteEventStore(path).close()
    here = socket.gethostname()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        lease(path, "dead", host=here, pid=DEAD_PID)
        lease(path, "live", host=here, pid=sleeper.pid)
        lease(path, "elsewhere", host=here + ".elsewhere", pid=DEAD_PID)
        lease(path, "closed store", host=here, pid=os.getpid())
        with SQLiteEventStore(path, unit_wait=0) as store:
            taken = {unit: draws(store, unit) for unit in ("dead", "live", "elsewhere", "closed store")}
        assert taken == {"dead": True, "live": False, "elsewhere": False, "closed store": True}
        # Asking whether the live holder is alive sent it no signal.
        sleeper.terminate()
        assert sleeper.wait() == -signal.SIGTERM
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_lease_held_by_an_open_store_of_this_process_stands(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    with SQLiteEventStore(path) as first, SQLiteEventStore(path, unit_wait=0) as second:
        assert draws(first, "u")
        assert not draws(second, "u")
        assert draws(first, "u")


def test_closing_a_store_releases_its_leases_and_settling_a_unit_its_lease(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    first = SQLiteEventStore(path)
    assert draws(first, "u") and draws(first, "v")
    first.settle_unit("v", outcome="committed", events=lambda pins: [])
    assert [row[0] for row in leases(path)] == ["u"]
    with SQLiteEventStore(path, unit_wait=0) as second:
        assert not draws(second, "u")
        first.close()
        assert leases(path) == []
        assert draws(second, "u")


def test_a_closed_unit_needs_no_lease_and_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    with SQLiteEventStore(path) as first, SQLiteEventStore(path, unit_wait=0) as second:
        assert draws(first, "u")
        first.settle_unit("u", outcome="abandoned", events=lambda pins: [])
        assert draws(first, "w")
        with pytest.raises(Exception, match="abandoned"):
            second.scratch_put("u", "k", kind="model_call", raw="1", fingerprint=None)
        assert leases(path)[0][0] == "w"


def test_a_lease_of_another_users_live_process_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As root every process may be signalled; another user's live process answers with EPERM otherwise.
    def kill(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    path = tmp_path / "log.db"
    SQLiteEventStore(path).close()
    lease(path, "u", host=socket.gethostname(), pid=DEAD_PID)
    monkeypatch.setattr(os, "kill", kill)
    with SQLiteEventStore(path, unit_wait=0) as store:
        assert not draws(store, "u")


def test_a_store_waiting_past_its_busy_timeout_for_another_thread_names_the_database(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    inside, leave = threading.Event(), threading.Event()
    with SQLiteEventStore(path, busy_timeout=0) as store:

        def hold() -> None:
            with store.transaction():
                inside.set()
                leave.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            inside.wait()
            with pytest.raises(StoreError) as raised:
                store.append([pending(1)])
        finally:
            leave.set()
            holder.join()
    assert str(raised.value).startswith(f"{path}: waited 0 s for another task or thread")


def test_closing_a_store_twice_is_harmless(tmp_path: Path) -> None:
    store = SQLiteEventStore(tmp_path / "log.db")
    store.close()
    store.close()


def test_a_read_only_store_beside_an_open_writer_sees_what_the_writer_appended(tmp_path: Path) -> None:
    # The folder is writable, so the reader takes part in WAL locking and reads frames not yet checkpointed.
    path = tmp_path / "log.db"
    with SQLiteEventStore(path) as writer:
        writer.append([pending(1), pending(2)])
        with SQLiteEventStore(path, read_only=True) as reader:
            assert [e.seq for e in reader.read()] == [1, 2]


def test_a_database_that_cannot_be_switched_to_wal_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as raised:
        SQLiteEventStore(":memory:")
    assert str(raised.value) == ":memory:: could not switch to WAL (journal_mode is memory)"


def test_another_thread_waits_for_a_transaction_and_never_joins_it(store: SQLiteEventStore) -> None:
    inside = threading.Event()
    appended: list[int] = []

    def other() -> None:
        inside.wait()
        appended.extend(e.seq for e in store.append([pending(2)]))

    thread = threading.Thread(target=other)
    thread.start()
    with pytest.raises(RuntimeError), store.transaction():
        store.append([pending(1)])
        inside.set()
        time.sleep(0.2)
        raise RuntimeError("rolled back")
    thread.join()
    assert appended == [1]
    assert [e.payload for e in store.read()] == ['{"n":2}']


@pytest.mark.anyio
async def test_a_task_waits_off_the_loop_for_another_tasks_transaction(store: SQLiteEventStore) -> None:
    inside = asyncio.Event()

    async def holder() -> None:
        with pytest.raises(RuntimeError), store.transaction():
            store.append([pending(1)])
            inside.set()
            await asyncio.sleep(0.2)
            raise RuntimeError("rolled back")

    async def other() -> list[int]:
        await inside.wait()
        # A synchronous call on the loop's thread would wait for itself: refused at once, not hung.
        with pytest.raises(UsageError, match="another task on this thread"):
            store.append([pending(9)])
        stored = await asyncio.to_thread(store.append, [pending(2)])
        return [e.seq for e in stored]

    _, seqs = await asyncio.gather(holder(), other())
    assert seqs == [1]
    assert [e.payload for e in store.read()] == ['{"n":2}']


@pytest.mark.anyio
async def test_work_a_holder_hands_to_a_thread_joins_its_transaction(store: SQLiteEventStore) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        await asyncio.gather(*(asyncio.to_thread(store.append, [pending(i)]) for i in range(4)))
        assert store.last_seq() == 4
        raise RuntimeError("rolled back")
    assert store.last_seq() == 0


@pytest.mark.parametrize("option", ["busy_timeout", "unit_wait"])
@pytest.mark.parametrize("timeout", [float("nan"), -1, float("inf"), "5", True])
def test_a_wait_that_is_not_a_finite_duration_is_refused(tmp_path: Path, option: str, timeout: object) -> None:
    with pytest.raises(UsageError, match=f"{option} must be a finite number of seconds"):
        SQLiteEventStore(tmp_path / "log.db", **{option: timeout})  # type: ignore[arg-type]
    assert not (tmp_path / "log.db").exists()


def test_a_path_with_a_nul_byte_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="NUL"):
        SQLiteEventStore(str(tmp_path / "log\0.db"))


def test_a_database_with_a_corrupt_page_is_a_store_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    with SQLiteEventStore(path) as store:
        store.append([pending(i) for i in range(200)])
    conn = sqlite3.connect(path)
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(path.read_bytes())
    data[page : 2 * page] = b"\xa5" * page
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as caught, SQLiteEventStore(path) as store:
        list(store.read())
    assert str(path) in str(caught.value)


def test_a_locked_database_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    with SQLiteEventStore(path, busy_timeout=0) as store:
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError) as caught:
                store.append([pending(1)])
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
    assert str(path) in str(caught.value) and "locked" in str(caught.value)
    assert isinstance(caught.value, AnagrapheusError)


def execute(path: Path, *statements: str) -> None:
    """Run statements on the database file over a connection of the test's own, beside the store's."""
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def refuse(path: Path, when: str, table: str) -> None:
    """Make every `when` (e.g. BEFORE INSERT) on one of the store's tables fail with the message 'refused here'."""
    execute(path, f"CREATE TRIGGER refuse_here {when} ON {table} BEGIN SELECT RAISE(ABORT, 'refused here'); END")


def failure(call: Callable[[], object]) -> str:
    with pytest.raises(StoreError) as caught:
        call()
    assert isinstance(caught.value.__cause__, sqlite3.Error)
    return str(caught.value)


def test_a_refused_append_names_the_step(db_path: Path) -> None:
    with SQLiteEventStore(db_path) as store:
        refuse(db_path, "BEFORE INSERT", "events")
        assert failure(lambda: store.append([pending(1)])) == f"{db_path}: appending events failed: refused here"
        assert (
            failure(lambda: store.append_stored([copied_event(1)]))
            == f"{db_path}: appending copied events failed: refused here"
        )
        assert store.last_seq() == 0


def test_a_refused_scratch_write_names_the_step(db_path: Path) -> None:
    with SQLiteEventStore(db_path) as store:
        store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
        refuse(db_path, "BEFORE INSERT", "pin_scratch")
        put = lambda: store.scratch_put("u1", "k2", kind="model_call", raw='"b"', fingerprint=None)  # noqa: E731
        assert failure(put) == f"{db_path}: writing scratch failed: refused here"
        execute(db_path, "DROP TRIGGER refuse_here")
        refuse(db_path, "BEFORE UPDATE", "pin_scratch")
        assert failure(lambda: store.scratch_reuse("u1", "k1")) == f"{db_path}: reusing a pin failed: refused here"
        execute(db_path, "DROP TRIGGER refuse_here")
        refuse(db_path, "BEFORE DELETE", "pin_scratch")
        settle = lambda: store.settle_unit("u1", outcome="committed", events=lambda pins: [])  # noqa: E731
        assert failure(settle) == f"{db_path}: closing the unit failed: refused here"
        # Each failed step rolled its transaction back: the unit is as it was.
        assert [(p.key, p.attempts) for p in store.scratch_list("u1")] == [("k1", 1)]
        assert store.unit_outcome("u1") is None


def test_a_refused_lease_names_the_unit(db_path: Path) -> None:
    with SQLiteEventStore(db_path) as store:
        refuse(db_path, "BEFORE INSERT", "unit_leases")
        put = lambda: store.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)  # noqa: E731
        assert failure(put) == f"{db_path}: taking the lease of unit u1 failed: refused here"
        assert store.scratch_list("u1") == []


def test_a_failed_commit_is_named_and_leaves_the_store_usable(db_path: Path) -> None:
    with SQLiteEventStore(db_path) as store:
        # A deferred foreign key is checked at COMMIT only: each append leaves a row that breaks it, so COMMIT fails.
        execute(
            db_path,
            "CREATE TABLE parent (id INTEGER PRIMARY KEY)",
            "CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
            "CREATE TRIGGER orphan AFTER INSERT ON events BEGIN INSERT INTO child VALUES (NEW.seq); END",
        )
        message = failure(lambda: store.append([pending(1)]))
        assert message == f"{db_path}: committing a transaction failed: FOREIGN KEY constraint failed"
        # The failed COMMIT left its transaction open; the store rolled it back, so the next write goes through.
        execute(db_path, "DROP TRIGGER orphan")
        assert [e.seq for e in store.append([pending(2)])] == [1]
        assert [e.payload for e in store.read()] == ['{"n":2}']


def test_a_failed_migration_names_the_migration(db_path: Path) -> None:
    # A table of the store's name already there, made by something else: the first migration cannot create it.
    execute(db_path, "CREATE TABLE events (x)")
    assert failure(lambda: SQLiteEventStore(db_path)) == (
        f"{db_path}: migration 0001_events failed: table events already exists"
    )


def test_a_migrations_table_it_cannot_write_to_is_named(db_path: Path) -> None:
    execute(db_path, "CREATE TABLE anagrapheus_migrations (name TEXT PRIMARY KEY)")
    assert failure(lambda: SQLiteEventStore(db_path)) == (
        f"{db_path}: migrating the schema failed: table anagrapheus_migrations has no column named applied_at"
    )


def test_a_file_that_is_no_database_is_refused_read_only_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are notes, not a database; " * 200)
    assert failure(lambda: SQLiteEventStore(path, read_only=True)) == (
        f"{path}: opening the database read-only failed: file is not a database"
    )


def test_a_lease_a_closing_store_failed_to_delete_is_taken_over(db_path: Path) -> None:
    first = SQLiteEventStore(db_path)
    first.scratch_put("u1", "k1", kind="model_call", raw='"a"', fingerprint=None)
    refuse(db_path, "BEFORE DELETE", "unit_leases")
    # Letting its leases go is best effort: closing still succeeds, and leaves the lease row behind.
    first.close()
    execute(db_path, "DROP TRIGGER refuse_here")
    with SQLiteEventStore(db_path, unit_wait=0.1) as second:
        # Its holder is no open store of this process any more (though the object lives on): the lease is stale.
        assert second.scratch_reuse("u1", "k1") is not None
    assert first.read_only is False


def test_several_pins_written_at_once_are_written_as_each_put_and_reused_would_be(tmp_path: Path) -> None:
    # The held draws' flush writes them in one statement's steps, their attempts counted in it (#43): the scratch it
    # leaves is the one `scratch_put` then `scratch_reuse` for each further attempt leave, a key already there too.
    def pins(store: SQLiteEventStore) -> list[tuple[object, ...]]:
        return [(p.key, p.kind, p.raw_text, p.attempts, p.draw_no, p.fingerprint) for p in store.scratch_list("u")]

    with SQLiteEventStore(tmp_path / "many.db") as many, SQLiteEventStore(tmp_path / "each.db") as each:
        many.scratch_put("u", "k0", kind="model_call", raw='"zero"', fingerprint=None)
        many.scratch_put_many("u", [("k1", "run_id", '"one"', None, 1), ("k0", "model_call", '"zero"', None, 2)])
        many.scratch_put_many("u", [("k2", "run_clock", "2", '{"a":"b"}', 3)])
        each.scratch_put("u", "k0", kind="model_call", raw='"zero"', fingerprint=None)
        each.scratch_put("u", "k1", kind="run_id", raw='"one"', fingerprint=None)
        each.scratch_put("u", "k0", kind="model_call", raw='"zero"', fingerprint=None)
        each.scratch_reuse("u", "k0")
        each.scratch_put("u", "k2", kind="run_clock", raw="2", fingerprint='{"a":"b"}')
        each.scratch_reuse("u", "k2")
        each.scratch_reuse("u", "k2")
        assert pins(many) == pins(each)
        assert [(key, attempts, draw_no) for key, _, _, attempts, draw_no, _ in pins(many)] == [
            ("k0", 3, 1),
            ("k1", 1, 2),
            ("k2", 3, 3),
        ]
        many.settle_unit("u", outcome="abandoned", events=lambda _: [pending(1)])
        with pytest.raises(UnitClosed) as closed:
            many.scratch_put_many("u", [("k3", "run_id", '"three"', None, 1), ("k4", "run_id", '"four"', None, 1)])
        assert closed.value.raw_text == '"three"'  # the first's, as its own put would have said
        assert many.scratch_list("u") == []
