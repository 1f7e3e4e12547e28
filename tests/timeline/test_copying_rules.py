"""copy_log's rules: batches of the size asked, one transaction each, and refusals that name what is wrong."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from anagrapheus.errors import StoreError, UsageError
from anagrapheus.timeline import SQLiteEventStore, StoredEvent
from anagrapheus.timeline.copying import copy_log, open_store

from ..store_conformance import pending


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
    monkeypatch.setitem(sys.modules, "anagrapheus.timeline.postgres", None)
    with pytest.raises(UsageError) as caught:
        open_store(NOWHERE)
    assert str(caught.value) == "a PostgreSQL store needs psycopg: pip install 'anagrapheus[postgres]'"
