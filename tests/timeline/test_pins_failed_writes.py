"""A draw whose write fails after its effect ran is never lost, and never paid for twice.

The store fails as it does in production: a SQLite write lock held by another writer past the busy
timeout, a pooled PostgreSQL connection whose backend was killed, a store closed while a draw is in
flight. The result is tried once more, then held by the ledger (its key answered from memory,
written on the next resolve or commit) and handed to the caller on the error as `.drawn`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from anagrapheus.errors import StoreError
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, TimelineStore
from anagrapheus.timeline.canonical import JSONValue

K1, K2 = "p1:model_call:k1", "p1:model_call:k2"


def promoted(store: TimelineStore) -> list[dict[str, object]]:
    return [json.loads(e.payload) for e in store.read() if e.type == "pin_promoted"]


class Writer:
    """Another process's writer on the file: holds its write lock from `take()` until `let_go()`."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)

    def take(self) -> None:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")

    def let_go(self) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


class Paid:
    """The effect's own count of what it was paid for, kept outside the store."""

    def __init__(self, then: Callable[[], object] = lambda: None) -> None:
        self.calls: list[str] = []
        self.then = then

    def __call__(self) -> str:
        self.then()
        self.calls.append("drawn")
        return f"drawn #{len(self.calls)}"


class Codec:
    """Pins a ValueError as its message, and rebuilds it."""

    def describe(self, error: BaseException) -> JSONValue | None:
        return {"message": str(error)} if isinstance(error, ValueError) else None

    def rebuild(self, record: JSONValue) -> BaseException:
        assert isinstance(record, dict)
        return ValueError(f"again: {record['message']}")


@pytest.fixture
def locked_store(db_path: Path) -> Iterator[SQLiteEventStore]:
    with SQLiteEventStore(db_path, busy_timeout=0.1) as store:
        yield store


