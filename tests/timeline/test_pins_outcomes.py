"""What a unit's close writes and refuses, and what a failed or fingerprinted draw leaves behind.

The ledger's details a caller sees: where a record-mode replay's `ReplayDiverged` marker lands in the commit, the
refusal of a close while draws are in flight (and of a draw while a close is at the store), which failures a codec
pins, and how a fingerprint is checked and kept.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from anagrapheus.errors import PinResultError, UnitClosed, UsageError
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinPromoted,
    PinsAbandoned,
    ReplayDiverged,
    SQLiteEventStore,
    StoredEvent,
    pin_key,
)
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.divergence import Divergence
from anagrapheus.timeline.store import ScratchPin
from tests.timeline.test_pins_failures import Stream, open_stream

K1 = pin_key("model_call", {"prompt": "one"})
K2 = pin_key("model_call", {"prompt": "two"})
K3 = pin_key("model_call", {"prompt": "three"})


def identity(raw: Any) -> Any:
    return raw


def drawn(ledger: PinLedger, *keys: str) -> None:
    for key in keys:
        ledger.resolve(key, kind="model_call", effect=lambda k=key: f"answer {k}", interpret=str)


class Codec:
    """Pins a ValueError as its message, and rebuilds it; any other error is not the draw's outcome."""

    def __init__(self) -> None:
        self.described: list[BaseException] = []

    def describe(self, error: BaseException) -> JSONValue | None:
        self.described.append(error)
        return {"message": str(error)} if isinstance(error, ValueError) else None

    def rebuild(self, record: JSONValue) -> BaseException:
        assert isinstance(record, dict)
        return ValueError(f"again: {record['message']}")


class BrokenCodec(Codec):
    def describe(self, error: BaseException) -> JSONValue | None:
        raise RuntimeError("the codec itself broke")


# The ReplayDiverged marker.


