"""copy_log: a log moved between stores keeps seq, ids, times, payloads and closed units; batches and refusals."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.cli import main
from anagrapheus.errors import SeqConflict, StoreError, UnitClosed, UsageError
from anagrapheus.timeline import (
    EventTypeRegistry,
    PendingEvent,
    PinLedger,
    RecordingHeader,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
    TimelineStore,
    copy_log,
    write_recording,
)
from anagrapheus.timeline.stores.copying import open_store
from anagrapheus.timeline.stores.ports import ClosedUnit

from ...store_conformance import pending


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
    from anagrapheus.timeline.stores.postgres import PostgresEventStore

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
    from anagrapheus.timeline.stores.postgres import PostgresEventStore

    with open_store(str(tmp_path / "x.db")) as store:
        assert isinstance(store, SQLiteEventStore)
    with open_store(postgres_dsn, schema=pg_schema) as store:
        assert isinstance(store, PostgresEventStore)


class BatchesSeen(SQLiteEventStore):
    """A real SQLite store that notes the size of each `append_stored` (each is one transaction)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.batches: list[int] = []

    def append_stored(self, events: Sequence[StoredEvent]) -> None:
        self.batches.append(len(events))
        super().append_stored(events)


def source_of(path: Path, count: int) -> SQLiteEventStore:
    store = SQLiteEventStore(path)
    store.append([pending(i) for i in range(count)])
    return store


@pytest.mark.parametrize(("batch", "batches"), [(1, [1, 1, 1, 0]), (2, [2, 1]), (3, [3, 0]), (1000, [3])])
def test_events_are_copied_in_batches_of_the_size_asked(tmp_path: Path, batch: int, batches: list[int]) -> None:
    destination = BatchesSeen(tmp_path / "b.db")
    with source_of(tmp_path / "a.db", 3) as source, destination:
        assert copy_log(source, destination, batch=batch) == 3
        assert destination.batches == batches
        assert list(destination.read()) == list(source.read())


@pytest.mark.parametrize("batch", [0, -1])
def test_a_batch_below_one_is_refused(tmp_path: Path, batch: int) -> None:
    with source_of(tmp_path / "a.db", 1) as source, SQLiteEventStore(tmp_path / "b.db") as destination:
        with pytest.raises(UsageError) as caught:
            copy_log(source, destination, batch=batch)
        assert str(caught.value) == "batch must be >= 1"


def test_a_destination_that_cannot_take_stored_events_is_refused_by_name(tmp_path: Path) -> None:
    nowhere = object()
    with source_of(tmp_path / "a.db", 1) as source, pytest.raises(UsageError) as caught:
        copy_log(source, nowhere)  # pyright: ignore[reportArgumentType]
    assert str(caught.value) == f"{nowhere!r} cannot take copied events (it has no append_stored)"


def test_a_destination_holding_other_events_is_refused_naming_both(tmp_path: Path) -> None:
    with source_of(tmp_path / "a.db", 2) as source, source_of(tmp_path / "b.db", 1) as destination:
        (theirs,) = destination.read()
        ours = next(source.read())
        with pytest.raises(UsageError) as caught:
            copy_log(source, destination)
    assert str(caught.value) == (
        "the destination's log is not a prefix of the source's: "
        f"at seq 1 it holds {theirs.event_id}, the source {ours.event_id}"
    )


def test_a_destination_longer_than_the_source_is_refused_saying_the_source_has_nothing_there(tmp_path: Path) -> None:
    with source_of(tmp_path / "a.db", 1) as source, SQLiteEventStore(tmp_path / "b.db") as destination:
        destination.append_stored(list(source.read()))
        destination.append([pending(9)])
        (_, theirs) = destination.read()
        with pytest.raises(UsageError) as caught:
            copy_log(source, destination)
    assert str(caught.value) == (
        "the destination's log is not a prefix of the source's: "
        f"at seq 2 it holds {theirs.event_id}, the source nothing"
    )


def test_an_address_that_is_not_a_postgres_uri_opens_a_sqlite_file(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "c.db")) as store:
        assert isinstance(store, SQLiteEventStore)
    assert (tmp_path / "c.db").exists()


def test_the_default_batch_is_a_thousand_events(tmp_path: Path) -> None:
    destination = BatchesSeen(tmp_path / "b.db")
    with source_of(tmp_path / "a.db", 1001) as source, destination:
        assert copy_log(source, destination) == 1001
        assert destination.batches == [1000, 1]