def test_a_write_timing_out_on_the_lock_keeps_the_draw_held_answers_it_and_commits_it(
    locked_store: SQLiteEventStore, db_path: Path, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(locked_store, types)
    writer = Writer(db_path)
    paid = Paid(then=writer.take)
    with pytest.raises(StoreError, match="database is locked") as caught:
        ledger.resolve(K1, kind="model_call", effect=paid, interpret=str)
    # The caller has the result, and so does the ledger: asking again answers from memory, not the world.
    assert caught.value.drawn == '"drawn #1"'
    assert any(".drawn" in note for note in caught.value.__notes__)
    assert ledger.resolve(K1, kind="model_call", effect=paid, interpret=str) == "drawn #1"
    assert paid.calls == ["drawn"]
    # Another key cannot be drawn while the store fails, and nothing is paid for it.
    with pytest.raises(StoreError):
        ledger.resolve(K2, kind="model_call", effect=paid, interpret=str)
    # A commit cannot drop what it has not written: it fails, loudly, and the unit stays open.
    with pytest.raises(StoreError) as refused:
        ledger.commit()
    assert any(f"held in memory ({K1})" in note for note in refused.value.__notes__)
    assert ledger.state == "open"
    assert paid.calls == ["drawn"]

    writer.let_go()
    paid.then = lambda: None
    assert ledger.resolve(K2, kind="model_call", effect=paid, interpret=str) == "drawn #2"
    ledger.commit()
    pins = promoted(locked_store)
    assert [(p["key"], p["raw"], p["attempts"]) for p in pins] == [(K1, "drawn #1", 2), (K2, "drawn #2", 1)]
    assert paid.calls == ["drawn", "drawn"]


def test_a_commit_writes_the_held_draws_first(
    locked_store: SQLiteEventStore, db_path: Path, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(locked_store, types)
    writer = Writer(db_path)
    with pytest.raises(StoreError) as caught:
        ledger.resolve(K1, kind="model_call", effect=Paid(then=writer.take), interpret=str)
    writer.let_go()
    assert ledger.pins() == []  # held in memory, not yet in scratch
    ledger.commit()
    assert [(p["key"], p["raw"]) for p in promoted(locked_store)] == [(K1, json.loads(caught.value.drawn or ""))]


def test_a_second_ledger_on_the_unit_answers_a_held_draw(
    locked_store: SQLiteEventStore, db_path: Path, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(locked_store, types)
    writer = Writer(db_path)
    with pytest.raises(StoreError):
        ledger.resolve(K1, kind="model_call", effect=Paid(then=writer.take), interpret=str)
    writer.let_go()
    again = PinLedger(locked_store, types, unit_id=ledger.unit_id)
    assert again.resolve(K1, kind="model_call", effect=Paid(), interpret=str) == "drawn #1"
    (pin,) = again.pins()
    assert (pin.raw_text, pin.attempts) == ('"drawn #1"', 2)


def test_a_failed_draw_whose_write_fails_is_held_as_the_failure(
    locked_store: SQLiteEventStore, db_path: Path, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(locked_store, types)
    writer = Writer(db_path)

    def fails() -> object:
        writer.take()
        raise ValueError("the model refused")

    with pytest.raises(ValueError, match="refused"):
        ledger.resolve(K1, kind="model_call", effect=fails, interpret=str, failure=Codec())
    # The failure is the draw's outcome: asked again, it is raised again, from memory.
    with pytest.raises(ValueError, match="refused"):
        ledger.resolve(K1, kind="model_call", effect=Paid(), interpret=str, failure=Codec())
    writer.let_go()
    ledger.commit()
    (pin,) = promoted(locked_store)
    assert (pin["key"], pin["failed"], pin["attempts"]) == (K1, True, 2)


@pytest.mark.anyio
async def test_an_async_draw_whose_write_fails_is_held(
    locked_store: SQLiteEventStore, db_path: Path, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(locked_store, types)
    writer = Writer(db_path)
    paid = Paid(then=writer.take)

    async def effect() -> str:
        return paid()

    with pytest.raises(StoreError) as caught:
        await ledger.aresolve(K1, kind="model_call", effect=effect, interpret=str)
    assert caught.value.drawn == '"drawn #1"'
    assert await ledger.aresolve(K1, kind="model_call", effect=effect, interpret=str) == "drawn #1"
    writer.let_go()
    await ledger.acommit()
    assert [(p["key"], p["attempts"]) for p in promoted(locked_store)] == [(K1, 2)]
    assert paid.calls == ["drawn"]


class Stream:
    def __init__(self) -> None:
        self.text = ""


@pytest.mark.anyio
async def test_a_stream_whose_write_fails_is_held(
    locked_store: SQLiteEventStore, db_path: Path, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(locked_store, types)
    writer = Writer(db_path)
    opened: list[Stream] = []

    @asynccontextmanager
    async def effect() -> AsyncIterator[Stream]:
        opened.append(Stream())
        yield opened[-1]

    with pytest.raises(StoreError) as caught:
        async with ledger.resolve_stream(
            K1, kind="model_call", effect=effect, capture=lambda s: s.text, interpret=str
        ) as draw:
            assert draw.live is not None
            draw.live.text = "streamed"
            writer.take()
    assert caught.value.drawn == '"streamed"'
    async with ledger.resolve_stream(
        K1, kind="model_call", effect=effect, capture=lambda s: s.text, interpret=str
    ) as again:
        assert (again.live, again.pinned) == (None, "streamed")
    assert len(opened) == 1
    writer.let_go()
    await ledger.acommit()
    assert [(p["raw"], p["attempts"]) for p in promoted(locked_store)] == [("streamed", 2)]


@contextmanager
def closing_mid_draw(store: TimelineStore) -> Iterator[Callable[[], str]]:
    """An effect during which another thread closes the store, as a shutdown would."""

    def effect() -> str:
        closer = threading.Thread(target=store.close)
        closer.start()
        closer.join(30)
        return "paid for"

    yield effect


def test_a_sqlite_store_closed_during_a_draw_hands_the_result_back(db_path: Path, types: EventTypeRegistry) -> None:
    store = SQLiteEventStore(db_path)
    ledger = PinLedger(store, types)
    with closing_mid_draw(store) as effect, pytest.raises(StoreError, match="closed database") as caught:
        ledger.resolve(K1, kind="model_call", effect=effect, interpret=str)
    assert caught.value.drawn == '"paid for"'


@pytest.mark.postgres
def test_a_postgres_store_closed_during_a_draw_hands_the_result_back(
    open_pg: Callable[..., TimelineStore], types: EventTypeRegistry
) -> None:
    store = open_pg(connect_timeout=1.0)
    ledger = PinLedger(store, types)
    with closing_mid_draw(store) as effect, pytest.raises(StoreError) as caught:
        ledger.resolve(K1, kind="model_call", effect=effect, interpret=str)
    assert caught.value.drawn == '"paid for"'


@pytest.mark.postgres
def test_a_pooled_connection_killed_during_a_draw_is_replaced_and_the_draw_written(
    open_pg: Callable[..., TimelineStore], pg_schema: str, postgres_dsn: str, types: EventTypeRegistry
) -> None:
    import psycopg

    store = open_pg(pool_size=1)
    ledger = PinLedger(store, types)
    ledger.resolve("p1:model_call:k0", kind="model_call", effect=lambda: "before", interpret=str)

    def kill_pooled_backends() -> str:
        # The pooled connection last ran a statement naming this test's schema; the lease connection did not.
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND position(%s in query) > 0",
                (pg_schema,),
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        return "paid for"

    assert ledger.resolve(K1, kind="model_call", effect=kill_pooled_backends, interpret=str) == "paid for"
    ledger.commit()
    assert [(p["key"], p["raw"]) for p in promoted(store)] == [("p1:model_call:k0", "before"), (K1, "paid for")]
