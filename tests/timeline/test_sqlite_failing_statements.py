"""Each write of the SQLite store, made to fail in a real database file, names the file and the step that failed."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from anagrapheus.errors import StoreError
from anagrapheus.timeline import SQLiteEventStore

from ..store_conformance import copied_event, pending


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
