"""Moving a log: SQLite -> PostgreSQL -> SQLite keeps seq, event ids, times and payloads, and resumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from anagrapheus.errors import SeqConflict, UsageError
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    RecordingHeader,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
    write_recording,
)
from anagrapheus.timeline.copying import copy_log, open_store

from ..store_conformance import pending


def recorded_log(path: Path, types: EventTypeRegistry) -> list[StoredEvent]:
    with SQLiteEventStore(path) as store:
        store.append([pending(i) for i in range(5)])
        for unit in range(3):
            ledger = PinLedger(store, types)
            for i in range(4):
                ledger.resolve(
                    f"p1:tool_call:{unit}-{i}", kind="tool_call", effect=lambda i=i: {"é": i}, interpret=dict
                )
            ledger.commit() if unit != 1 else ledger.abandon(reason="retry")
        return list(store.read())


def test_sqlite_to_sqlite_keeps_everything_and_resumes(tmp_path: Path, types: EventTypeRegistry) -> None:
    events = recorded_log(tmp_path / "a.db", types)
    with SQLiteEventStore(tmp_path / "a.db") as source, SQLiteEventStore(tmp_path / "b.db") as destination:
        destination.append_stored(events[:4])
        assert copy_log(source, destination, batch=3) == len(events) - 4
        assert list(destination.read()) == events
        assert copy_log(source, destination) == 0
        # The copy continues as a log of its own, after the copied seq numbers.
        (more,) = destination.append([pending(99)])
        assert more.seq == len(events) + 1


def test_a_destination_that_is_not_a_prefix_is_refused(tmp_path: Path, types: EventTypeRegistry) -> None:
    recorded_log(tmp_path / "a.db", types)
    with SQLiteEventStore(tmp_path / "a.db") as source, SQLiteEventStore(tmp_path / "b.db") as destination:
        destination.append([pending(1)])
        with pytest.raises(UsageError, match="not a prefix"):
            copy_log(source, destination)
        with pytest.raises(SeqConflict):
            destination.append_stored(list(source.read(since=3)))
        with pytest.raises(UsageError, match="consecutive"):
            destination.append_stored([*source.read(since=1, limit=1), *source.read(since=3, limit=1)])


@pytest.mark.postgres
def test_sqlite_to_postgres_and_back(
    tmp_path: Path, types: EventTypeRegistry, postgres_dsn: str, pg_schema: str
) -> None:
    from anagrapheus.timeline.postgres import PostgresEventStore

    events = recorded_log(tmp_path / "a.db", types)
    with (
        SQLiteEventStore(tmp_path / "a.db") as source,
        PostgresEventStore(postgres_dsn, schema=pg_schema) as middle,
        SQLiteEventStore(tmp_path / "back.db") as back,
    ):
        assert copy_log(source, middle, batch=4) == len(events)
        assert list(middle.read()) == events
        assert middle.last_seq() == len(events)
        (next_event,) = middle.append([pending(99)])
        assert next_event.seq == len(events) + 1
        assert copy_log(middle, back) == len(events) + 1
        assert list(back.read()) == [*events, next_event]
        # A replay from the moved log answers as from the original, and its recording is the same bytes.
        replay = ReplayPins.from_events(middle.read(), types)
        assert replay.resolve("p1:tool_call:2-3", kind="tool_call", effect=dict, interpret=dict) == {"é": 3}
        header = RecordingHeader(description="moved", recorded_with="test", rerecord="pytest")
        from_sqlite = write_recording(
            tmp_path / "sqlite.jsonl", source.read(namespace="anagrapheus", type="pin_promoted"), header=header
        )
        from_postgres = write_recording(
            tmp_path / "postgres.jsonl", middle.read(namespace="anagrapheus", type="pin_promoted"), header=header
        )
        assert from_sqlite.read_bytes() == from_postgres.read_bytes()


@pytest.mark.postgres
def test_open_store_by_address(tmp_path: Path, postgres_dsn: str, pg_schema: str) -> None:
    from anagrapheus.timeline.postgres import PostgresEventStore

    with open_store(str(tmp_path / "x.db")) as store:
        assert isinstance(store, SQLiteEventStore)
    with open_store(postgres_dsn, schema=pg_schema) as store:
        assert isinstance(store, PostgresEventStore)
