"""ReplayPins: strict and record replay, divergence that says what moved, ambiguity that is never silent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from anagrapheus.errors import AmbiguousPin, EventTypeError, PinMiss, UsageError
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinPromoted,
    PinResolver,
    ReplayDiverged,
    ReplayPins,
    SQLiteEventStore,
    UpcastRegistry,
    fingerprint_of,
    pin_key,
)
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PendingEvent
from anagrapheus.timeline.replay import AmbiguousPinWarning


def never() -> Any:
    raise AssertionError("the effect must not run under replay")


def identity(raw: Any) -> Any:
    return raw


def call(prompt: str, *, model: str = "scripted-uk", temperature: float = 0.0) -> tuple[str, dict[str, str]]:
    material = {"model": model, "settings": {"temperature": temperature}, "messages": [prompt]}
    return pin_key("model_call", material), fingerprint_of(material)


def record(store: SQLiteEventStore, types: EventTypeRegistry, prompts: list[str], **kw: Any) -> PinLedger:
    ledger = PinLedger(store, types, **kw)
    for prompt in prompts:
        key, fp = call(prompt)
        ledger.resolve(
            key, kind="model_call", effect=lambda p=prompt: f"answer to {p}", interpret=identity, fingerprint=fp
        )
    ledger.commit()
    return ledger


def test_strict_replay_answers_from_the_log_without_the_effect(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    record(store, types, ["one", "two"])
    replay = ReplayPins.from_events(store.read(), types)
    assert isinstance(replay, PinResolver)
    assert len(replay) == 2
    for prompt in ("two", "one", "two"):
        key, fp = call(prompt)
        assert replay.resolve(key, kind="model_call", effect=never, interpret=identity, fingerprint=fp) == (
            f"answer to {prompt}"
        )
    assert replay.hits == 3


def test_replay_never_writes_to_the_log(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record(store, types, ["one"])
    before = list(store.read())
    replay = ReplayPins.from_events(store.read(), types)
    key, _ = call("one")
    replay.resolve(key, kind="model_call", effect=never, interpret=identity)
    with pytest.raises(PinMiss):
        replay.resolve(call("new")[0], kind="model_call", effect=never, interpret=identity)
    assert list(store.read()) == before
    assert store.open_units() == []


def test_strict_miss_raises_before_any_effect_and_says_what_moved(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    record(store, types, ["one", "two"])
    replay = ReplayPins.from_events(store.read(), types)
    replay.resolve(call("one")[0], kind="model_call", effect=never, interpret=identity)
    key, fp = call("one", temperature=0.7)
    with pytest.raises(PinMiss) as caught:
        replay.resolve(key, kind="model_call", effect=never, interpret=identity, fingerprint=fp)
    divergence = caught.value.divergence
    assert (divergence.key, divergence.kind, divergence.after_hits) == (key, "model_call", 1)
    assert divergence.moved == ("settings.temperature",)
    assert divergence.nearest_key == call("one")[0]
    assert "settings.temperature" in str(caught.value)
    assert replay.divergence == divergence


def test_a_miss_without_fingerprints_still_names_key_and_kind(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    replay = ReplayPins.from_events(store.read(), types)
    with pytest.raises(PinMiss) as caught:
        replay.resolve("p1:tool_call:abc", kind="tool_call", effect=never, interpret=identity)
    assert caught.value.divergence.moved == ()
    assert "p1:tool_call:abc" in str(caught.value) and "tool_call" in str(caught.value)


@pytest.mark.anyio
async def test_async_and_stream_strict_replay(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    record(store, types, ["one"])
    replay = ReplayPins.from_events(store.read(), types)
    key, _ = call("one")

    async def anever() -> Any:
        raise AssertionError("must not run")

    @asynccontextmanager
    async def snever() -> AsyncIterator[Any]:
        raise AssertionError("must not open")
        yield

    assert await replay.aresolve(key, kind="model_call", effect=anever, interpret=identity) == "answer to one"
    async with replay.resolve_stream(key, kind="model_call", effect=snever, capture=identity, interpret=str) as draw:
        assert draw.live is None and draw.pinned == "answer to one"
    with pytest.raises(PinMiss):
        await replay.aresolve(call("two")[0], kind="model_call", effect=anever, interpret=identity)
    with pytest.raises(PinMiss):
        async with replay.resolve_stream(
            call("two")[0], kind="model_call", effect=snever, capture=identity, interpret=str
        ):
            pass


def test_record_needs_a_ledger_and_strict_refuses_one(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    with pytest.raises(UsageError, match="into="):
        ReplayPins.from_events(store.read(), types, on_miss="record")
    with pytest.raises(UsageError, match="strict"):
        ReplayPins.from_events(store.read(), types, into=PinLedger(store, types))
    with pytest.raises(UsageError):
        ReplayPins.from_events(store.read(), types, on_miss="lenient")  # type: ignore[arg-type]


def test_record_mode_draws_after_divergence_and_the_new_log_replays_strictly(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    old = record(store, types, ["one", "two", "three"])
    recorded = list(store.read())
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(recorded, types, on_miss="record", into=ledger)
    drawn: list[str] = []

    def fresh(prompt: str) -> Any:
        drawn.append(prompt)
        return f"fresh answer to {prompt}"

    results = []
    for prompt in ("one", "TWO", "three"):
        key, fp = call(prompt)
        results.append(
            replay.resolve(key, kind="model_call", effect=lambda p=prompt: fresh(p), interpret=identity, fingerprint=fp)
        )
    assert results == ["answer to one", "fresh answer to TWO", "answer to three"]
    assert drawn == ["TWO"]
    assert replay.divergence is not None and replay.divergence.after_hits == 1
    assert replay.divergence.moved == ("messages[0]",)

    stored = ledger.commit()
    decoded = [types.decode(e) for e in stored]
    assert [type(e).__name__ for e in decoded] == ["PinPromoted", "ReplayDiverged", "PinPromoted", "PinPromoted"]
    diverged = decoded[1]
    assert isinstance(diverged, ReplayDiverged)
    assert (diverged.unit_id, diverged.key, diverged.after_hits, diverged.moved) == (
        "rerun",
        call("TWO")[0],
        1,
        ("messages[0]",),
    )
    # The new unit replays strictly end to end, with no reference to the old unit.
    again = ReplayPins.from_events(store.read(), types, unit_id="rerun")
    assert [
        again.resolve(call(p)[0], kind="model_call", effect=never, interpret=identity) for p in ("one", "TWO", "three")
    ] == results
    assert old.unit_id != "rerun"


def test_ambiguous_keys_are_surfaced_and_unit_scoped_replay_answers_them(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    first = PinLedger(store, types, unit_id="game-1")
    key, _ = call("same question")
    first.resolve(key, kind="model_call", effect=lambda: "heads", interpret=identity)
    first.commit()
    second = PinLedger(store, types, unit_id="game-2")
    second.resolve(key, kind="model_call", effect=lambda: "tails", interpret=identity)
    second.commit()
    with pytest.warns(AmbiguousPinWarning):
        everything = ReplayPins.from_events(store.read(), types)
    assert everything.ambiguous == {key: ("game-1", "game-2")}
    with pytest.raises(AmbiguousPin) as caught:
        everything.resolve(key, kind="model_call", effect=never, interpret=identity)
    assert caught.value.unit_ids == ["game-1", "game-2"]
    game2 = ReplayPins.from_events(store.read(), types, unit_id="game-2")
    assert game2.resolve(key, kind="model_call", effect=never, interpret=identity) == "tails"


def test_identical_results_from_several_units_are_not_ambiguous(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    record(store, types, ["one"])
    record(store, types, ["one"])
    replay = ReplayPins.from_events(store.read(), types)
    assert replay.ambiguous == {}
    assert replay.resolve(call("one")[0], kind="model_call", effect=never, interpret=identity) == "answer to one"


def test_old_pin_versions_are_upcast_on_replay(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    key, _ = call("one")
    # A pin written by version 1 (before failures were pinned) replays through the built-in upcast to version 2.
    store.append(
        [
            PendingEvent(
                namespace=BUILTIN_NAMESPACE,
                type="pin_promoted",
                schema_version=1,
                payload=f'{{"attempts":1,"key":"{key}","kind":"model_call","raw":"old","unit_id":"u"}}',
            )
        ]
    )
    (stored,) = store.read()
    assert PinPromoted.read(stored, types).failed is False
    for upcasts in (None, UpcastRegistry()):
        replay = ReplayPins.from_events(store.read(), types, upcasts=upcasts)
        assert replay.resolve(key, kind="model_call", effect=never, interpret=identity) == "old"
    with pytest.raises(EventTypeError, match="already registered"):
        UpcastRegistry().add(BUILTIN_NAMESPACE, "pin_promoted", from_version=1, step=lambda p: p)


def test_a_replay_built_from_the_store_reads_only_its_pins_and_answers_as_from_events(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    record(store, types, ["one", "two"], unit_id="game-1")
    # An event of a type this registry does not know: from_store never reads it, so never has to decode it.
    store.append([PendingEvent(namespace="demo", type="offer_made", schema_version=1, payload='{"x":1}')])
    record(store, types, ["three"], unit_id="game-2")
    replay = ReplayPins.from_store(store, types)
    assert len(replay) == 3
    for prompt in ("one", "two", "three"):
        assert replay.resolve(call(prompt)[0], kind="model_call", effect=never, interpret=identity) == (
            f"answer to {prompt}"
        )
    assert len(ReplayPins.from_store(store, types, unit_id="game-2")) == 1
    with pytest.raises(PinMiss) as caught:
        replay.resolve(
            call("four")[0], kind="model_call", effect=never, interpret=identity, fingerprint=call("four")[1]
        )
    assert caught.value.divergence.moved == ("messages[0]",)
