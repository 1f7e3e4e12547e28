"""ReplayPins: strict and record replay from each source (events, a store, a recording), divergence that says what
moved, ambiguity that is never silent, and corrupt pins refused by seq on the fast path."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import (
    AmbiguousPin,
    CorruptEvent,
    EventTypeError,
    PinMiss,
    PinnedFailure,
    ProvenanceMismatch,
    UsageError,
)
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinPromoted,
    PinResolver,
    ProvenanceWarning,
    ReplayDiverged,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
    UpcastRegistry,
    fingerprint_of,
    pin_key,
)
from anagrapheus.timeline.canonical import JSONValue, canonical_json
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PendingEvent
from anagrapheus.timeline.recording import RecordingHeader, write_recording
from anagrapheus.timeline.resolving import replay as replay_module
from anagrapheus.timeline.resolving.replay import AmbiguousPinWarning

from ..test_events import PinPromotedV3, kinds_renamed, registry_of, stored


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


HEADER = RecordingHeader(
    description="Pins for the replay source tests.",
    recorded_with="ledgers over a fresh store; no model involved",
    rerecord="pytest tests/timeline/resolving/test_replay.py",
)


class Codec:
    """Pins a ValueError as its message, and rebuilds it."""

    def describe(self, error: BaseException) -> JSONValue | None:
        return {"message": str(error)} if isinstance(error, ValueError) else None

    def rebuild(self, record: JSONValue) -> BaseException:
        assert isinstance(record, dict)
        return ValueError(f"rebuilt: {record['message']}")


def bare_call(prompt: str) -> tuple[str, dict[str, str]]:
    material = {"model": "scripted-uk", "messages": [prompt]}
    return pin_key("model_call", material), fingerprint_of(material)


def refuse(message: str) -> Any:
    raise ValueError(message)


def recorded(store: SQLiteEventStore, types: EventTypeRegistry, *, unit_id: str = "first") -> list[StoredEvent]:
    """One unit: a pin that answered "answer to one", and one whose draw failed with ValueError("no quota")."""
    ledger = PinLedger(store, types, unit_id=unit_id)
    key, fp = bare_call("one")
    ledger.resolve(key, kind="model_call", effect=lambda: "answer to one", interpret=str, fingerprint=fp)
    key, fp = bare_call("two")
    with pytest.raises(ValueError, match="no quota"):
        ledger.resolve(
            key, kind="model_call", effect=lambda: refuse("no quota"), interpret=str, fingerprint=fp, failure=Codec()
        )
    return list(ledger.commit())


def test_a_failed_pin_is_raised_again_through_the_codec_on_every_path(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    replay = ReplayPins.from_events(recorded(store, types), types)
    key = bare_call("two")[0]
    with pytest.raises(ValueError, match=r"^rebuilt: no quota$"):
        replay.resolve(key, kind="model_call", effect=never, interpret=identity, failure=Codec())

    async def anever() -> Any:
        raise AssertionError("must not run")

    with pytest.raises(ValueError, match=r"^rebuilt: no quota$"):
        asyncio.run(replay.aresolve(key, kind="model_call", effect=anever, interpret=identity, failure=Codec()))
    # Without a codec nobody can say what the exception was: it is raised typed, with the record.
    with pytest.raises(PinnedFailure) as caught:
        replay.resolve(key, kind="model_call", effect=never, interpret=identity)
    assert caught.value.record == {"message": "no quota"}
    assert replay.hits == 3


def test_a_failed_pin_is_adopted_as_failed_with_its_fingerprint_in_record_mode(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    events = recorded(store, types)
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(events, types, on_miss="record", into=ledger)
    for prompt in ("one", "two"):
        with pytest.raises(ValueError) if prompt == "two" else nullcontext():
            replay.resolve(bare_call(prompt)[0], kind="model_call", effect=never, interpret=identity, failure=Codec())
    adopted = [PinPromoted.read(event, types) for event in ledger.commit()]
    assert [(pin.key, pin.failed, pin.fingerprint) for pin in adopted] == [
        (bare_call("one")[0], False, bare_call("one")[1]),
        (bare_call("two")[0], True, bare_call("two")[1]),
    ]


def test_a_miss_in_record_mode_is_drawn_with_its_fingerprint_and_failure_codec(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(recorded(store, types), types, on_miss="record", into=ledger)
    key, fp = bare_call("THREE")
    with pytest.raises(ValueError, match=r"^late$"):
        replay.resolve(
            key, kind="model_call", effect=lambda: refuse("late"), interpret=identity, fingerprint=fp, failure=Codec()
        )
    (drawn,) = [PinPromoted.read(event, types) for event in ledger.commit() if event.type == "pin_promoted"]
    assert (drawn.key, drawn.failed, drawn.raw, drawn.fingerprint) == (key, True, {"error": {"message": "late"}}, fp)


class Stream:
    def __init__(self) -> None:
        self.chunks: list[str] = []


def test_a_streamed_call_replays_a_failed_pin_and_draws_a_miss_with_all_it_was_given(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(recorded(store, types), types, on_miss="record", into=ledger)
    opened: list[str] = []

    @asynccontextmanager
    async def effect() -> AsyncIterator[Stream]:
        opened.append("live")
        yield Stream()

    async def run() -> None:
        # A pinned failure with nothing captured is raised as the stream opens, through the codec.
        with pytest.raises(ValueError, match=r"^rebuilt: no quota$"):
            async with replay.resolve_stream(
                bare_call("two")[0],
                kind="model_call",
                effect=effect,
                capture=identity,
                interpret=identity,
                failure=Codec(),
            ):
                pass
        key, fp = bare_call("streamed")
        with pytest.raises(ValueError, match=r"^cut off$"):
            async with replay.resolve_stream(
                key,
                kind="model_call",
                effect=effect,
                capture=lambda s: "".join(s.chunks),
                interpret=identity,
                fingerprint=fp,
                failure=Codec(),
            ) as draw:
                assert draw.live is not None
                draw.live.chunks.append("half")
                raise ValueError("cut off")

    asyncio.run(run())
    assert opened == ["live"]
    drawn = [PinPromoted.read(event, types) for event in ledger.commit() if event.type == "pin_promoted"][-1]
    assert (drawn.key, drawn.kind, drawn.failed, drawn.fingerprint) == (
        bare_call("streamed")[0],
        "model_call",
        True,
        bare_call("streamed")[1],
    )
    assert drawn.raw == {"captured": "half", "error": {"message": "cut off"}}


def test_unused_lists_the_recorded_keys_no_resolve_asked_for(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    replay = ReplayPins.from_events(recorded(store, types), types)
    assert replay.unused() == {bare_call("one")[0]: "model_call", bare_call("two")[0]: "model_call"}
    replay.resolve(bare_call("one")[0], kind="model_call", effect=never, interpret=identity)
    assert replay.unused() == {bare_call("two")[0]: "model_call"}
    assert replay.units == ("first",)


def test_an_empty_replay_is_strict_by_default() -> None:
    replay = ReplayPins({})
    assert (len(replay), replay.units, replay.into) == (0, (), None)
    with pytest.raises(PinMiss):
        replay.resolve(bare_call("one")[0], kind="model_call", effect=never, interpret=identity)


def test_each_misuse_is_refused_by_its_message(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"on_miss": "lenient"}, "on_miss must be 'strict' or 'record', not 'lenient'"),
        (
            {"on_miss": "record"},
            "on_miss='record' needs into=PinLedger(...): the fresh draws belong to a unit of work",
        ),
        ({"into": PinLedger(store, types)}, "into= is only for on_miss='record'; strict replay never draws"),
    ]
    for options, message in cases:
        with pytest.raises(UsageError) as caught:
            ReplayPins({}, **options)
        assert str(caught.value) == message


def test_an_ambiguous_key_is_named_and_the_warning_points_at_the_caller(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    key = bare_call("same")[0]
    for unit, answer in (("game-1", "heads"), ("game-2", "tails")):
        ledger = PinLedger(store, types, unit_id=unit)
        ledger.resolve(key, kind="model_call", effect=lambda a=answer: a, interpret=identity)
        ledger.commit()
    path = write_recording(tmp_path / "run.jsonl", store.read(), header=HEADER)
    # The warning points past the library, at whoever built the replay. (Which frame exactly cannot be asserted:
    # under mutmut a trampoline frame sits in between.)
    with warnings.catch_warnings(record=True) as from_events:
        warnings.simplefilter("always")
        replay = ReplayPins.from_events(store.read(), types)
    with warnings.catch_warnings(record=True) as from_recording:
        warnings.simplefilter("always")
        streamed = ReplayPins.from_recording(path, types, provenance="ignore")
    for caught in (from_events, from_recording):
        (warning,) = [w for w in caught if issubclass(w.category, AmbiguousPinWarning)]
        assert warning.filename != replay_module.__file__
        assert str(warning.message) == (
            "1 key(s) were pinned with different results by different units; resolving one raises AmbiguousPin"
            " (replay one unit with unit_id=... to answer it exactly)"
        )
    for built in (replay, streamed):
        with pytest.raises(AmbiguousPin) as raised:
            built.resolve(key, kind="model_call", effect=never, interpret=identity)
        assert (raised.value.key, raised.value.unit_ids) == (key, ["game-1", "game-2"])


def two_units(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    recorded(store, types, unit_id="first")
    ledger = PinLedger(store, types, unit_id="second")
    ledger.resolve(bare_call("other")[0], kind="model_call", effect=lambda: "other answer", interpret=str)
    ledger.commit()


def test_each_source_replays_one_unit_and_records_a_miss_into_the_ledger(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    two_units(store, types)
    # Not pins: another built-in event, and one of another namespace that this registry does not know.
    # from_store reads only the pins, by namespace and type, so never has to decode these.
    abandoned = PinLedger(store, types, unit_id="given-up")
    abandoned.resolve(bare_call("lost")[0], kind="model_call", effect=lambda: "lost", interpret=str)
    abandoned.abandon(reason="the test gives it up")
    store.append([PendingEvent(namespace="demo", type="pin_promoted", schema_version=1, payload='{"x":1}')])
    path = write_recording(tmp_path / "run.jsonl", store.read(), header=HEADER)
    sources = {
        "store": lambda **options: ReplayPins.from_store(store, types, **options),
        "recording": lambda **options: ReplayPins.from_recording(path, types, provenance="ignore", **options),
    }
    for name, build in sources.items():
        assert build(unit_id="second").units == ("second",), name
        ledger = PinLedger(store, types, unit_id=f"rerun-{name}")
        replay = build(unit_id="first", on_miss="record", into=ledger)
        assert replay.into is ledger
        key, fp = bare_call("new")
        assert replay.resolve(key, kind="model_call", effect=lambda: "drawn", interpret=identity, fingerprint=fp) == (
            "drawn"
        )
        assert [pin.key for pin in ledger.pins()] == [key]
        ledger.abandon(reason="done")


def test_each_source_reads_pins_through_the_upcasts_it_is_given(store: SQLiteEventStore, tmp_path: Path) -> None:
    registry = registry_of(PinPromotedV3)
    upcasts = UpcastRegistry()
    upcasts.add(BUILTIN_NAMESPACE, "pin_promoted", from_version=2, step=kinds_renamed)
    key = bare_call("one")[0]
    payload = {"attempts": 1, "failed": False, "fingerprint": None, "key": key, "kind": "llm", "raw": 1, "unit_id": "u"}
    store.append(
        [PendingEvent(namespace=BUILTIN_NAMESPACE, type="pin_promoted", schema_version=2, payload=json.dumps(payload))]
    )
    path = write_recording(tmp_path / "run.jsonl", store.read(), header=HEADER)
    for replay in (
        ReplayPins.from_events(store.read(), registry, upcasts=upcasts),
        ReplayPins.from_store(store, registry, upcasts=upcasts),
        ReplayPins.from_recording(path, registry, upcasts=upcasts, provenance="ignore"),
    ):
        assert replay.unused() == {key: "model_call"}


def test_a_recording_replay_checks_provenance_as_asked(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    recorded(store, types)
    path = write_recording(tmp_path / "run.jsonl", store.read(), header=HEADER)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    header["provenance"]["pydantic_ai"] = "0.0.1"
    path.write_text(json.dumps(header) + "\n" + "".join(lines[1:]), encoding="utf-8")
    with pytest.raises(ProvenanceMismatch):
        ReplayPins.from_recording(path, types, provenance="strict")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(ReplayPins.from_recording(path, types, provenance="ignore")) == 2
    with pytest.warns(ProvenanceWarning):
        ReplayPins.from_recording(path, types)


class PlainCodec:
    """Pins a ValueError as its message, and rebuilds it."""

    def describe(self, error: BaseException) -> JSONValue | None:
        return {"message": str(error)} if isinstance(error, ValueError) else None

    def rebuild(self, record: JSONValue) -> BaseException:
        assert isinstance(record, dict)
        return ValueError(record["message"])


def shout(raw: JSONValue) -> str:
    return str(raw).upper()


def recorded_pair(store: SQLiteEventStore, types: EventTypeRegistry) -> list[Any]:
    ledger = PinLedger(store, types, unit_id="first")
    for prompt in ("one", "two"):
        key, fp = bare_call(prompt)
        ledger.resolve(key, kind="model_call", effect=lambda p=prompt: f"answer to {p}", interpret=str, fingerprint=fp)
    ledger.commit()
    return list(store.read())


def test_a_miss_answered_by_aresolve_in_record_mode_is_pinned_with_its_kind_and_fingerprint(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(recorded_pair(store, types), types, on_miss="record", into=ledger)

    async def fresh() -> str:
        return "fresh answer to TWO"

    async def run() -> list[str]:
        answers = []
        for prompt in ("one", "TWO"):
            key, fp = bare_call(prompt)
            answers.append(await replay.aresolve(key, kind="model_call", effect=fresh, interpret=shout, fingerprint=fp))
        return answers

    assert asyncio.run(run()) == ["ANSWER TO ONE", "FRESH ANSWER TO TWO"]
    decoded = [types.decode(e) for e in ledger.commit()]
    adopted, diverged, drawn = decoded
    assert isinstance(adopted, PinPromoted) and adopted.key == bare_call("one")[0]
    assert isinstance(diverged, ReplayDiverged) and diverged.key == bare_call("TWO")[0]
    assert diverged.moved == ("messages[0]",) and diverged.after_hits == 1
    assert isinstance(drawn, PinPromoted)
    assert (drawn.unit_id, drawn.key, drawn.kind, drawn.raw, drawn.fingerprint, drawn.failed) == (
        "rerun",
        bare_call("TWO")[0],
        "model_call",
        "fresh answer to TWO",
        bare_call("TWO")[1],
        False,
    )


def test_a_failure_drawn_by_aresolve_in_record_mode_is_pinned_through_the_codec(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(recorded_pair(store, types), types, on_miss="record", into=ledger)
    key, fp = bare_call("THREE")

    async def refuse() -> str:
        raise ValueError("the provider refused")

    with pytest.raises(ValueError, match="the provider refused"):
        asyncio.run(
            replay.aresolve(key, kind="model_call", effect=refuse, interpret=str, fingerprint=fp, failure=PlainCodec())
        )

    [*_, drawn] = [types.decode(e) for e in ledger.commit()]
    assert isinstance(drawn, PinPromoted)
    assert (drawn.key, drawn.kind, drawn.failed, drawn.raw) == (
        key,
        "model_call",
        True,
        {"error": {"message": "the provider refused"}},
    )


GOOD: dict[str, Any] = {
    "attempts": 1,
    "fingerprint": {"messages[0]": "d1"},
    "key": "p1:model_call:k",
    "kind": "model_call",
    "raw": {"text": "The UK holds firm."},
    "unit_id": "u1",
}


def with_(**change: Any) -> str:
    payload = {**GOOD, **change}
    return json.dumps({name: value for name, value in payload.items() if value is not ...})


def test_a_sound_pin_replays() -> None:
    replay = ReplayPins.from_events([stored(with_())], EventTypeRegistry())
    assert replay.resolve("p1:model_call:k", kind="model_call", effect=object, interpret=lambda raw: raw) == {
        "text": "The UK holds firm."
    }


@pytest.mark.parametrize("fingerprint", [{"messages[0]": "d1"}, None, ...])
def test_a_pin_stored_as_canonical_text_replays_its_raw_result_exactly(fingerprint: object) -> None:
    # Canonical text is what the store holds: replay cuts the raw result out of it instead of re-encoding it.
    raw = {"text": "The UK holds firm.", "tonnes": [1, 2.5, None], "é": {"b": 1, "a": 2}}
    replay = ReplayPins.from_events(
        [stored(canonical_json(json.loads(with_(raw=raw, fingerprint=fingerprint))))], EventTypeRegistry()
    )
    assert replay.resolve("p1:model_call:k", kind="model_call", effect=object, interpret=lambda r: r) == raw


def test_a_corrupt_pin_is_refused_when_replay_reads_a_store(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        store.append(
            [
                PendingEvent(
                    namespace=BUILTIN_NAMESPACE,
                    type="pin_promoted",
                    schema_version=PinPromoted.schema_version,
                    payload=with_(attempts="1"),
                )
            ]
        )
        with pytest.raises(CorruptEvent, match="attempts must be an integer"):
            ReplayPins.from_store(store, EventTypeRegistry())


def test_a_pin_without_a_fingerprint_replays() -> None:
    replay = ReplayPins.from_events([stored(with_(fingerprint=...))], EventTypeRegistry())
    assert "p1:model_call:k" in replay


CORRUPT = {
    "payload not JSON": ("{not json", "payload is not JSON"),
    "payload not an object": ("[1, 2]", "payload is not a JSON object"),
    "unknown field": (with_(extra=1), "unknown fields \\['extra'\\]"),
    "no unit_id": (with_(unit_id=...), "lacks \\['unit_id'\\]"),
    "no key": (with_(key=...), "lacks \\['key'\\]"),
    "no kind": (with_(kind=...), "lacks \\['kind'\\]"),
    "no raw": (with_(raw=...), "lacks \\['raw'\\]"),
    "no attempts": (with_(attempts=...), "lacks \\['attempts'\\]"),
    "unit_id not a string": (with_(unit_id=1), "unit_id, key and kind must be strings"),
    "key not a string": (with_(key=None), "unit_id, key and kind must be strings"),
    "kind not a string": (with_(kind=["model_call"]), "unit_id, key and kind must be strings"),
    "attempts a bool": (with_(attempts=True), "attempts must be an integer"),
    "attempts a float": (with_(attempts=1.0), "attempts must be an integer"),
    "attempts a string": (with_(attempts="1"), "attempts must be an integer"),
    "fingerprint a list": (with_(fingerprint=["d1"]), "fingerprint must be an object of strings"),
    "fingerprint a string": (with_(fingerprint="d1"), "fingerprint must be an object of strings"),
    "fingerprint digest not a string": (with_(fingerprint={"messages[0]": 1}), "fingerprint must be an object"),
}


@pytest.mark.parametrize(("payload", "message"), CORRUPT.values(), ids=CORRUPT.keys())
def test_a_corrupt_pin_is_refused_on_the_fast_path(payload: str, message: str) -> None:
    with pytest.raises(CorruptEvent, match=message) as raised:
        ReplayPins.from_events([stored(payload)], EventTypeRegistry())
    assert raised.value.seq == 7


def test_the_fast_path_reads_a_sound_pin_as_validation_does() -> None:
    event = stored(with_())
    assert PinPromoted.read(event, EventTypeRegistry()) == EventTypeRegistry().decode(event)


def test_a_held_pin_is_answered_counted_and_adopted_as_any_pin(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Issue #43: a run-level pin (an id, a place, a clock) is answered on replay without the path `resolve` takes;
    # it is still a hit, used, and adopted into the new unit, and a miss is still a miss.
    record(store, types, ["one", "two"])
    events = list(store.read())
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(events, types, on_miss="record", into=ledger)
    one, two = call("one")[0], call("two")[0]
    assert replay.resolve_held(one, kind="model_call", effect=never, interpret=identity) == "answer to one"
    assert (
        asyncio.run(replay.aresolve_held(two, kind="model_call", effect=never, interpret=identity)) == "answer to two"
    )
    assert (replay.hits, replay.unused()) == (2, {})
    assert [PinPromoted.read(event, types).key for event in ledger.commit()] == [one, two]
    strict = ReplayPins.from_events(events, types)
    with pytest.raises(PinMiss):
        strict.resolve_held(call("three")[0], kind="model_call", effect=never, interpret=identity)
    with pytest.raises(PinMiss):
        asyncio.run(strict.aresolve_held(call("three")[0], kind="model_call", effect=never, interpret=identity))
    assert strict.hits == 0
