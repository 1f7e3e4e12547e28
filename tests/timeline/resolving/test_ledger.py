"""PinLedger: draw once, reuse in the unit, wait for a draw in flight, commit or abandon atomically, and what a close
writes and refuses; failure paths (a close racing a draw, a store failing at commit or mid-write) lose no paid draw."""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anagrapheus.errors import AnagrapheusError, PinResultError, StoreError, UnitClosed, UsageError
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinPromoted,
    PinResolver,
    PinsAbandoned,
    ReplayDiverged,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
    TimelineStore,
    pin_key,
)
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.divergence import Divergence
from anagrapheus.timeline.events import BUILTIN_NAMESPACE
from anagrapheus.timeline.stores.ports import ScratchPin


class Counter:
    def __init__(self, result: Any = "drawn") -> None:
        self.calls = 0
        self.result = result

    def __call__(self) -> Any:
        self.calls += 1
        return self.result


def identity(raw: Any) -> Any:
    return raw


K1 = pin_key("model_call", {"prompt": "one"})
K2 = pin_key("model_call", {"prompt": "two"})


def test_implements_the_resolver_protocol(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    assert isinstance(PinLedger(store, types), PinResolver)


def test_unit_id_is_a_uuid7_unless_given(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    unit_id = PinLedger(store, types).unit_id
    assert unit_id[14] == "7" and len(unit_id) == 36
    assert PinLedger(store, types, unit_id="round-1").unit_id == "round-1"


def test_a_fresh_registry_knows_the_builtin_events(store: SQLiteEventStore) -> None:
    types = EventTypeRegistry()
    assert (BUILTIN_NAMESPACE, "pin_promoted") in types
    ledger = PinLedger(store, types)
    ledger.resolve(K1, kind="model_call", effect=Counter({"text": "hello"}), interpret=identity)
    (event,) = ledger.commit()
    assert isinstance(types.decode(event), PinPromoted)
    assert types.lookup(BUILTIN_NAMESPACE, "pin_promoted") is PinPromoted


def test_a_registry_made_without_the_builtin_events_is_refused(store: SQLiteEventStore) -> None:
    with pytest.raises(UsageError, match="built-in events"):
        PinLedger(store, EventTypeRegistry(builtins=False))


def test_first_draw_goes_to_scratch_at_once_not_to_the_log(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    effect = Counter({"text": "hello"})
    assert ledger.resolve(K1, kind="model_call", effect=effect, interpret=identity) == {"text": "hello"}
    assert effect.calls == 1
    assert store.last_seq() == 0
    # Durable at once: a second connection sees the scratch row.
    with SQLiteEventStore(store.path) as other:
        assert [p.raw_text for p in other.scratch_list(ledger.unit_id)] == ['{"text":"hello"}']


def test_retry_reuses_the_draw_and_commit_counts_attempts(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    effect = Counter("answer")
    for _ in range(3):
        assert ledger.resolve(K1, kind="model_call", effect=effect, interpret=identity) == "answer"
    ledger.resolve(K2, kind="tool_call", effect=Counter(7), interpret=identity)
    assert effect.calls == 1
    stored = ledger.commit()
    events = [types.decode(e) for e in stored]
    assert events == [
        PinPromoted(unit_id=ledger.unit_id, key=K1, kind="model_call", raw="answer", attempts=3),
        PinPromoted(unit_id=ledger.unit_id, key=K2, kind="tool_call", raw=7, attempts=1),
    ]
    assert [e.seq for e in stored] == [1, 2]
    assert store.scratch_list(ledger.unit_id) == []
    assert all(e.correlation_id == ledger.unit_id for e in stored)


def test_interpret_runs_on_every_path_on_the_raw_json(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    seen: list[Any] = []

    def interpret(raw: Any) -> tuple[Any, ...]:
        seen.append(raw)
        return tuple(raw)

    ledger = PinLedger(store, types)
    # A tuple goes in; what interpret sees is the JSON list, exactly as the log will give it back.
    first = ledger.resolve(K1, kind="model_call", effect=lambda: (1, 2.0, "x"), interpret=interpret)
    again = ledger.resolve(K1, kind="model_call", effect=lambda: (9,), interpret=interpret)
    assert first == again == (1, 2, "x")
    assert seen == [[1, 2, "x"], [1, 2, "x"]]


def test_an_effect_that_raises_pins_nothing(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)

    class Boom(Exception):
        pass

    def fail() -> Any:
        raise Boom("provider down")

    with pytest.raises(Boom, match="provider down"):
        ledger.resolve(K1, kind="model_call", effect=fail, interpret=identity)
    assert ledger.pins() == []
    effect = Counter("later")
    assert ledger.resolve(K1, kind="model_call", effect=effect, interpret=identity) == "later"
    assert effect.calls == 1


def test_a_result_that_is_not_json_is_refused_at_draw_time(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    with pytest.raises(PinResultError, match=r"not JSON-shaped.*\$\.when"):
        ledger.resolve(K1, kind="tool_call", effect=lambda: {"when": object()}, interpret=identity)
    assert ledger.pins() == []


@pytest.mark.anyio
async def test_100_concurrent_async_resolves_call_the_effect_once(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    calls = 0

    async def slow() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.02)
        return "once"

    results = await asyncio.gather(
        *[ledger.aresolve(K1, kind="model_call", effect=slow, interpret=identity) for _ in range(100)]
    )
    assert results == ["once"] * 100
    assert calls == 1
    (event,) = ledger.commit()
    assert json.loads(event.payload)["attempts"] == 100


def test_concurrent_sync_resolves_from_threads_call_the_effect_once(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    calls = 0
    lock = threading.Lock()

    def slow() -> str:
        nonlocal calls
        with lock:
            calls += 1
        time.sleep(0.05)
        return "once"

    results: list[Any] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(ledger.resolve(K1, kind="model_call", effect=slow, interpret=identity))
        )
        for _ in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["once"] * 16
    assert calls == 1


@pytest.mark.anyio
async def test_a_failed_draw_in_flight_lets_a_waiter_draw(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        await asyncio.sleep(0.01)
        if attempts == 1:
            raise ConnectionError("first try fails")
        return "second try"

    first, second = await asyncio.gather(
        ledger.aresolve(K1, kind="model_call", effect=flaky, interpret=identity),
        ledger.aresolve(K1, kind="model_call", effect=flaky, interpret=identity),
        return_exceptions=True,
    )
    assert isinstance(first, ConnectionError)
    assert second == "second try"
    assert attempts == 2


def test_abandon_leaves_one_summary_and_no_pins(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    ledger.resolve(K1, kind="model_call", effect=Counter(), interpret=identity)
    ledger.resolve(K1, kind="model_call", effect=Counter(), interpret=identity)
    ledger.resolve(K2, kind="tool_call", effect=Counter(), interpret=identity)
    stored = ledger.abandon(reason="the round was vetoed")
    (event,) = [types.decode(e) for e in store.read()]
    assert isinstance(event, PinsAbandoned)
    assert event.reason == "the round was vetoed"
    assert [(p.key, p.kind, p.attempts) for p in event.pins] == [(K1, "model_call", 2), (K2, "tool_call", 1)]
    assert "drawn" not in stored.payload  # an audit line, not the provisional results
    assert store.open_units() == []


def test_a_settled_ledger_refuses_more_work(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    committed = PinLedger(store, types)
    committed.commit()
    abandoned = PinLedger(store, types)
    abandoned.abandon(reason="x")
    for ledger, state in ((committed, "committed"), (abandoned, "abandoned")):
        assert ledger.state == state
        with pytest.raises(UsageError, match=state):
            ledger.resolve(K1, kind="model_call", effect=Counter(), interpret=identity)
        with pytest.raises(UsageError):
            ledger.commit()
        with pytest.raises(UsageError):
            ledger.abandon(reason="again")


def test_an_empty_commit_appends_nothing(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    assert PinLedger(store, types).commit() == []
    assert store.last_seq() == 0


def test_an_open_unit_is_found_and_resumed_after_restart(tmp_path: Path, types: EventTypeRegistry) -> None:
    path = tmp_path / "log.db"
    with SQLiteEventStore(path) as store:
        ledger = PinLedger(store, types, unit_id="round-3")
        ledger.resolve(K1, kind="model_call", effect=Counter("before the crash"), interpret=identity)
        # The process "dies" here: no commit, no abandon.
    with SQLiteEventStore(path) as store:
        (unit,) = PinLedger.open_units(store)
        assert (unit.unit_id, unit.pins) == ("round-3", 1)
        resumed = PinLedger(store, types, unit_id=unit.unit_id)
        effect = Counter("redrawn")
        assert resumed.resolve(K1, kind="model_call", effect=effect, interpret=identity) == "before the crash"
        assert effect.calls == 0
        (event,) = resumed.commit()
        assert json.loads(event.payload)["attempts"] == 2
        assert PinLedger.open_units(store) == []


@pytest.mark.anyio
async def test_a_stream_is_pinned_as_captured_even_when_stopped_early(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    opened = 0

    class Stream:
        def __init__(self) -> None:
            self.chunks: list[str] = []

    @asynccontextmanager
    async def effect() -> AsyncIterator[Stream]:
        nonlocal opened
        opened += 1
        yield Stream()

    async with ledger.resolve_stream(
        K1, kind="model_call", effect=effect, capture=lambda s: "".join(s.chunks), interpret=identity
    ) as draw:
        assert draw.live is not None and draw.pinned is None
        draw.live.chunks.append("par")  # the consumer stops after one chunk
    async with ledger.resolve_stream(
        K1, kind="model_call", effect=effect, capture=lambda s: "unused", interpret=identity
    ) as again:
        assert again.live is None and again.pinned == "par"
    assert opened == 1
    # A stream that fails midway is pinned too, and its error still propagates.
    with pytest.raises(RuntimeError, match="midway"):
        async with ledger.resolve_stream(
            K2, kind="model_call", effect=effect, capture=lambda s: "".join(s.chunks), interpret=identity
        ) as draw:
            assert draw.live is not None
            draw.live.chunks.append("half")
            raise RuntimeError("midway")
    assert [(p.key, p.raw_text) for p in ledger.pins()] == [(K1, '"par"'), (K2, '"half"')]


def test_commit_text_matches_the_registry_encoding(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types, unit_id="unité-1")
    ledger.resolve(K1, kind="model_call", effect=lambda: {"é": [1.5, None]}, interpret=identity, fingerprint={"a": "b"})
    (stored,) = ledger.commit()
    expected = types.encode(
        PinPromoted(
            unit_id="unité-1", key=K1, kind="model_call", raw={"é": [1.5, None]}, attempts=1, fingerprint={"a": "b"}
        )
    )
    assert stored.payload == expected.payload


@settings(max_examples=30, deadline=None)
@given(
    raw=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(), c, max_size=3),
        max_leaves=10,
    ),
    unit=st.text(min_size=1, max_size=8),
)
def test_spliced_commit_payload_equals_the_model_encoding(tmp_path_factory: Any, raw: Any, unit: str) -> None:
    types = EventTypeRegistry()
    with SQLiteEventStore(tmp_path_factory.mktemp("p") / "log.db") as store:
        ledger = PinLedger(store, types, unit_id=unit)
        value = ledger.resolve(K1, kind="model_call", effect=lambda: raw, interpret=identity)
        (stored,) = ledger.commit()
    assert (
        stored.payload
        == types.encode(PinPromoted(unit_id=unit, key=K1, kind="model_call", raw=value, attempts=1)).payload
    )


K3 = pin_key("model_call", {"prompt": "three"})


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


KEY = "p1:model_call:k1"


def promoted(store: TimelineStore) -> list[dict[str, object]]:
    return [json.loads(e.payload) for e in store.read() if e.type == "pin_promoted"]


def close_during_a_draw(ledger: PinLedger, close: str) -> None:
    """Run `ledger.<close>()` while a draw is in flight, then let the draw finish; retry the close if refused."""
    started, release = threading.Event(), threading.Event()
    closed: list[BaseException | None] = []

    def effect() -> str:
        started.set()
        assert release.wait(30)
        return "drawn while closing"

    def draw() -> None:
        ledger.resolve(KEY, kind="model_call", effect=effect, interpret=str)

    def close_it() -> None:
        try:
            ledger.commit() if close == "commit" else ledger.abandon(reason="closed mid-draw")
        except AnagrapheusError as e:
            closed.append(e)
        else:
            closed.append(None)

    drawer = threading.Thread(target=draw)
    drawer.start()
    assert started.wait(30)
    closer = threading.Thread(target=close_it)
    closer.start()
    # The close either returns at once (refused) or waits for the draw; it must not finish without it.
    closer.join(0.3)
    release.set()
    drawer.join(30)
    closer.join(30)
    assert not drawer.is_alive() and not closer.is_alive()
    if closed != [None]:
        # Refused while the draw was in flight: once it landed, the same close goes through.
        ledger.commit() if close == "commit" else ledger.abandon(reason="closed mid-draw")


def test_a_commit_during_a_draw_keeps_the_draw(store: SQLiteEventStore, ledger: PinLedger) -> None:
    close_during_a_draw(ledger, "commit")
    assert [(p["key"], p["raw"]) for p in promoted(store)] == [(KEY, "drawn while closing")]
    assert ledger.state == "committed"
    assert PinLedger.open_units(store) == []


def test_an_abandon_during_a_draw_lists_the_draw(store: SQLiteEventStore, ledger: PinLedger) -> None:
    close_during_a_draw(ledger, "abandon")
    (event,) = list(store.read())
    assert event.type == "pins_abandoned"
    assert [pin["key"] for pin in json.loads(event.payload)["pins"]] == [KEY]
    assert ledger.state == "abandoned"
    assert PinLedger.open_units(store) == []


@pytest.mark.parametrize("close", ["commit", "abandon"])
def test_a_store_failure_at_close_leaves_the_unit_open_and_retryable(
    db_path: Path, types: EventTypeRegistry, close: str
) -> None:
    with SQLiteEventStore(db_path, busy_timeout=0.2) as store:
        ledger = PinLedger(store, types)
        ledger.resolve(KEY, kind="model_call", effect=lambda: "drawn", interpret=str)
        # Another writer holds the file's write lock: the close cannot get it, and fails.
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError):
            ledger.commit() if close == "commit" else ledger.abandon(reason="gave up")
        assert ledger.state == "open"
        assert [p.key for p in ledger.pins()] == [KEY]
        assert list(store.read()) == []
        other.execute("ROLLBACK")
        other.close()

        ledger.commit() if close == "commit" else ledger.abandon(reason="gave up")
        assert ledger.state == ("committed" if close == "commit" else "abandoned")
        assert PinLedger.open_units(store) == []
        assert [e.type for e in store.read()] == ["pin_promoted" if close == "commit" else "pins_abandoned"]


class Stream:
    def __init__(self) -> None:
        self.chunks: list[str] = []


@asynccontextmanager
async def open_stream() -> AsyncIterator[Stream]:
    yield Stream()


def broken_capture(_stream: Stream) -> object:
    raise ValueError("capture could not read the stream")


@pytest.mark.anyio
async def test_a_capture_that_raises_after_a_clean_stream_is_reported_and_releases_the_key(ledger: PinLedger) -> None:
    with pytest.raises(ValueError, match="capture could not read the stream"):
        async with ledger.resolve_stream(
            KEY, kind="model_call", effect=open_stream, capture=broken_capture, interpret=str
        ) as draw:
            assert draw.live is not None
    assert ledger.pins() == []
    # The key is free again: the next request draws it afresh, and the unit commits.
    async with ledger.resolve_stream(
        KEY, kind="model_call", effect=open_stream, capture=lambda s: "captured", interpret=str
    ) as draw:
        assert draw.live is not None
    assert [p.raw_text for p in ledger.pins()] == ['"captured"']
    ledger.commit()


@pytest.mark.anyio
async def test_a_capture_that_raises_never_masks_the_streams_own_failure(ledger: PinLedger) -> None:
    with pytest.raises(ConnectionError, match="the provider dropped the stream"):
        async with ledger.resolve_stream(
            KEY, kind="model_call", effect=open_stream, capture=broken_capture, interpret=str
        ) as draw:
            assert draw.live is not None
            raise ConnectionError("the provider dropped the stream")
    assert ledger.pins() == []
    ledger.commit()  # nothing in flight is left behind


@pytest.mark.anyio
async def test_a_failed_stream_is_still_pinned_as_far_as_it_got(ledger: PinLedger) -> None:
    with pytest.raises(ConnectionError):
        async with ledger.resolve_stream(
            KEY, kind="model_call", effect=open_stream, capture=lambda s: {"parts": s.chunks}, interpret=dict
        ) as draw:
            assert draw.live is not None
            draw.live.chunks.append("The UK ")
            raise ConnectionError("the provider dropped the stream")
    assert [json.loads(p.raw_text) for p in ledger.pins()] == [{"parts": ["The UK "]}]


def test_a_pin_replayed_twice_in_record_mode_is_adopted_once_with_two_attempts(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    ledger.resolve(KEY, kind="model_call", effect=lambda: "recorded", interpret=str, fingerprint={"m": "d"})
    ledger.commit()

    into = PinLedger(store, types)
    replay = ReplayPins.from_events(store.read(), types, on_miss="record", into=into)
    for _ in range(2):
        assert replay.resolve(KEY, kind="model_call", effect=object, interpret=str) == "recorded"
    (pin,) = into.pins()
    assert (pin.key, pin.raw_text, pin.attempts, json.loads(pin.fingerprint or "null")) == (
        KEY,
        '"recorded"',
        2,
        {"m": "d"},
    )
    into.commit()
    assert [(p["unit_id"], p["attempts"]) for p in promoted(store)] == [(ledger.unit_id, 1), (into.unit_id, 2)]


KEY_1, KEY_2 = "p1:model_call:k1", "p1:model_call:k2"


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


class MessageCodec:
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
        ledger.resolve(KEY_1, kind="model_call", effect=paid, interpret=str)
    # The caller has the result, and so does the ledger: asking again answers from memory, not the world.
    assert caught.value.drawn == '"drawn #1"'
    assert any(".drawn" in note for note in caught.value.__notes__)
    assert ledger.resolve(KEY_1, kind="model_call", effect=paid, interpret=str) == "drawn #1"
    assert paid.calls == ["drawn"]
    # Another key cannot be drawn while the store fails, and nothing is paid for it.
    with pytest.raises(StoreError):
        ledger.resolve(KEY_2, kind="model_call", effect=paid, interpret=str)
    # A commit cannot drop what it has not written: it fails, loudly, and the unit stays open.
    with pytest.raises(StoreError) as refused:
        ledger.commit()
    assert any(f"held in memory ({KEY_1})" in note for note in refused.value.__notes__)
    assert ledger.state == "open"
    assert paid.calls == ["drawn"]

    writer.let_go()
    paid.then = lambda: None
    assert ledger.resolve(KEY_2, kind="model_call", effect=paid, interpret=str) == "drawn #2"
    ledger.commit()
    pins = promoted(locked_store)
    assert [(p["key"], p["raw"], p["attempts"]) for p in pins] == [(KEY_1, "drawn #1", 2), (KEY_2, "drawn #2", 1)]
    assert paid.calls == ["drawn", "drawn"]


def test_a_commit_writes_the_held_draws_first(
    locked_store: SQLiteEventStore, db_path: Path, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(locked_store, types)
    writer = Writer(db_path)
    with pytest.raises(StoreError) as caught:
        ledger.resolve(KEY_1, kind="model_call", effect=Paid(then=writer.take), interpret=str)
    writer.let_go()
    assert ledger.pins() == []  # held in memory, not yet in scratch
    ledger.commit()
    assert [(p["key"], p["raw"]) for p in promoted(locked_store)] == [(KEY_1, json.loads(caught.value.drawn or ""))]


def test_a_second_ledger_on_the_unit_answers_a_held_draw(
    locked_store: SQLiteEventStore, db_path: Path, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(locked_store, types)
    writer = Writer(db_path)
    with pytest.raises(StoreError):
        ledger.resolve(KEY_1, kind="model_call", effect=Paid(then=writer.take), interpret=str)
    writer.let_go()
    again = PinLedger(locked_store, types, unit_id=ledger.unit_id)
    assert again.resolve(KEY_1, kind="model_call", effect=Paid(), interpret=str) == "drawn #1"
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
        ledger.resolve(KEY_1, kind="model_call", effect=fails, interpret=str, failure=MessageCodec())
    # The failure is the draw's outcome: asked again, it is raised again, from memory.
    with pytest.raises(ValueError, match="refused"):
        ledger.resolve(KEY_1, kind="model_call", effect=Paid(), interpret=str, failure=MessageCodec())
    writer.let_go()
    ledger.commit()
    (pin,) = promoted(locked_store)
    assert (pin["key"], pin["failed"], pin["attempts"]) == (KEY_1, True, 2)


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
        await ledger.aresolve(KEY_1, kind="model_call", effect=effect, interpret=str)
    assert caught.value.drawn == '"drawn #1"'
    assert await ledger.aresolve(KEY_1, kind="model_call", effect=effect, interpret=str) == "drawn #1"
    writer.let_go()
    await ledger.acommit()
    assert [(p["key"], p["attempts"]) for p in promoted(locked_store)] == [(KEY_1, 2)]
    assert paid.calls == ["drawn"]


class TextStream:
    def __init__(self) -> None:
        self.text = ""


@pytest.mark.anyio
async def test_a_stream_whose_write_fails_is_held(
    locked_store: SQLiteEventStore, db_path: Path, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(locked_store, types)
    writer = Writer(db_path)
    opened: list[TextStream] = []

    @asynccontextmanager
    async def effect() -> AsyncIterator[TextStream]:
        opened.append(TextStream())
        yield opened[-1]

    with pytest.raises(StoreError) as caught:
        async with ledger.resolve_stream(
            KEY_1, kind="model_call", effect=effect, capture=lambda s: s.text, interpret=str
        ) as draw:
            assert draw.live is not None
            draw.live.text = "streamed"
            writer.take()
    assert caught.value.drawn == '"streamed"'
    async with ledger.resolve_stream(
        KEY_1, kind="model_call", effect=effect, capture=lambda s: s.text, interpret=str
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
        ledger.resolve(KEY_1, kind="model_call", effect=effect, interpret=str)
    assert caught.value.drawn == '"paid for"'


@pytest.mark.postgres
def test_a_postgres_store_closed_during_a_draw_hands_the_result_back(
    open_pg: Callable[..., TimelineStore], types: EventTypeRegistry
) -> None:
    store = open_pg(connect_timeout=1.0)
    ledger = PinLedger(store, types)
    with closing_mid_draw(store) as effect, pytest.raises(StoreError) as caught:
        ledger.resolve(KEY_1, kind="model_call", effect=effect, interpret=str)
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

    assert ledger.resolve(KEY_1, kind="model_call", effect=kill_pooled_backends, interpret=str) == "paid for"
    ledger.commit()
    assert [(p["key"], p["raw"]) for p in promoted(store)] == [("p1:model_call:k0", "before"), (KEY_1, "paid for")]


class StallingStore(SQLiteEventStore):
    """A real store whose first write fails (both its tries), and whose next one stalls until told to go on."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.puts = 0
        self.rewriting = threading.Event()
        self.go_on = threading.Event()

    def scratch_put(self, *args: Any, **kwargs: Any) -> Any:
        self.puts += 1
        if self.puts <= 2:
            raise StoreError("disk I/O error (a write that failed)")
        if self.puts == 3:
            self.rewriting.set()
            self.go_on.wait(10)
        return super().scratch_put(*args, **kwargs)


def test_a_held_result_being_rewritten_is_answered_from_memory_never_drawn_again(
    db_path: Path, types: EventTypeRegistry
) -> None:
    # Issue #35: the flush passed the held result over (another caller was writing it), scratch had no pin yet,
    # and the key was drawn a second time.
    store = StallingStore(db_path)
    ledger = PinLedger(store, types)
    paid = Paid()
    with pytest.raises(StoreError):
        ledger.resolve(KEY_1, kind="tool_call", effect=paid, interpret=str)
    answers: list[str] = []
    rewriter = threading.Thread(
        target=lambda: answers.append(ledger.resolve(KEY_1, kind="tool_call", effect=paid, interpret=str))
    )
    rewriter.start()
    assert store.rewriting.wait(10)
    try:
        answers.append(ledger.resolve(KEY_1, kind="tool_call", effect=paid, interpret=str))
    finally:
        store.go_on.set()
        rewriter.join(10)
    assert answers == ["drawn #1", "drawn #1"]
    assert paid.calls == ["drawn"]
    ledger.commit()
    assert [(p["key"], p["raw"]) for p in promoted(store)] == [(KEY_1, "drawn #1")]
    store.close()
