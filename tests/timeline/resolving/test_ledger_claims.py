"""The claim of a fresh key in a minted unit (issue #43 item 2): fenced on the event loop's thread, with no hop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import UnitBusy
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, pin_key

KEYS = [pin_key("model_call", {"n": n}) for n in range(3)]


@contextmanager
def counting_hops() -> Iterator[list[str]]:
    """Count the hops to a worker thread (`asyncio.to_thread`) made inside the block, by the name of what hopped."""
    hopped: list[str] = []
    to_thread = asyncio.to_thread

    async def hop(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        hopped.append(getattr(func, "__name__", repr(func)))
        return await to_thread(func, *args, **kwargs)

    asyncio.to_thread = hop
    try:
        yield hopped
    finally:
        asyncio.to_thread = to_thread


async def answer() -> str:
    return "answer"


async def draw_all(ledger: PinLedger) -> list[str]:
    return [await ledger.aresolve(key, kind="model_call", effect=answer, interpret=str) for key in KEYS]


def test_only_the_units_first_claim_hops_to_a_worker(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    with counting_hops() as hopped:
        assert asyncio.run(draw_all(ledger)) == ["answer"] * 3
    # The first claim takes the unit's lease (a write, so in a worker); each draw's pin is written in one; the
    # later claims read the unit on the loop's thread.
    assert hopped == ["claim", "put", "put", "put"]
    ledger.commit()
    assert [pin.key for pin in PinLedger(store, types).pins()] == []
    assert len([e for e in store.read() if e.type == "pin_promoted"]) == 3


def test_a_claim_on_the_loops_thread_stops_a_holder_whose_lease_was_broken(tmp_path: Path) -> None:
    from anagrapheus.cli import main

    db = tmp_path / "leased.db"
    paid: list[str] = []

    async def effect() -> str:
        paid.append("drawn")
        return "drawn"

    with SQLiteEventStore(db) as old_store, SQLiteEventStore(db) as new_store:
        old = PinLedger(old_store, EventTypeRegistry())
        asyncio.run(old.aresolve(KEYS[0], kind="model_call", effect=effect, interpret=str))
        with sqlite3.connect(db) as connection:  # the lease as a worker in another container would have written it
            connection.execute("UPDATE unit_leases SET host = 'another-container'")
        assert main(["unlock", str(db), "--unit", old.unit_id]) == 0
        new = PinLedger(new_store, EventTypeRegistry(), unit_id=old.unit_id)
        assert new.resolve(KEYS[1], kind="model_call", effect=lambda: "by the new", interpret=str) == "by the new"

        with counting_hops() as hopped, pytest.raises(UnitBusy) as stopped:
            asyncio.run(old.aresolve(KEYS[2], kind="model_call", effect=effect, interpret=str))
        assert hopped == []  # refused on the loop's thread, before any effect
        assert any("its lease was broken" in note for note in stopped.value.__notes__)
        assert paid == ["drawn"]
        new.commit()


def test_a_lease_taken_inside_a_callers_transaction_is_not_read_from_outside_it(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # The lease's row is not committed until the caller's transaction is: another connection cannot see it yet, so
    # the claims read the unit through the store's own connection, in a worker, and are not refused as fenced.
    ledger = PinLedger(store, types)

    async def run() -> list[str]:
        with store.transaction():
            return await draw_all(ledger)

    with counting_hops() as hopped:
        assert asyncio.run(run()) == ["answer"] * 3
    assert hopped.count("claim") == 3
    ledger.commit()
    assert len([e for e in store.read() if e.type == "pin_promoted"]) == 3
