"""ReplayPins from each source (events, a store, a recording) with every option it takes; failed pins replayed.

Each source hands `unit_id`, `upcasts`, `on_miss` and `into` on; a failed pin is raised again through the
caller's failure codec on every path (`resolve`, `aresolve`, `resolve_stream`) and adopted as failed in record mode.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import AmbiguousPin, PinMiss, PinnedFailure, ProvenanceMismatch, UsageError
from anagrapheus.timeline import (
    EventTypeRegistry,
    PinLedger,
    PinPromoted,
    ProvenanceWarning,
    ReplayPins,
    SQLiteEventStore,
    StoredEvent,
    UpcastRegistry,
    fingerprint_of,
    pin_key,
)
from anagrapheus.timeline import replay as replay_module
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.events import BUILTIN_NAMESPACE, PendingEvent
from anagrapheus.timeline.recording import RecordingHeader, write_recording
from anagrapheus.timeline.replay import AmbiguousPinWarning

from .test_events_pin_codec import PinPromotedV3, kinds_renamed, registry_of

HEADER = RecordingHeader(
    description="Pins for the replay source tests.",
    recorded_with="ledgers over a fresh store; no model involved",
    rerecord="pytest tests/test_replay_sources.py",
)


class Codec:
    """Pins a ValueError as its message, and rebuilds it."""

    def describe(self, error: BaseException) -> JSONValue | None:
        return {"message": str(error)} if isinstance(error, ValueError) else None

    def rebuild(self, record: JSONValue) -> BaseException:
        assert isinstance(record, dict)
        return ValueError(f"rebuilt: {record['message']}")


def call(prompt: str) -> tuple[str, dict[str, str]]:
    material = {"model": "scripted-uk", "messages": [prompt]}
    return pin_key("model_call", material), fingerprint_of(material)


def never() -> Any:
    raise AssertionError("the effect must not run under replay")


def identity(raw: JSONValue) -> JSONValue:
    return raw


def refuse(message: str) -> Any:
    raise ValueError(message)


def recorded(store: SQLiteEventStore, types: EventTypeRegistry, *, unit_id: str = "first") -> list[StoredEvent]:
    """One unit: a pin that answered "answer to one", and one whose draw failed with ValueError("no quota")."""
    ledger = PinLedger(store, types, unit_id=unit_id)
    key, fp = call("one")
    ledger.resolve(key, kind="model_call", effect=lambda: "answer to one", interpret=str, fingerprint=fp)
    key, fp = call("two")
    with pytest.raises(ValueError, match="no quota"):
        ledger.resolve(
            key, kind="model_call", effect=lambda: refuse("no quota"), interpret=str, fingerprint=fp, failure=Codec()
        )
    return list(ledger.commit())


def test_a_failed_pin_is_raised_again_through_the_codec_on_every_path(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    replay = ReplayPins.from_events(recorded(store, types), types)
    key = call("two")[0]
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
            replay.resolve(call(prompt)[0], kind="model_call", effect=never, interpret=identity, failure=Codec())
    adopted = [PinPromoted.read(event, types) for event in ledger.commit()]
    assert [(pin.key, pin.failed, pin.fingerprint) for pin in adopted] == [
        (call("one")[0], False, call("one")[1]),
        (call("two")[0], True, call("two")[1]),
    ]


def test_a_miss_in_record_mode_is_drawn_with_its_fingerprint_and_failure_codec(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types, unit_id="rerun")
    replay = ReplayPins.from_events(recorded(store, types), types, on_miss="record", into=ledger)
    key, fp = call("THREE")
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
                call("two")[0], kind="model_call", effect=effect, capture=identity, interpret=identity, failure=Codec()
            ):
                pass
        key, fp = call("streamed")
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
        call("streamed")[0],
        "model_call",
        True,
        call("streamed")[1],
    )
    assert drawn.raw == {"captured": "half", "error": {"message": "cut off"}}


def test_unused_lists_the_recorded_keys_no_resolve_asked_for(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    replay = ReplayPins.from_events(recorded(store, types), types)
    assert replay.unused() == {call("one")[0]: "model_call", call("two")[0]: "model_call"}
    replay.resolve(call("one")[0], kind="model_call", effect=never, interpret=identity)
    assert replay.unused() == {call("two")[0]: "model_call"}
    assert replay.units == ("first",)


def test_an_empty_replay_is_strict_by_default() -> None:
    replay = ReplayPins({})
    assert (len(replay), replay.units, replay.into) == (0, (), None)
    with pytest.raises(PinMiss):
        replay.resolve(call("one")[0], kind="model_call", effect=never, interpret=identity)


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
    key = call("same")[0]
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
    ledger.resolve(call("other")[0], kind="model_call", effect=lambda: "other answer", interpret=str)
    ledger.commit()


def test_each_source_replays_one_unit_and_records_a_miss_into_the_ledger(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    two_units(store, types)
    # Not pins: another built-in event, and one of another namespace that this registry does not know.
    # from_store reads only the pins, by namespace and type, so never has to decode these.
    abandoned = PinLedger(store, types, unit_id="given-up")
    abandoned.resolve(call("lost")[0], kind="model_call", effect=lambda: "lost", interpret=str)
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
        key, fp = call("new")
        assert replay.resolve(key, kind="model_call", effect=lambda: "drawn", interpret=identity, fingerprint=fp) == (
            "drawn"
        )
        assert [pin.key for pin in ledger.pins()] == [key]
        ledger.abandon(reason="done")


def test_each_source_reads_pins_through_the_upcasts_it_is_given(store: SQLiteEventStore, tmp_path: Path) -> None:
    registry = registry_of(PinPromotedV3)
    upcasts = UpcastRegistry()
    upcasts.add(BUILTIN_NAMESPACE, "pin_promoted", from_version=2, step=kinds_renamed)
    key = call("one")[0]
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
