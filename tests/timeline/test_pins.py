"""PinLedger: draw once, reuse in the unit, wait for a draw in flight, commit or abandon atomically."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anagrapheus.errors import PinResultError, UsageError
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinPromoted,
    PinResolver,
    PinsAbandoned,
    SQLiteEventStore,
    pin_key,
)
from anagrapheus.timeline.events import BUILTIN_NAMESPACE


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
