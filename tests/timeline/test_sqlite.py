"""The SQLite store: the conformance suite plus what only SQLite has (files, migrations, pragmas)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import pytest

from anagrapheus.errors import StoreError, UsageError
from anagrapheus.testing.conformance import StoreConformance, pending
from anagrapheus.timeline import SQLiteEventStore, TimelineStore


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
