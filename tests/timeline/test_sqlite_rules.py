"""The SQLite store's own rules, each by its own test: copied events, read bounds, leases, refusals named in full."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

from anagrapheus.errors import SchemaTooNew, SeqConflict, StoreError, UnitBusy, UsageError
from anagrapheus.timeline import SQLiteEventStore

from ..store_conformance import pending

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
