"""The SQLite store types a sqlite3 error by what the caller can do: a full disk is `StoreUnavailable`."""

from __future__ import annotations

from pathlib import Path

import pytest

from anagrapheus.errors import StoreUnavailable
from anagrapheus.testing.conformance import pending
from anagrapheus.timeline import PendingEvent, SQLiteEventStore


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
