"""The ledger under races and misuse: no draw erased, no transaction shared between tasks, no hang."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import UnitBusy, UsageError
from anagrapheus.timeline import EventTypeRegistry, PendingEvent, PinLedger, SQLiteEventStore, pin_key


def identity(raw: Any) -> Any:
    return raw


K1 = pin_key("model_call", {"prompt": "one"})


def promoted_raws(store: SQLiteEventStore, unit_id: str) -> list[Any]:
    payloads = [json.loads(e.payload) for e in store.read(type="pin_promoted")]
    return [p["raw"] for p in payloads if p["unit_id"] == unit_id]


class Drawer(threading.Thread):
    """Draws fresh keys through `ledger` until the unit refuses, noting each effect run and each value returned."""

    def __init__(self, ledger: PinLedger, tag: str) -> None:
        super().__init__()
        self.ledger = ledger
        self.tag = tag
        self.effects: list[str] = []
        self.returned: list[str] = []
        self.refused: list[UsageError] = []
        self.started = threading.Event()

    def effect_for(self, value: str) -> Any:
        def effect() -> str:
            self.effects.append(value)
            return value

        return effect

    def run(self) -> None:
        for i in range(10_000):
            key = pin_key("model_call", {"i": i})
            try:
                value = self.ledger.resolve(
                    key, kind="model_call", effect=self.effect_for(f"{self.tag}-{i}"), interpret=identity
                )
            except UsageError as e:
                self.refused.append(e)
                return
            self.returned.append(value)
            self.started.set()


def close_while_drawing(ledger: PinLedger, drawer: Drawer, close: str) -> None:
    drawer.start()
    drawer.started.wait()
    while True:
        try:
            if close == "commit":
                ledger.commit()
            else:
                ledger.abandon(reason="race")
            break
        except UsageError as e:
            assert "in flight" in str(e)
            time.sleep(0)
    drawer.join()


@pytest.mark.parametrize("close", ["commit", "abandon"])
def test_a_draw_racing_a_close_is_part_of_it_or_refused_before_its_effect(
    store: SQLiteEventStore, types: EventTypeRegistry, close: str
) -> None:
    for trial in range(12):
        ledger = PinLedger(store, types)
        drawer = Drawer(ledger, f"{trial}")
        close_while_drawing(ledger, drawer, close)
        # Every effect that ran was handed back, and is promoted (or listed as abandoned) with the unit.
        assert drawer.effects == drawer.returned
        if close == "commit":
            assert sorted(promoted_raws(store, ledger.unit_id)) == sorted(drawer.returned)
        else:
            (summary,) = [
                json.loads(e.payload) for e in store.read(type="pins_abandoned") if ledger.unit_id in e.payload
            ]
            assert len(summary["pins"]) == len(drawer.returned)
        assert store.scratch_list(ledger.unit_id) == []


def test_a_second_ledger_on_the_unit_never_leaves_scratch_behind_a_close(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    for trial in range(12):
        first = PinLedger(store, types)
        drawer = Drawer(PinLedger(store, types, unit_id=first.unit_id), f"{trial}")
        close_while_drawing(first, drawer, "commit")
        assert sorted(promoted_raws(store, first.unit_id)) == sorted(drawer.returned)
        assert store.scratch_list(first.unit_id) == []
        # A draw whose effect ran before the unit closed under it is handed back on the error, not dropped.
        (error,) = drawer.refused
        unpinned = getattr(error, "raw_text", None)
        assert unpinned is None or json.loads(unpinned) == drawer.effects[-1]
        assert drawer.effects == drawer.returned + ([] if unpinned is None else [json.loads(unpinned)])


@pytest.mark.anyio
async def test_one_tasks_failed_transaction_never_undoes_another_tasks_commit(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    a_inside = asyncio.Event()
    b_done = asyncio.Event()

    async def a() -> None:
        with pytest.raises(RuntimeError, match="A fails"), store.transaction():
            store.append([PendingEvent(namespace="app", type="note", schema_version=1, payload="{}")])
            a_inside.set()
            # B cannot finish inside A's transaction any more, so A does not wait for it forever.
            with suppress(TimeoutError):
                await asyncio.wait_for(b_done.wait(), 0.5)
            raise RuntimeError("A fails")

    async def b() -> list[str]:
        await a_inside.wait()
        ledger = PinLedger(store, types)

        async def draw() -> str:
            return "B's draw"

        await ledger.aresolve(K1, kind="model_call", effect=draw, interpret=identity)
        stored = ledger.commit()
        b_done.set()
        return [e.event_id for e in stored]

    _, committed = await asyncio.gather(a(), b())
    assert committed
    assert [e.event_id for e in store.read()] == committed


def test_a_commit_undone_by_an_outer_rollback_leaves_the_unit_open(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    ledger.resolve(K1, kind="model_call", effect=lambda: "kept", interpret=identity)
    with pytest.raises(RuntimeError, match="outer"), store.transaction():
        assert len(ledger.commit()) == 1
        assert ledger.state == "committed"
        raise RuntimeError("outer")
    assert store.last_seq() == 0
    assert ledger.state == "open"
    assert ledger.resolve(K1, kind="model_call", effect=lambda: "redrawn", interpret=identity) == "kept"
    (event,) = ledger.commit()
    assert json.loads(event.payload)["raw"] == "kept"
    assert ledger.state == "committed"


def test_a_ledger_on_a_closed_unit_id_refuses_before_any_effect(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    first = PinLedger(store, types, unit_id="round-1")
    first.resolve(K1, kind="model_call", effect=lambda: "first", interpret=identity)
    first.commit()
    abandoned = PinLedger(store, types, unit_id="round-2")
    abandoned.abandon(reason="vetoed")
    calls: list[int] = []
    for unit_id, state in (("round-1", "committed"), ("round-2", "abandoned")):
        again = PinLedger(store, types, unit_id=unit_id)
        assert again.state == state
        with pytest.raises(UsageError, match=f"{unit_id} is {state}"):
            again.resolve(K1, kind="model_call", effect=lambda: calls.append(1), interpret=identity)
        with pytest.raises(UsageError, match=f"{unit_id} is {state}"):
            again.commit()
        with pytest.raises(UsageError, match=f"{unit_id} is {state}"):
            again.abandon(reason="again")
    assert calls == []
    assert promoted_raws(store, "round-1") == ["first"]
    assert store.scratch_list("round-1") == []


def test_a_ledger_open_while_another_closes_the_unit_refuses_before_the_effect(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    first = PinLedger(store, types, unit_id="round-1")
    late = PinLedger(store, types, unit_id="round-1")
    first.commit()
    calls: list[int] = []
    with pytest.raises(UsageError, match="round-1 is committed; nothing was drawn"):
        late.resolve(K1, kind="model_call", effect=lambda: calls.append(1), interpret=identity)
    assert calls == []


def run_with_deadline(target: Any, seconds: float = 5.0) -> Any:
    """Run `target` in a daemon thread; fail (instead of hanging the suite) if it does not return in time."""
    outcome: list[Any] = []

    def runner() -> None:
        try:
            outcome.append(("ok", target()))
        except BaseException as e:
            outcome.append(("raised", e))

    thread = threading.Thread(target=runner, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still blocked after {seconds} s"
    return outcome[0]


def test_resolving_a_key_inside_its_own_effect_is_refused_at_once(ledger: PinLedger) -> None:
    def effect() -> Any:
        return ledger.resolve(K1, kind="model_call", effect=lambda: "inner", interpret=identity)

    status, error = run_with_deadline(lambda: ledger.resolve(K1, kind="model_call", effect=effect, interpret=identity))
    assert status == "raised" and isinstance(error, UsageError)
    assert "inside its own effect" in str(error)
    # The refused draw pinned nothing, and the key can be drawn afterwards.
    assert ledger.resolve(K1, kind="model_call", effect=lambda: "later", interpret=identity) == "later"


def test_awaiting_a_key_inside_its_own_async_effect_is_refused_at_once(ledger: PinLedger) -> None:
    async def effect() -> Any:
        return await ledger.aresolve(K1, kind="model_call", effect=effect, interpret=identity)

    async def main() -> Any:
        return await ledger.aresolve(K1, kind="model_call", effect=effect, interpret=identity)

    status, error = run_with_deadline(lambda: asyncio.run(main()))
    assert status == "raised" and isinstance(error, UsageError), error


def test_a_waiter_whose_loop_closed_does_not_break_the_release(ledger: PinLedger) -> None:
    started = threading.Event()
    release = threading.Event()

    def slow() -> str:
        started.set()
        release.wait()
        return "drawn"

    owner: list[Any] = []
    owner_thread = threading.Thread(
        target=lambda: owner.append(
            run_with_deadline(lambda: ledger.resolve(K1, kind="model_call", effect=slow, interpret=identity), 10)
        )
    )
    owner_thread.start()
    started.wait()

    async def impatient() -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(ledger.aresolve(K1, kind="model_call", effect=slow, interpret=identity), 0.2)

    asyncio.run(impatient())  # its loop is closed now

    queued: list[Any] = []

    async def patient() -> Any:
        return await ledger.aresolve(K1, kind="model_call", effect=slow, interpret=identity)

    patient_thread = threading.Thread(target=lambda: queued.append(run_with_deadline(lambda: asyncio.run(patient()))))
    patient_thread.start()
    time.sleep(0.3)  # the patient waiter queues behind the impatient one
    release.set()
    owner_thread.join()
    patient_thread.join()
    assert owner == [("ok", "drawn")]
    assert queued == [("ok", "drawn")]


def test_two_ledgers_on_one_unit_draw_a_key_once(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    first = PinLedger(store, types, unit_id="shared")
    second = PinLedger(store, types, unit_id="shared")
    started = threading.Event()
    release = threading.Event()
    effects: list[str] = []

    def slow() -> str:
        effects.append("first")
        started.set()
        release.wait(10)
        return "drawn once"

    def other() -> str:
        effects.append("second")
        return "drawn twice"

    owner: list[Any] = []
    thread = threading.Thread(
        target=lambda: owner.append(first.resolve(K1, kind="model_call", effect=slow, interpret=identity))
    )
    thread.start()
    assert started.wait(10)
    waiter: list[Any] = []
    waiting = threading.Thread(
        target=lambda: waiter.append(second.resolve(K1, kind="model_call", effect=other, interpret=identity))
    )
    waiting.start()
    time.sleep(0.05)
    # While the first draw is in flight, closing the unit through either ledger is refused.
    with pytest.raises(UsageError, match="in flight"):
        second.commit()
    release.set()
    thread.join(10)
    waiting.join(10)
    assert owner == waiter == ["drawn once"]
    assert effects == ["first"]
    second.commit()
    assert promoted_raws(store, "shared") == ["drawn once"]
    # The unit is closed for both ledgers, before any effect runs.
    with pytest.raises(UsageError, match="committed"):
        first.resolve(pin_key("model_call", {"prompt": "two"}), kind="model_call", effect=other, interpret=identity)
    assert effects == ["first"]


def test_a_second_store_on_an_open_unit_is_refused_before_its_effect_until_the_first_lets_go(
    store: SQLiteEventStore, types: EventTypeRegistry, db_path: Any
) -> None:
    # Another store object on the same file stands for another process: it cannot see this one's draws in
    # flight, so it may not draw in the unit at all while this store holds it.
    mine = PinLedger(store, types, unit_id="shared")
    effects: list[str] = []
    with SQLiteEventStore(db_path, unit_wait=0.2) as other_store:
        theirs = PinLedger(other_store, types, unit_id="shared")

        def racing() -> str:
            with pytest.raises(UnitBusy, match="shared is held by another worker"):
                theirs.resolve(K1, kind="model_call", effect=lambda: effects.append("theirs"), interpret=identity)
            with pytest.raises(UnitBusy):
                theirs.commit()
            return "mine"

        assert mine.resolve(K1, kind="model_call", effect=racing, interpret=identity) == "mine"
        assert effects == []
    # Once this store closes, its lease goes: a new store (a resumed worker) takes the unit over.
    store.close()
    with SQLiteEventStore(db_path, unit_wait=0.2) as resumed:
        ledger = PinLedger(resumed, types, unit_id="shared")
        assert ledger.resolve(K1, kind="model_call", effect=lambda: "again", interpret=identity) == "mine"
        ledger.commit()
        assert promoted_raws(resumed, "shared") == ["mine"]


def test_a_task_cancelled_while_claiming_a_draw_leaves_nothing_in_flight(
    store: SQLiteEventStore, types: EventTypeRegistry, db_path: Any
) -> None:
    import sqlite3

    ledger = PinLedger(store, types)
    # Another connection holds the write lock, so the claim's store step waits in its worker thread.
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    effects: list[str] = []

    async def draw() -> str:
        async def effect() -> str:
            effects.append("ran")
            return "value"

        return await ledger.aresolve(K1, kind="model_call", effect=effect, interpret=identity)

    async def main() -> None:
        task = asyncio.create_task(draw())
        await asyncio.sleep(0.2)
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        # The claim finishes after the caller has gone, taking the draw; it must be handed back.
        blocker.execute("ROLLBACK")
        await asyncio.sleep(0.5)

    asyncio.run(main())
    blocker.close()
    assert effects == []
    status, outcome = run_with_deadline(ledger.commit)
    assert status == "ok", outcome
    assert ledger.state == "committed"


def test_a_stream_cancelled_while_its_pin_waits_to_be_written_keeps_the_pin(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import asynccontextmanager

    ledger = PinLedger(store, types)
    worker_free = threading.Event()

    @asynccontextmanager
    async def effect() -> Any:
        yield ["the", "streamed", "answer"]

    async def consume(loop: asyncio.AbstractEventLoop) -> None:
        async with ledger.resolve_stream(
            K1, kind="model_call", effect=effect, capture=lambda live: live, interpret=identity
        ) as draw:
            assert draw.live is not None
            # The only worker is kept busy, so the pin's write waits in the queue when the task is cancelled.
            loop.run_in_executor(None, worker_free.wait, 10)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        task = asyncio.create_task(consume(loop))
        await asyncio.sleep(0.2)
        task.cancel()
        await asyncio.sleep(0.05)
        worker_free.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [json.loads(pin.raw_text) for pin in ledger.pins()] == [["the", "streamed", "answer"]]
    ledger.commit()


def test_a_holder_whose_lease_was_broken_stops_before_its_next_effect(tmp_path: Path) -> None:
    # Issue #35: `anagrapheus unlock` freed a live holder's lease that named another host; both then drew.
    import sqlite3

    from anagrapheus.cli import main

    db = tmp_path / "leased.db"
    paid: list[str] = []

    def effect(name: str) -> Callable[[], str]:
        return lambda: paid.append(name) or name

    with SQLiteEventStore(db) as old_store, SQLiteEventStore(db) as new_store:
        old = PinLedger(old_store, EventTypeRegistry(), unit_id="turn-7")
        assert old.resolve("p1:tool_call:a", kind="tool_call", effect=effect("a by the old"), interpret=str)
        with sqlite3.connect(db) as connection:  # the lease as a worker in another container would have written it
            connection.execute("UPDATE unit_leases SET host = 'another-container'")
        assert main(["unlock", str(db), "--unit", "turn-7"]) == 0
        new = PinLedger(new_store, EventTypeRegistry(), unit_id="turn-7")
        assert new.resolve("p1:tool_call:b", kind="tool_call", effect=effect("b by the new"), interpret=str)

        with pytest.raises(UnitBusy) as stopped:
            old.resolve("p1:tool_call:c", kind="tool_call", effect=effect("c by the old"), interpret=str)
        assert any("its lease was broken" in note for note in stopped.value.__notes__)
        with pytest.raises(UnitBusy):
            old.commit()
        assert paid == ["a by the old", "b by the new"]
        new.commit()


def test_a_first_claim_with_no_transaction_still_stops_a_holder_whose_lease_was_broken(
    tmp_path: Path,
) -> None:
    # A minted unit's claim of a key it never asked for reads the unit with no transaction, leaving the held pins
    # to the draw's own write (issue #43 item 2): it still fences the unit, before the effect, and the held pin is
    # not written by the fenced holder.
    import sqlite3

    from anagrapheus.cli import main

    db = tmp_path / "leased.db"
    paid: list[str] = []

    async def effect(name: str) -> str:
        paid.append(name)
        return name

    with SQLiteEventStore(db) as old_store, SQLiteEventStore(db) as new_store:
        old = PinLedger(old_store, EventTypeRegistry())
        assert asyncio.run(old.aresolve("p1:tool_call:a", kind="tool_call", effect=lambda: effect("a"), interpret=str))
        with sqlite3.connect(db) as connection:  # the lease as a worker in another container would have written it
            connection.execute("UPDATE unit_leases SET host = 'another-container'")
        assert main(["unlock", str(db), "--unit", old.unit_id]) == 0
        new = PinLedger(new_store, EventTypeRegistry(), unit_id=old.unit_id)
        assert new.resolve("p1:tool_call:b", kind="tool_call", effect=lambda: "b", interpret=str) == "b"

        old.resolve_held("p1:run_clock:held", kind="run_clock", effect=lambda: "a clock", interpret=str)
        with pytest.raises(UnitBusy) as stopped:
            asyncio.run(old.aresolve("p1:tool_call:c", kind="tool_call", effect=lambda: effect("c"), interpret=str))
        assert any("its lease was broken" in note for note in stopped.value.__notes__)
        assert paid == ["a"]
        assert old.holding  # kept in memory, written by nobody
        assert [pin.key for pin in new.pins()] == ["p1:tool_call:a", "p1:tool_call:b"]
        new.commit()


@pytest.mark.parametrize("held", [1, 2], ids=["a lone held pin", "two held pins"])
@pytest.mark.parametrize("flush", ["flush_held", "commit"])
def test_a_flush_of_held_pins_stops_at_once_a_holder_whose_lease_was_broken(
    tmp_path: Path, flush: str, held: int
) -> None:
    # Run-level pins flushed on their own (a worker's flush, or the run's commit), not folded with a claim: the
    # fenced holder is told its lease was broken at once, as a claim is, not after waiting for the lease again.
    import sqlite3

    from anagrapheus.cli import main

    db = tmp_path / "leased.db"
    wait = 10.0
    with (
        SQLiteEventStore(db, unit_wait=wait, busy_timeout=wait) as old_store,
        SQLiteEventStore(db) as new_store,
    ):
        old = PinLedger(old_store, EventTypeRegistry())
        assert old.resolve("p1:tool_call:a", kind="tool_call", effect=lambda: "a", interpret=str) == "a"
        with sqlite3.connect(db) as connection:  # the lease as a worker in another container would have written it
            connection.execute("UPDATE unit_leases SET host = 'another-container'")
        assert main(["unlock", str(db), "--unit", old.unit_id]) == 0
        new = PinLedger(new_store, EventTypeRegistry(), unit_id=old.unit_id)
        assert new.resolve("p1:tool_call:b", kind="tool_call", effect=lambda: "b", interpret=str) == "b"

        for n in range(held):
            old.resolve_held(f"p1:run_clock:{n}", kind="run_clock", effect=lambda: "a clock", interpret=str)
        started = time.monotonic()
        with pytest.raises(UnitBusy) as stopped:
            getattr(old, flush)()
        assert time.monotonic() - started < wait / 2
        assert any("its lease was broken" in note for note in stopped.value.__notes__)
        assert old.holding  # kept in memory, written by nobody
        assert [pin.key for pin in new.pins()] == ["p1:tool_call:a", "p1:tool_call:b"]
        new.commit()


def test_a_held_pin_asked_again_by_a_holder_whose_lease_was_broken_is_not_answered_from_memory(
    tmp_path: Path,
) -> None:
    # The fenced holder's held draw is not the unit's any more (the new holder drew the key itself): answering it
    # from memory would carry the run on with a value the log never takes. It is stopped, as its flush is.
    import sqlite3

    from anagrapheus.cli import main

    db = tmp_path / "leased.db"
    with SQLiteEventStore(db) as old_store, SQLiteEventStore(db) as new_store:
        old = PinLedger(old_store, EventTypeRegistry())
        assert old.resolve("p1:tool_call:a", kind="tool_call", effect=lambda: "a", interpret=str) == "a"
        assert old.resolve_held("p1:run_clock:0", kind="run_clock", effect=lambda: "old clock", interpret=str)
        with sqlite3.connect(db) as connection:  # the lease as a worker in another container would have written it
            connection.execute("UPDATE unit_leases SET host = 'another-container'")
        assert main(["unlock", str(db), "--unit", old.unit_id]) == 0
        new = PinLedger(new_store, EventTypeRegistry(), unit_id=old.unit_id)
        assert new.resolve("p1:run_clock:0", kind="run_clock", effect=lambda: "new clock", interpret=str) == "new clock"

        with pytest.raises(UnitBusy) as stopped:
            old.resolve("p1:run_clock:0", kind="run_clock", effect=lambda: "never drawn", interpret=str)
        assert any("its lease was broken" in note for note in stopped.value.__notes__)
        assert [(pin.key, json.loads(pin.raw_text)) for pin in new.pins()] == [
            ("p1:tool_call:a", "a"),
            ("p1:run_clock:0", "new clock"),
        ]
        assert old.holding  # kept in memory, written by nobody
        new.commit()