# A closed local port: the store is refused as it connects, after it has checked its schema's name.
NOWHERE = "postgresql://postgres@127.0.0.1:1/nowhere"


def test_a_postgres_address_opens_the_anagrapheus_schema_by_default() -> None:
    with pytest.raises(StoreError) as caught:
        open_store(NOWHERE)
    assert str(caught.value).startswith("connecting failed on schema anagrapheus of database nowhere on 127.0.0.1:1:")


def test_a_postgres_address_opens_the_schema_asked_for() -> None:
    with pytest.raises(UsageError) as caught:
        open_store(NOWHERE, schema="Not-A-Name")
    assert str(caught.value) == "schema must be a lowercase SQL identifier ([a-z_][a-z0-9_]*), not 'Not-A-Name'"


def test_a_postgres_address_without_psycopg_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the postgres extra were not installed: importing the PostgreSQL store fails.
    monkeypatch.setitem(sys.modules, "anagrapheus.timeline.stores.postgres", None)
    with pytest.raises(UsageError) as caught:
        open_store(NOWHERE)
    assert str(caught.value) == "a PostgreSQL store needs psycopg: pip install 'anagrapheus[postgres]'"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def settled_units(store: TimelineStore) -> None:
    """unit-1 committed with two pins, unit-2 committed with none (no event says so), unit-3 abandoned."""
    types = EventTypeRegistry()
    first = PinLedger(store, types, unit_id="unit-1")
    first.resolve("k1", kind="model_call", effect=lambda: "first answer", interpret=str)
    first.resolve("k2", kind="model_call", effect=lambda: "second answer", interpret=str)
    first.commit()
    PinLedger(store, types, unit_id="unit-2").commit()
    third = PinLedger(store, types, unit_id="unit-3")
    third.resolve("k3", kind="model_call", effect=lambda: "dropped", interpret=str)
    third.abandon(reason="the customer hung up")


EXPECTED = [ClosedUnit("unit-1", "committed"), ClosedUnit("unit-2", "committed"), ClosedUnit("unit-3", "abandoned")]


def assert_closed_in(store: TimelineStore) -> None:
    assert [store.unit_outcome(unit.unit_id) for unit in EXPECTED] == [unit.outcome for unit in EXPECTED]
    ran: list[str] = []
    for unit in EXPECTED:
        ledger = PinLedger(store, EventTypeRegistry(), unit_id=unit.unit_id)
        with pytest.raises(UnitClosed):
            ledger.resolve("k1", kind="model_call", effect=lambda: ran.append("drawn again") or "x", interpret=str)
    assert ran == []
    # The whole log still answers every key: no unit committed twice.
    replay = ReplayPins.from_store(store, EventTypeRegistry())
    assert replay.resolve("k1", kind="model_call", effect=lambda: "not pinned", interpret=str) == "first answer"


def test_a_sqlite_copy_refuses_the_units_closed_in_the_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with SQLiteEventStore(tmp_path / "a.db") as source:
        settled_units(source)
    code, out, err = cli(capsys, "copy", str(tmp_path / "a.db"), str(tmp_path / "b.db"))
    assert code == 0, out + err
    with SQLiteEventStore(tmp_path / "b.db") as copied:
        assert list(copied.closed_units()) == EXPECTED
        assert_closed_in(copied)
    # Copying again (a resume) adds nothing and keeps the record.
    code, out, err = cli(capsys, "copy", str(tmp_path / "a.db"), str(tmp_path / "b.db"))
    assert code == 0, out + err
    with SQLiteEventStore(tmp_path / "b.db") as copied:
        assert list(copied.closed_units()) == EXPECTED


@pytest.mark.postgres
def test_closed_units_survive_a_copy_to_postgres_and_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_dsn: str, pg_schema: str, open_pg: Callable[..., Any]
) -> None:
    with SQLiteEventStore(tmp_path / "a.db") as source:
        settled_units(source)
    code, out, err = cli(capsys, "copy", str(tmp_path / "a.db"), postgres_dsn, "--schema", pg_schema)
    assert code == 0, out + err
    pg = open_pg()
    assert list(pg.closed_units()) == EXPECTED
    assert_closed_in(pg)
    code, out, err = cli(capsys, "copy", postgres_dsn, str(tmp_path / "back.db"), "--schema", pg_schema)
    assert code == 0, out + err
    with SQLiteEventStore(tmp_path / "back.db") as back:
        assert list(back.closed_units()) == EXPECTED
        assert_closed_in(back)


