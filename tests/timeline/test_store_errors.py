"""A store's errors are typed by what the caller can do: a wait that ran out or a full disk is `StoreUnavailable`."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from anagrapheus.errors import StoreError, StoreUnavailable
from anagrapheus.testing.conformance import pending
from anagrapheus.timeline import PendingEvent, SQLiteEventStore
from anagrapheus.timeline.ownership import Ownership


def test_a_stranger_that_waits_past_the_timeout_may_try_again() -> None:
    owner = Ownership(where="log.db", timeout=0)
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with owner.held():
            inside.set()
            leave.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(10)
        with pytest.raises(StoreUnavailable) as caught, owner.held():
            pass
    finally:
        leave.set()
        holder.join()
    assert str(caught.value).startswith("log.db: waited 0 s for another task or thread")
    with owner.held() as took:
        assert took  # once the holder let go, the same call gets in: the wait was transient


def test_a_store_waiting_past_its_busy_timeout_for_another_thread_raises_store_unavailable(db_path: Path) -> None:
    inside, leave = threading.Event(), threading.Event()
    with SQLiteEventStore(db_path, busy_timeout=0) as store:

        def hold() -> None:
            with store.transaction():
                inside.set()
                leave.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert inside.wait(10)
            with pytest.raises(StoreUnavailable) as caught:
                store.append([pending(1)])
        finally:
            leave.set()
            holder.join()
        store.append([pending(1)])
        assert store.last_seq() == 1
    assert isinstance(caught.value, StoreError)  # callers catching the parent still catch it


def test_a_write_the_disk_has_no_room_for_is_store_unavailable_and_leaves_nothing(db_path: Path) -> None:
    with SQLiteEventStore(db_path) as store:
        store.append([pending(1)])
        # A page limit at the file's size stands in for a full disk: SQLite answers both with SQLITE_FULL.
        conn = store._conn  # pyright: ignore[reportPrivateUsage]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreUnavailable) as caught:
            store.append(
                [
                    PendingEvent(
                        namespace="test", type="thing", schema_version=1, payload='{"x":"' + "x" * 100_000 + '"}'
                    )
                ]
            )
        assert str(caught.value).startswith(f"{db_path}: appending events failed: database or disk is full")
        assert store.last_seq() == 1