def test_a_noted_divergence_is_committed_right_before_the_pin_at_its_key(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    drawn(ledger, K1, K2, K3)
    first = Divergence(key=K2, kind="tool_call", after_hits=1, moved=("messages[0]",), nearest_key=K1)
    ledger.note_divergence(first)
    # Only the first divergence counts: the run left its recording there.
    ledger.note_divergence(Divergence(key=K3, kind="model_call", after_hits=2))
    assert ledger.divergence is first

    stored = ledger.commit()
    decoded = [types.decode(e) for e in stored]
    assert [type(e).__name__ for e in decoded] == ["PinPromoted", "ReplayDiverged", "PinPromoted", "PinPromoted"]
    assert [json.loads(e.payload)["key"] for e in stored] == [K1, K2, K2, K3]
    assert decoded[1] == ReplayDiverged(
        unit_id="rerun", key=K2, kind="tool_call", after_hits=1, moved=("messages[0]",), nearest_key=K1
    )
    assert [e.correlation_id for e in stored] == ["rerun"] * 4


def test_a_divergence_whose_key_was_never_pinned_is_committed_last(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    drawn(ledger, K1, K2)
    ledger.note_divergence(Divergence(key=K3, kind="model_call", after_hits=2))
    decoded = [types.decode(e) for e in ledger.commit()]
    assert [type(e).__name__ for e in decoded] == ["PinPromoted", "PinPromoted", "ReplayDiverged"]
    assert decoded[2] == ReplayDiverged(unit_id="rerun", key=K3, kind="model_call", after_hits=2)


def test_a_divergence_in_a_unit_without_pins_is_its_only_event(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    ledger.note_divergence(Divergence(key=K1, kind="model_call", after_hits=0))
    (marker,) = [types.decode(e) for e in ledger.commit()]
    assert marker == ReplayDiverged(unit_id="rerun", key=K1, kind="model_call", after_hits=0)


def test_a_divergence_noted_on_a_closed_unit_is_refused(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    drawn(ledger, K1)
    ledger.commit()
    with pytest.raises(UnitClosed, match="is committed"):
        ledger.note_divergence(Divergence(key=K2, kind="model_call", after_hits=1))
    assert ledger.divergence is None


# A close while draws are in flight, and a draw while a close is at the store.


def test_a_close_while_draws_are_in_flight_is_refused_saying_how_many(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="busy")
    refusals: list[BaseException] = []

    def inner() -> str:
        for close in (ledger.commit, lambda: ledger.abandon(reason="too soon")):
            with pytest.raises(UsageError) as refused:
                close()
            refusals.append(refused.value)
        return "inner"

    def outer() -> str:
        with pytest.raises(UsageError) as refused:
            ledger.commit()
        refusals.append(refused.value)
        return ledger.resolve(K2, kind="model_call", effect=inner, interpret=str) + " in outer"

    assert ledger.resolve(K1, kind="model_call", effect=outer, interpret=str) == "inner in outer"
    assert [(type(e), str(e)) for e in refusals] == [
        (UsageError, "cannot commit unit busy while 1 draw(s) are in flight"),
        (UsageError, "cannot commit unit busy while 2 draw(s) are in flight"),
        (UsageError, "cannot abandon unit busy while 2 draw(s) are in flight"),
    ]
    # A refused close leaves the unit open: more draws, then the close itself.
    drawn(ledger, K3)
    assert ledger.state == "open"
    # Promoted in the order asked for: K1 before the K2 its effect asked for, though K2 was drawn first.
    assert [json.loads(e.payload)["key"] for e in ledger.commit()] == [K1, K2, K3]


@pytest.mark.parametrize(
    ("close", "closing", "closed"), [("commit", "committing", "committed"), ("abandon", "abandoning", "abandoned")]
)
def test_a_draw_while_the_close_is_at_the_store_is_refused_before_its_effect(
    db_path: Path, types: EventTypeRegistry, close: str, closing: str, closed: str
) -> None:
    with SQLiteEventStore(db_path) as store:
        ledger = PinLedger(store, types, unit_id="closing")
        drawn(ledger, K1)
        # A second ledger on the unit id, through the same store, shares the unit's state in this process.
        other = PinLedger(store, types, unit_id="closing")
        # Another connection holds the write lock, so the close waits at the store.
        blocker = sqlite3.connect(db_path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        closer = threading.Thread(target=ledger.commit if close == "commit" else lambda: ledger.abandon(reason="x"))
        closer.start()
        effects: list[str] = []
        try:
            seen: UnitClosed | None = None
            for _ in range(3_000):
                try:
                    other.note_divergence(Divergence(key=K2, kind="model_call", after_hits=1))
                except UnitClosed as e:
                    seen = e
                    break
                threading.Event().wait(0.01)
            assert seen is not None and seen.state == closing
            with pytest.raises(UnitClosed) as refused:
                other.resolve(K2, kind="model_call", effect=lambda: effects.append("ran"), interpret=str)
            assert refused.value.state == closing and effects == []
            assert (
                str(refused.value)
                == f"unit closing is {closing}; nothing was drawn; start a new PinLedger for more work"
            )
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
            closer.join(30)
        assert not closer.is_alive()
        # Closed for good, as this process knows: refused before the effect, not by the store after it.
        with pytest.raises(UnitClosed) as refused:
            other.resolve(K2, kind="model_call", effect=lambda: effects.append("late"), interpret=str)
        assert refused.value.state == closed and refused.value.raw_text is None and effects == []
        assert str(refused.value) == f"unit closing is {closed}; nothing was drawn; start a new PinLedger for more work"
        assert ledger.state == closed


# Failed draws: what a codec pins, and what it leaves alone.


def test_a_failure_the_codec_describes_is_pinned_and_raised_again_on_reuse(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    codec = Codec()

    def refuse() -> str:
        raise ValueError("the provider refused")

    with pytest.raises(ValueError, match=r"^the provider refused$"):
        ledger.resolve(K1, kind="model_call", effect=refuse, interpret=str, failure=codec, fingerprint={"a": "1"})
    (pin,) = ledger.pins()
    assert pin.fingerprint == '{"a":"1"}'
    assert (pin.key, pin.kind, json.loads(pin.raw_text)) == (
        K1,
        "model_call!failed",
        {"error": {"message": "the provider refused"}},
    )
    with pytest.raises(ValueError, match=r"^again: the provider refused$"):
        ledger.resolve(K1, kind="model_call", effect=lambda: "never", interpret=str, failure=codec)
    (event,) = ledger.commit()
    promoted = types.decode(event)
    assert isinstance(promoted, PinPromoted)
    assert (promoted.kind, promoted.failed, promoted.attempts) == ("model_call", True, 2)


@pytest.mark.parametrize("codec", [None, Codec(), BrokenCodec()], ids=["no codec", "not described", "codec raises"])
def test_a_failure_no_codec_describes_pins_nothing_and_is_raised_as_it_was(
    store: SQLiteEventStore, types: EventTypeRegistry, codec: Codec | None
) -> None:
    ledger = PinLedger(store, types)

    def crash() -> str:
        raise KeyError("not the draw's outcome")

    with pytest.raises(KeyError, match="not the draw's outcome"):
        ledger.resolve(K1, kind="model_call", effect=crash, interpret=str, failure=codec)
    assert ledger.pins() == []
    # Nothing pinned, the key released: the next ask draws afresh.
    assert ledger.resolve(K1, kind="model_call", effect=lambda: "drawn", interpret=str, failure=codec) == "drawn"


def test_an_async_failure_the_codec_describes_is_pinned(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)

    async def refuse() -> str:
        raise ValueError("async refusal")

    async def crash() -> str:
        raise KeyError("not described")

    async def run() -> None:
        with pytest.raises(KeyError):
            await ledger.aresolve(K2, kind="tool_call", effect=crash, interpret=str, failure=Codec())
        with pytest.raises(ValueError, match=r"^async refusal$"):
            await ledger.aresolve(
                K1, kind="tool_call", effect=refuse, interpret=str, failure=Codec(), fingerprint={"z": "9"}
            )
        with pytest.raises(ValueError, match=r"^again: async refusal$"):
            await ledger.aresolve(K1, kind="tool_call", effect=refuse, interpret=str, failure=Codec())

    asyncio.run(run())
    assert [(p.key, p.kind, json.loads(p.raw_text), p.attempts, p.fingerprint) for p in ledger.pins()] == [
        (K1, "tool_call!failed", {"error": {"message": "async refusal"}}, 2, '{"z":"9"}')
    ]


# Fingerprints: checked before the effect, kept as canonical JSON.


def test_a_fingerprint_is_kept_with_the_pin_as_canonical_json(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    ledger.resolve(K1, kind="model_call", effect=lambda: "a", interpret=str, fingerprint={"b": "2", "a": "1"})

    async def draw() -> str:
        return "b"

    asyncio.run(ledger.aresolve(K2, kind="model_call", effect=draw, interpret=str, fingerprint={"z": "9"}))
    ledger.resolve(K3, kind="model_call", effect=lambda: "c", interpret=str)
    assert [p.fingerprint for p in ledger.pins()] == ['{"a":"1","b":"2"}', '{"z":"9"}', None]


@pytest.mark.parametrize(
    ("fingerprint", "named"), [({"a": "1", "b": 2}, "'b'"), ({"a": "1", 3: "x"}, "3")], ids=["digest", "name"]
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_fingerprint_that_is_not_names_to_digest_strings_is_refused_before_the_effect(
    store: SQLiteEventStore, types: EventTypeRegistry, fingerprint: dict[Any, Any], named: str, mode: str
) -> None:
    ledger = PinLedger(store, types)
    effects: list[str] = []

    def effect() -> str:
        effects.append("ran")
        return "drawn"

    async def aeffect() -> str:
        return effect()

    message = f"^a fingerprint maps field names to digest strings; {named} does not$"
    with pytest.raises(UsageError, match=message):
        if mode == "sync":
            ledger.resolve(K1, kind="model_call", effect=effect, interpret=str, fingerprint=fingerprint)
        else:
            asyncio.run(ledger.aresolve(K1, kind="model_call", effect=aeffect, interpret=str, fingerprint=fingerprint))
    assert effects == [] and ledger.pins() == []
    # The key was released: the unit still draws it, and closes.
    assert ledger.resolve(K1, kind="model_call", effect=effect, interpret=str) == "drawn"
    ledger.commit()


# A result that cannot be pinned.


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_result_that_is_not_json_is_refused_saying_what_to_do(
    store: SQLiteEventStore, types: EventTypeRegistry, mode: str
) -> None:
    ledger = PinLedger(store, types)

    async def aeffect() -> object:
        return {"when": {1, 2}}

    with pytest.raises(PinResultError) as refused:
        if mode == "sync":
            ledger.resolve(K1, kind="tool_call", effect=lambda: {"when": {1, 2}}, interpret=str)
        else:
            asyncio.run(ledger.aresolve(K1, kind="tool_call", effect=aeffect, interpret=str))
    assert str(refused.value) == (
        f"the tool_call effect for {K1} returned a result that is not JSON-shaped (set is not a JSON type (convert"
        " it deliberately before pinning) at $.when); return JSON types, or convert the value deliberately before"
        " pinning"
    )
    assert ledger.pins() == []
    assert ledger.resolve(K1, kind="tool_call", effect=lambda: ["a", "b"], interpret=identity) == ["a", "b"]


# Refusals a caller reads: the whole message.


def test_a_registry_without_the_builtin_events_is_refused_saying_why(store: SQLiteEventStore) -> None:
    with pytest.raises(UsageError) as refused:
        PinLedger(store, EventTypeRegistry(builtins=False))
    assert str(refused.value) == "the registry lacks the built-in events (it was made with builtins=False)"


def test_a_key_resolved_inside_its_own_effect_is_refused_saying_why(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)

    def effect() -> str:
        return ledger.resolve(K1, kind="model_call", effect=lambda: "inner", interpret=str)

    with pytest.raises(UsageError) as refused:
        ledger.resolve(K1, kind="model_call", effect=effect, interpret=str)
    assert str(refused.value) == (
        f"{K1} was asked for inside its own effect; it would wait for itself forever."
        " An effect must not resolve its own key"
    )


def test_an_abandon_summary_is_correlated_with_its_unit(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types, unit_id="dropped")
    drawn(ledger, K1)
    stored = ledger.abandon(reason="vetoed")
    assert stored.correlation_id == "dropped"
    assert [e.correlation_id for e in store.read()] == ["dropped"]


# Record mode's adoption of a replayed pin, and streams.


def test_an_adopted_failed_pin_stays_a_failure(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    raw = json.dumps({"error": {"message": "refused then"}})
    ledger.adopt(K1, kind="model_call", raw=raw, fingerprint='{"a":"1"}', failed=True)
    ledger.adopt(K2, kind="tool_call", raw='"fine"', fingerprint=None)
    assert [(p.key, p.kind, p.fingerprint) for p in ledger.pins()] == [
        (K1, "model_call!failed", '{"a":"1"}'),
        (K2, "tool_call", None),
    ]
    with pytest.raises(ValueError, match=r"^again: refused then$"):
        ledger.resolve(K1, kind="model_call", effect=lambda: "never", interpret=str, failure=Codec())


def test_a_stream_keeps_its_fingerprint_and_pins_a_described_failure(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)

    def capture(stream: Stream) -> object:
        return stream.chunks

    async def run() -> None:
        async with ledger.resolve_stream(
            K1, kind="model_call", effect=open_stream, capture=capture, interpret=str, fingerprint={"a": "1"}
        ) as draw:
            assert draw.live is not None
            draw.live.chunks.append("whole")
        with pytest.raises(ValueError, match=r"^dropped$"):
            async with ledger.resolve_stream(
                K2, kind="model_call", effect=open_stream, capture=capture, interpret=str, failure=Codec()
            ) as draw:
                assert draw.live is not None
                draw.live.chunks.append("part")
                raise ValueError("dropped")

    asyncio.run(run())
    assert [(p.key, p.kind, json.loads(p.raw_text), p.fingerprint) for p in ledger.pins()] == [
        (K1, "model_call", ["whole"], '{"a":"1"}'),
        (K2, "model_call!failed", {"error": {"message": "dropped"}, "captured": ["part"]}, None),
    ]


def test_a_failure_whose_description_cannot_be_pinned_is_raised_as_it_was(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    class Unpinnable(Codec):
        def describe(self, error: BaseException) -> JSONValue | None:
            return cast("JSONValue", {"when": {1, 2}})

    def refuse() -> str:
        raise ValueError("the provider refused")

    ledger = PinLedger(store, types)
    # Pinning the failure fails (its description is not JSON): the failure itself is what the caller hears.
    with pytest.raises(ValueError, match=r"^the provider refused$"):
        ledger.resolve(K1, kind="model_call", effect=refuse, interpret=str, failure=Unpinnable())
    assert ledger.pins() == []
    # The key was released: the next ask draws afresh.
    assert ledger.resolve(K1, kind="model_call", effect=lambda: "drawn", interpret=str) == "drawn"


def test_a_task_cancelled_while_its_claim_finds_a_pin_releases_nothing(
    store: SQLiteEventStore, types: EventTypeRegistry, db_path: Path
) -> None:
    ledger = PinLedger(store, types)
    drawn(ledger, K1)
    # Another connection holds the write lock, so the claim (which counts the attempt) waits in its worker thread.
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    errors: list[dict[str, Any]] = []

    async def never() -> str:
        raise AssertionError("the key was pinned: its effect never runs")

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        task = asyncio.create_task(ledger.aresolve(K1, kind="model_call", effect=never, interpret=str))
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        blocker.execute("ROLLBACK")
        # The claim finishes after its caller has gone, finding the pin (one more attempt): it took no draw,
        # so there is nothing to hand back.
        for _ in range(3_000):
            if ledger.pins()[0].attempts == 2:
                break
            await asyncio.sleep(0.01)
        for _ in range(10):
            await asyncio.sleep(0)

    try:
        asyncio.run(main())
    finally:
        blocker.close()
    assert errors == []
    assert ledger.pins()[0].attempts == 2
    assert [json.loads(e.payload)["attempts"] for e in ledger.commit()] == [2]


# The async closes.


def test_the_async_closes_close_as_the_sync_ones_do(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    kept = PinLedger(store, types, unit_id="kept")
    drawn(kept, K1, K2)
    dropped = PinLedger(store, types, unit_id="dropped")
    drawn(dropped, K3)

    async def main() -> tuple[list[StoredEvent], StoredEvent]:
        return await kept.acommit(), await dropped.aabandon(reason="vetoed")

    stored, summary = asyncio.run(main())
    assert [json.loads(e.payload)["key"] for e in stored] == [K1, K2]
    abandoned = types.decode(summary)
    assert isinstance(abandoned, PinsAbandoned)
    assert (abandoned.unit_id, abandoned.reason) == ("dropped", "vetoed")
    assert [(p.key, p.kind, p.attempts) for p in abandoned.pins] == [(K3, "model_call", 1)]
    assert (kept.state, dropped.state) == ("committed", "abandoned")


# Units kept apart, and what needs no store.


def test_units_through_one_store_keep_their_draws_apart(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    first = PinLedger(store, types, unit_id="first")
    second = PinLedger(store, types, unit_id="second")

    def outer() -> str:
        # The same key in another unit is another draw: it does not wait for this one, nor is this one in
        # flight there, so that unit closes.
        inner = second.resolve(K1, kind="model_call", effect=lambda: "second's", interpret=str)
        second.commit()
        return f"first's, around {inner}"

    assert first.resolve(K1, kind="model_call", effect=outer, interpret=str) == "first's, around second's"
    assert [json.loads(e.payload)["raw"] for e in first.commit()] == ["first's, around second's"]
    assert second.state == "committed"


def test_noting_a_divergence_needs_no_store(db_path: Path, types: EventTypeRegistry) -> None:
    store = SQLiteEventStore(db_path)
    ledger = PinLedger(store, types)
    store.close()
    # A record-mode replay notes where it left its recording in memory; only the commit writes it.
    noted = Divergence(key=K1, kind="model_call", after_hits=0)
    ledger.note_divergence(noted)
    assert ledger.divergence is noted


# Draws landing while another caller looks, waiters whose loop is gone, a write cancelled twice.


class PausedAfterAMiss(SQLiteEventStore):
    """A real store that runs `meanwhile` once, right after a look-up finds no pin for its key."""

    meanwhile: Callable[[], object] | None = None

    def scratch_reuse(self, unit_id: str, key: str) -> ScratchPin | None:
        pin = super().scratch_reuse(unit_id, key)
        hook, self.meanwhile = self.meanwhile, None
        if pin is None and hook is not None:
            hook()
        return pin


def test_a_draw_landing_between_a_miss_and_the_claim_is_reused_not_drawn_again(
    db_path: Path, types: EventTypeRegistry
) -> None:
    with PausedAfterAMiss(db_path) as store:
        first = PinLedger(store, types, unit_id="shared")
        second = PinLedger(store, types, unit_id="shared")
        drawn(first, K2, K3)  # earlier draws, landed and released
        effects: list[str] = []

        def late() -> str:
            effects.append("second")
            return "second's"

        # The second ledger finds no pin for K1; before it takes the draw, the first draws K1 to the end.
        store.meanwhile = lambda: first.resolve(K1, kind="model_call", effect=lambda: "first's", interpret=str)
        assert second.resolve(K1, kind="model_call", effect=late, interpret=str) == "first's"
        assert effects == []
        assert [(p.key, p.attempts) for p in second.pins()] == [(K2, 1), (K3, 1), (K1, 2)]


def test_a_waiter_whose_loop_closed_while_it_queued_does_not_keep_the_next_one_waiting(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    started = threading.Event()
    release = threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        return "drawn"

    owner = threading.Thread(target=lambda: ledger.resolve(K1, kind="model_call", effect=slow, interpret=str))
    owner.start()
    assert started.wait(10)

    async def wait_for_the_draw() -> str:
        return await ledger.aresolve(K1, kind="model_call", effect=slow, interpret=str)

    # A waiter queues on a loop that is then closed under it, nothing cancelling it: it stays first in the queue.
    gone = asyncio.new_event_loop()
    queued = gone.create_task(wait_for_the_draw())
    gone.run_until_complete(asyncio.sleep(0.5))
    gone.close()
    woken: list[str] = []

    async def patient() -> None:
        woken.append(await asyncio.wait_for(wait_for_the_draw(), 5))

    waiter = threading.Thread(target=lambda: asyncio.run(patient()))
    waiter.start()
    time.sleep(0.3)  # the patient waiter queues behind the one whose loop is gone
    release.set()
    owner.join(10)
    waiter.join(10)
    assert woken == ["drawn"]
    # The task left on the closed loop never ends; collected here, the warning that it was pending stays in this test.
    del queued
    gc.collect()


def test_an_async_draw_cancelled_twice_while_its_pin_is_written_still_waits_for_the_write(
    store: SQLiteEventStore, types: EventTypeRegistry, db_path: Path
) -> None:
    ledger = PinLedger(store, types)
    blocker = sqlite3.connect(db_path, isolation_level=None)

    async def main() -> None:
        drawn_already = asyncio.Event()

        async def effect() -> str:
            # Another connection takes the write lock once the claim is made: the pin's write waits at the store.
            blocker.execute("BEGIN IMMEDIATE")
            drawn_already.set()
            return "paid for"

        task = asyncio.create_task(ledger.aresolve(K1, kind="model_call", effect=effect, interpret=str))
        await drawn_already.wait()  # the task is waiting for its pin's write now
        for _ in range(2):
            task.cancel()
            for _ in range(5):
                await asyncio.sleep(0)
            # However often it is cancelled, the task ends only once the draw it paid for is written.
            assert not task.done()
        blocker.execute("ROLLBACK")
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
    finally:
        blocker.close()
    assert [(p.key, json.loads(p.raw_text)) for p in ledger.pins()] == [(K1, "paid for")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_draw_whose_key_another_writer_pinned_as_failed_first_answers_with_that_failure(
    store: SQLiteEventStore, types: EventTypeRegistry, mode: str
) -> None:
    ledger = PinLedger(store, types)
    raw = json.dumps({"error": {"message": "refused first"}})

    def effect() -> str:
        # Another writer pins the key as failed while this draw runs; it stands for another store object,
        # which the unit's lease would otherwise keep out.
        store.scratch_put(ledger.unit_id, K1, kind="model_call!failed", raw=raw, fingerprint=None)
        return "drawn too late"

    async def aeffect() -> str:
        return effect()

    # The key's pin in the unit is the answer, and a pinned failure is rebuilt by the draw's own codec.
    with pytest.raises(ValueError, match=r"^again: refused first$"):
        if mode == "sync":
            ledger.resolve(K1, kind="model_call", effect=effect, interpret=str, failure=Codec())
        else:
            asyncio.run(ledger.aresolve(K1, kind="model_call", effect=aeffect, interpret=str, failure=Codec()))
    assert [(p.key, p.kind, p.raw_text, p.attempts) for p in ledger.pins()] == [(K1, "model_call!failed", raw, 2)]
