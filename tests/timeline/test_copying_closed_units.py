"""A copied log carries which units are closed, so the copy refuses them; a foreign SQLite file is never used."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.cli import main
from anagrapheus.errors import UnitClosed, UsageError
from anagrapheus.timeline import (
    EventTypeRegistry,
    PendingEvent,
    PinLedger,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
    TimelineStore,
    copy_log,
)
from anagrapheus.timeline.store import ClosedUnit


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
