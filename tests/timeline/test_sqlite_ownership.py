"""Who a SQLite transaction belongs to (a task or a thread, never the thread alone), and what is refused at the door."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from anagrapheus.errors import AnagrapheusError, StoreError, UsageError
from anagrapheus.timeline import SQLiteEventStore

from ..store_conformance import pending


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
