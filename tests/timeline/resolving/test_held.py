"""Held draws: run-level pins drawn with no store write, answered from memory, and written together."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from typing_extensions import override

from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, TimelineStore, pin_key
from anagrapheus.timeline.stores.ports import ScratchPin

K1 = pin_key("run_place", {"n": 1})
K2 = pin_key("run_place", {"n": 2})
K3 = pin_key("model_call", {"prompt": "three"})


class Drawn:
    """An effect that counts its draws and returns their number."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return self.calls


class CountingStore(SQLiteEventStore):
    """A real store that notes, for each scratch write, the outer write transaction it was asked inside (or None)."""

    def __init__(self, path: Path) -> None:
        self.opened = 0
        self.depth = 0
        self.puts: list[tuple[str, int | None]] = []
        super().__init__(path)

    @contextmanager
    def _counted(self, opened: AbstractContextManager[None]) -> Generator[None]:
        self.depth += 1
        self.opened += self.depth == 1
        try:
            with opened:
                yield
        finally:
            self.depth -= 1

    @override
    @contextmanager
    def transaction(self) -> Generator[None]:
        with self._counted(super().transaction()):
            yield

    @override
    @contextmanager
    def unsynced_transaction(self) -> Generator[None]:
        # Held draws are written unsynced before a claim: the claim's own synced write syncs them (#43).
        with self._counted(super().unsynced_transaction()):
            yield

    @override
    def scratch_put(self, unit_id: str, key: str, *, kind: str, raw: str, fingerprint: str | None) -> ScratchPin:
        self.puts.append((key, self.opened if self.depth else None))
        return super().scratch_put(unit_id, key, kind=kind, raw=raw, fingerprint=fingerprint)

    @override
    def scratch_put_many(self, unit_id: str, pins: Sequence[tuple[str, str, str, str | None, int]]) -> None:
        self.puts.extend((key, self.opened if self.depth else None) for key, *_ in pins)
        super().scratch_put_many(unit_id, pins)


def promoted(store: TimelineStore) -> list[tuple[object, object, object]]:
    pins = [json.loads(e.payload) for e in store.read() if e.type == "pin_promoted"]
    return [(p["key"], p["raw"], p["attempts"]) for p in pins]


def test_a_held_draw_is_kept_in_memory_until_flushed(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    drawn = Drawn()
    assert ledger.resolve_held(K1, kind="run_place", effect=drawn, interpret=int) == 1
    assert ledger.holding
    assert ledger.pins() == []
    ledger.flush_held()
    assert not ledger.holding
    assert [(p.key, p.raw_text, p.attempts) for p in ledger.pins()] == [(K1, "1", 1)]


def test_a_held_draw_asked_again_is_answered_from_memory_and_counted(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    drawn = Drawn()
    assert ledger.resolve_held(K1, kind="run_place", effect=drawn, interpret=int) == 1
    assert ledger.resolve_held(K1, kind="run_place", effect=drawn, interpret=int) == 1
    assert drawn.calls == 1
    ledger.commit()
    assert promoted(store) == [(K1, 1, 2)]


def test_held_draws_are_written_together_before_the_next_draw(db_path: Path, types: EventTypeRegistry) -> None:
    store = CountingStore(db_path)
    ledger = PinLedger(store, types)
    drawn = Drawn()
    ledger.resolve_held(K1, kind="run_place", effect=drawn, interpret=int)
    ledger.resolve_held(K2, kind="run_place", effect=drawn, interpret=int)
    assert store.puts == []
    # The next draw's claim writes both in one transaction, before its own effect runs.
    seen: list[int] = []
    ledger.resolve(K3, kind="model_call", effect=lambda: seen.append(len(ledger.pins())) or "answer", interpret=str)
    assert seen == [2]
    (_, together), (_, again), (_, alone) = store.puts
    assert [key for key, _ in store.puts] == [K1, K2, K3]
    assert together is not None and together == again and alone is None
    assert not ledger.holding
    ledger.commit()
    assert promoted(store) == [(K1, 1, 1), (K2, 2, 1), (K3, "answer", 1)]
    store.close()


def test_a_resumed_unit_answers_a_held_key_from_scratch_without_drawing(
    db_path: Path, types: EventTypeRegistry
) -> None:
    with SQLiteEventStore(db_path) as store:
        first = PinLedger(store, types)
        first.resolve_held(K1, kind="run_place", effect=Drawn(), interpret=int)
        first.flush_held()
    # Another process resumes the unit: scratch did not begin empty, so the key is read from there, not drawn.
    with SQLiteEventStore(db_path) as store:
        resumed = PinLedger(store, types, unit_id=first.unit_id)
        again = Drawn()
        assert resumed.resolve_held(K1, kind="run_place", effect=again, interpret=int) == 1
        assert again.calls == 0
        assert not resumed.holding
        # A key never drawn is still drawn, and held.
        assert resumed.resolve_held(K2, kind="run_place", effect=again, interpret=int) == 1
        assert again.calls == 1 and resumed.holding
        resumed.commit()
        assert promoted(store) == [(K1, 1, 2), (K2, 1, 1)]


def begins(store: SQLiteEventStore) -> list[str]:
    """The transactions begun on the store's connection from now on (one entry each)."""
    begun: list[str] = []
    connection = store._conn  # pyright: ignore[reportPrivateUsage]  # the store's one connection
    connection.set_trace_callback(lambda sql: begun.append(sql) if sql.startswith("BEGIN") else None)
    return begun


def test_held_draws_are_written_in_the_next_async_draws_own_transaction(
    db_path: Path, types: EventTypeRegistry
) -> None:
    # Issue #43 item 2: the claim of a key a minted unit never asked for writes nothing (the unit's lease aside), and
    # the held pins ride in the draw's synced transaction, before its pin: one transaction a draw, not two.
    store = CountingStore(db_path)
    ledger = PinLedger(store, types)
    drawn = Drawn()
    ledger.resolve_held(K1, kind="run_place", effect=drawn, interpret=int)
    ledger.resolve_held(K2, kind="run_place", effect=drawn, interpret=int)
    seen: list[int] = []

    async def effect() -> str:
        seen.append(len(ledger.pins()))
        return "answer"

    begun = begins(store)
    assert asyncio.run(ledger.aresolve(K3, kind="model_call", effect=effect, interpret=str)) == "answer"
    assert seen == [0]
    assert len(begun) == 2  # the unit's lease, then the draw with what was held
    (_, together), (_, again), (_, alone) = store.puts
    assert [key for key, _ in store.puts] == [K1, K2, K3]
    assert together is not None and together == again == alone
    assert not ledger.holding
    ledger.commit()
    assert promoted(store) == [(K1, 1, 1), (K2, 2, 1), (K3, "answer", 1)]
    store.close()


def test_a_draw_with_nothing_held_is_one_transaction_after_the_units_lease(
    db_path: Path, types: EventTypeRegistry
) -> None:
    store = SQLiteEventStore(db_path)
    ledger = PinLedger(store, types)

    async def effect() -> str:
        return "answer"

    async def draws() -> None:
        for n in range(3):
            await ledger.aresolve(pin_key("model_call", {"n": n}), kind="model_call", effect=effect, interpret=str)

    begun = begins(store)
    asyncio.run(draws())
    assert len(begun) == 4  # the lease, then one a draw: a fresh key's claim reads, and writes nothing
    ledger.commit()
    assert [attempts for _, _, attempts in promoted(store)] == [1, 1, 1]
    store.close()