def many_closed(store: Any, n: int) -> list[ClosedUnit]:
    units = [ClosedUnit(f"unit-{i:05d}", "committed" if i % 3 else "abandoned") for i in range(n)]
    assert store.import_closed_units(units) == n
    assert store.import_closed_units(units[:5]) == 0  # already closed: kept, not counted
    return units


def test_closed_units_are_listed_a_page_at_a_time_and_copied_in_batches(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "a.db") as source, SQLiteEventStore(tmp_path / "b.db") as destination:
        units = many_closed(source, 1001)
        assert list(source.closed_units()) == units
        copy_log(source, destination, batch=400)
        assert list(destination.closed_units()) == units
        with pytest.raises(UsageError, match="outcome must be"):
            destination.import_closed_units([ClosedUnit("x", "lost")])  # pyright: ignore[reportArgumentType]


@pytest.mark.postgres
def test_postgres_lists_closed_units_a_page_at_a_time(open_pg: Callable[..., Any]) -> None:
    pg = open_pg()
    units = many_closed(pg, 1001)
    assert list(pg.closed_units()) == units
    assert pg.import_closed_units([]) == 0
    with pytest.raises(UsageError, match="outcome must be"):
        pg.import_closed_units([ClosedUnit("x", "lost")])  # pyright: ignore[reportArgumentType]


def foreign(path: Path) -> bytes:
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    connection.execute("INSERT INTO customers (name) VALUES ('Ada')")
    connection.commit()
    connection.close()
    return path.read_bytes()


def test_copy_into_a_foreign_sqlite_database_is_refused_and_leaves_it_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with SQLiteEventStore(tmp_path / "a.db") as source:
        settled_units(source)
    before = foreign(tmp_path / "app.db")
    code, out, err = cli(capsys, "copy", str(tmp_path / "a.db"), str(tmp_path / "app.db"))
    assert code == 2, out + err
    assert f"{tmp_path / 'app.db'}: a SQLite database of something else (tables customers)" in err
    assert "not used as the destination and is left untouched" in err
    assert (tmp_path / "app.db").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("app")) == ["app.db"]


def test_copy_from_a_foreign_sqlite_database_is_refused_and_leaves_it_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = foreign(tmp_path / "app.db")
    code, out, err = cli(capsys, "copy", str(tmp_path / "app.db"), str(tmp_path / "b.db"))
    assert code == 2, out + err
    assert "not used as the source" in err
    assert (tmp_path / "app.db").read_bytes() == before
    assert not (tmp_path / "b.db").exists()


def test_copy_into_an_empty_or_non_sqlite_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with SQLiteEventStore(tmp_path / "a.db") as source:
        settled_units(source)
    (tmp_path / "empty.db").touch()
    code, out, err = cli(capsys, "copy", str(tmp_path / "a.db"), str(tmp_path / "empty.db"))
    assert code == 0, out + err
    (tmp_path / "notes.txt").write_text("not a database\n" * 10, encoding="utf-8")
    code, out, err = cli(capsys, "copy", str(tmp_path / "a.db"), str(tmp_path / "notes.txt"))
    assert code == 2, out + err
    assert "cannot open the destination" in err


class ListLog:
    """A log kept in a list: a store of someone else's that takes copied events and keeps no closed units."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []

    def append(self, events: Sequence[PendingEvent], *, expected_last_seq: int | None = None) -> list[StoredEvent]:
        raise NotImplementedError

    def append_stored(self, events: Sequence[StoredEvent]) -> None:
        self.events.extend(events)

    def read(self, *, since: int = 0, limit: int | None = None, **_: object) -> Iterator[StoredEvent]:
        return iter([event for event in self.events if event.seq > since][:limit])

    def last_seq(self) -> int:
        return self.events[-1].seq if self.events else 0

    def close(self) -> None:
        pass


def test_a_destination_that_keeps_no_closed_units_takes_the_events_alone(tmp_path: Path) -> None:
    destination = ListLog()
    with SQLiteEventStore(tmp_path / "a.db") as source:
        settled_units(source)
        assert copy_log(source, destination) == len(list(source.read()))
        assert destination.events == list(source.read())
