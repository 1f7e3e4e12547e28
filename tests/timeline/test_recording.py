"""Recordings on disk: round-trips, byte-identical re-recording, typed errors for corrupt files, upcasting."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

from anagrapheus.errors import RecordingError, UsageError
from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.events import Event, EventTypeRegistry, PinPromoted, StoredEvent
from anagrapheus.timeline.recording import (
    RECORDING_FORMAT,
    RECORDING_VERSION,
    WHOLE_FINGERPRINTS_VERSION,
    RecordingHeader,
    read_recording,
    write_recording,
)
from anagrapheus.timeline.resolving.replay import ReplayPins
from anagrapheus.timeline.stores.sqlite import SQLiteEventStore
from anagrapheus.timeline.upcast import UpcastRegistry
from tests.timeline.sample_recording import unsealed

HEADER = RecordingHeader(
    description="Two offers and their pins, for the recording tests.",
    recorded_with="hand-written events appended to a fresh store; no model involved",
    rerecord="pytest tests/test_recording.py",
    models={"eu": "function:scripted-eu"},
    details={"rounds": 2},
)


class OfferMade(Event):
    namespace: ClassVar[str] = "demo"
    event_type: ClassVar[str] = "offer_made"
    schema_version: ClassVar[int] = 1

    party: str
    tonnes: int


class OfferMadeV2(Event):
    """The same event after its payload gained a species; v1 offers were all for cod."""

    namespace: ClassVar[str] = "demo"
    event_type: ClassVar[str] = "offer_made"
    schema_version: ClassVar[int] = 2

    party: str
    tonnes: int
    species: str


def registry_v1() -> EventTypeRegistry:
    types = EventTypeRegistry()
    types.register(OfferMade)
    return types


def registry_v2() -> EventTypeRegistry:
    types = EventTypeRegistry()
    types.register(OfferMadeV2)
    return types


def deterministic_store(path: Path) -> SQLiteEventStore:
    """A store whose clock and event ids are derived from a counter, as a re-recording needs."""
    counter = itertools.count(1)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ticks = itertools.count()
    return SQLiteEventStore(
        path,
        clock=lambda: start + timedelta(milliseconds=next(ticks)),
        new_event_id=lambda: f"00000000-0000-7000-8000-{next(counter):012d}",
    )


def append_run(store: SQLiteEventStore, types: EventTypeRegistry) -> list[StoredEvent]:
    """Append a small mixed log: domain events interleaved with pins."""
    pending = [
        types.encode(OfferMade(party="EU", tonnes=1200)),
        types.encode(
            PinPromoted(
                unit_id="round-1", key="p1:model_call:" + "a" * 64, kind="model_call", raw={"text": "é"}, attempts=2
            ),
            correlation_id="round-1",
        ),
        types.encode(OfferMade(party="UK", tonnes=900)),
        types.encode(
            PinPromoted(unit_id="round-1", key="p1:tool_call:" + "b" * 64, kind="tool_call", raw=[1, 2.5], attempts=1),
            correlation_id="round-1",
        ),
    ]
    return store.append(pending)


def record(tmp: Path, name: str, *, pins_only: bool = False) -> Path:
    types = registry_v1()
    with deterministic_store(tmp / f"{name}.db") as store:
        append_run(store, types)
        events = store.read(namespace="anagrapheus", type="pin_promoted") if pins_only else store.read()
        return write_recording(tmp / f"{name}.jsonl", events, header=HEADER)


def test_round_trip_returns_the_stored_events_and_header(tmp_path: Path) -> None:
    types = registry_v1()
    with SQLiteEventStore(tmp_path / "run.db") as store:
        appended = append_run(store, types)
        path = write_recording(tmp_path / "run.jsonl", store.read(), header=HEADER)

    recording = read_recording(path, registry=types)

    assert recording.header.model_copy(update={"provenance": None}) == HEADER
    assert list(recording.events) == appended
    assert recording.decode(types)[0] == OfferMade(party="EU", tonnes=1200)


def test_each_line_is_the_logs_canonical_serialisation(tmp_path: Path) -> None:
    types = registry_v1()
    with SQLiteEventStore(tmp_path / "run.db") as store:
        appended = append_run(store, types)
        path = write_recording(tmp_path / "run.jsonl", store.read(), header=HEADER, compact_lines=False)

    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    # Lines whole, and no pin here has a fingerprint to write as a delta: one a reader before version 3 reads.
    assert (header["format"], header["version"]) == (RECORDING_FORMAT, WHOLE_FINGERPRINTS_VERSION)
    assert header["rerecord"] == HEADER.rerecord
    assert lines[1:] == [canonical_json(event.to_json()) for event in appended]
    assert path.read_bytes().endswith(b"\n")


def test_rerecording_an_unchanged_run_is_byte_identical(tmp_path: Path) -> None:
    first = record(tmp_path, "first")
    second = record(tmp_path, "second")

    assert first.read_bytes() == second.read_bytes()


def test_a_pin_only_recording_is_byte_identical_and_holds_only_pins(tmp_path: Path) -> None:
    first = record(tmp_path, "first", pins_only=True)
    second = record(tmp_path, "second", pins_only=True)

    assert first.read_bytes() == second.read_bytes()
    events = read_recording(first).events
    assert [event.type for event in events] == ["pin_promoted", "pin_promoted"]


def test_rewriting_replaces_the_file_and_leaves_no_temporary_behind(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("an older recording\n")
    with SQLiteEventStore(tmp_path / "run.db") as store:
        append_run(store, registry_v1())
        write_recording(path, store.read(), header=HEADER)

    assert read_recording(path).header.model_copy(update={"provenance": None}) == HEADER
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("run.db")) == ["run.jsonl"]


def test_writing_events_out_of_seq_order_is_refused(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        events = append_run(store, registry_v1())

    with pytest.raises(UsageError, match="increasing seq"):
        write_recording(tmp_path / "run.jsonl", [events[1], events[0]], header=HEADER)


def test_an_empty_event_stream_is_a_valid_recording(tmp_path: Path) -> None:
    path = write_recording(tmp_path / "empty.jsonl", [], header=HEADER)

    assert read_recording(path).events == ()


# Corrupt files: each kind names its file and line.


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def _write(path: Path, lines: list[str], *, final_newline: bool = True) -> None:
    path.write_text("\n".join(unsealed(lines)) + ("\n" if final_newline else ""), encoding="utf-8")


def cut_mid_line(path: Path) -> int:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])
    return len(_lines(path)) + 1


def drop_final_newline(path: Path) -> int:
    path.write_bytes(path.read_bytes()[:-1])
    return len(_lines(path)) + 1


def malformed_json(path: Path) -> int:
    lines = _lines(path)
    lines[2] = lines[2][:-1]
    _write(path, lines)
    return 3


def blank_line(path: Path) -> int:
    lines = _lines(path)
    lines.insert(2, "")
    _write(path, lines)
    return 3


def not_an_object(path: Path) -> int:
    lines = _lines(path)
    lines[1] = "[1, 2, 3]"
    _write(path, lines)
    return 2


def missing_envelope_field(path: Path) -> int:
    lines = _lines(path)
    event = json.loads(lines[3])
    del event["created_at"]
    lines[3] = json.dumps(event)
    _write(path, lines)
    return 4


def wrong_field_type(path: Path) -> int:
    lines = _lines(path)
    event = json.loads(lines[2])
    event["seq"] = "2"
    lines[2] = json.dumps(event)
    _write(path, lines)
    return 3


def missing_header(path: Path) -> int:
    _write(path, _lines(path)[1:])
    return 1


def empty_file(path: Path) -> int:
    path.write_bytes(b"")
    return 1


def foreign_header(path: Path) -> int:
    lines = _lines(path)
    lines[0] = json.dumps({"format": "vcr.cassette", "version": 1})
    _write(path, lines)
    return 1


def unknown_version(path: Path) -> int:
    lines = _lines(path)
    header = json.loads(lines[0])
    header["version"] = RECORDING_VERSION + 1
    lines[0] = json.dumps(header)
    _write(path, lines)
    return 1


def unknown_header_field(path: Path) -> int:
    lines = _lines(path)
    header = json.loads(lines[0])
    header["recorded_by_whom"] = "?"
    lines[0] = json.dumps(header)
    _write(path, lines)
    return 1


def swapped_lines(path: Path) -> int:
    lines = _lines(path)
    lines[2], lines[3] = lines[3], lines[2]
    _write(path, lines)
    return 4


def repeated_line(path: Path) -> int:
    lines = _lines(path)
    lines.insert(3, lines[2])
    _write(path, lines)
    return 4


def not_utf8(path: Path) -> int:
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"EU", b"E\xff")
    path.write_bytes(b"\n".join(lines))
    return 2


def nan_in_payload(path: Path) -> int:
    lines = _lines(path)
    lines[1] = lines[1].replace('"tonnes":1200', '"tonnes":NaN')
    _write(path, lines)
    return 2


CORRUPTIONS: dict[str, tuple[Callable[[Path], int], str]] = {
    "cut mid-line": (cut_mid_line, "truncated"),
    "no final newline": (drop_final_newline, "truncated"),
    "malformed JSON": (malformed_json, "not valid JSON"),
    "blank line": (blank_line, "not valid JSON"),
    "not an object": (not_an_object, "not a JSON object"),
    "missing envelope field": (missing_envelope_field, "missing \\['created_at'\\]"),
    "wrong field type": (wrong_field_type, "seq must be a positive integer"),
    "missing header": (missing_header, "missing header"),
    "empty file": (empty_file, "missing header"),
    "foreign header": (foreign_header, "foreign file"),
    "unknown version": (unknown_version, f"unknown recording format version {RECORDING_VERSION + 1}"),
    "unknown header field": (unknown_header_field, "malformed header"),
    "swapped lines": (swapped_lines, "out of order"),
    "repeated line": (repeated_line, "out of order"),
    "not UTF-8": (not_utf8, "not UTF-8"),
    "NaN in payload": (nan_in_payload, "not valid JSON"),
}


READERS: dict[str, Callable[[Path], object]] = {
    "read_recording": read_recording,
    # Streamed: each line is checked when the replay reaches it, with the same error.
    "ReplayPins.from_recording": lambda path: ReplayPins.from_recording(path, EventTypeRegistry()),
}


@pytest.mark.parametrize("read", READERS.values(), ids=READERS.keys())
@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_corrupt_recording_raises_recording_error_naming_file_and_line(
    tmp_path: Path, corrupt: tuple[Callable[[Path], int], str], read: Callable[[Path], object]
) -> None:
    mutate, message = corrupt
    path = record(tmp_path, "run")
    line = mutate(path)

    with pytest.raises(RecordingError, match=message) as raised:
        read(path)

    assert raised.value.line == line
    assert raised.value.path == str(path)
    assert str(raised.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize("read", READERS.values(), ids=READERS.keys())
def test_a_missing_file_is_a_recording_error(tmp_path: Path, read: Callable[[Path], object]) -> None:
    with pytest.raises(RecordingError, match="cannot read") as raised:
        read(tmp_path / "nowhere.jsonl")

    assert raised.value.line is None


def test_an_event_type_the_registry_does_not_know_is_refused_at_its_line(tmp_path: Path) -> None:
    path = record(tmp_path, "run")
    types = EventTypeRegistry()

    read_recording(path)  # without a registry the file itself is well formed
    with pytest.raises(RecordingError, match="unknown event type demo:offer_made") as raised:
        read_recording(path, registry=types)

    assert raised.value.line == 2


def test_a_payload_that_does_not_fit_its_event_is_refused_at_its_line(tmp_path: Path) -> None:
    path = record(tmp_path, "run")
    lines = _lines(path)
    lines[2] = lines[2].replace('"attempts":2', '"attempts":"twice"')
    _write(path, lines)

    with pytest.raises(RecordingError, match="does not match PinPromoted") as raised:
        read_recording(path, registry=registry_v1())

    assert raised.value.line == 3


# Upcasting on read.


def upcasts_v1_to_v2() -> UpcastRegistry:
    upcasts = UpcastRegistry()

    @upcasts.register("demo", "offer_made", from_version=1)
    def add_species(payload: dict[str, Any]) -> dict[str, Any]:  # pyright: ignore[reportUnusedFunction]
        return {**payload, "species": "cod"}

    return upcasts


def test_an_old_version_event_in_a_recording_is_upcast_on_read(tmp_path: Path) -> None:
    path = record(tmp_path, "old")  # written by code that knew offer_made v1

    recording = read_recording(path, registry=registry_v2(), upcasts=upcasts_v1_to_v2())

    assert recording.events[0].schema_version == 1  # history as written, never rewritten
    decoded = recording.decode(registry_v2(), upcasts=upcasts_v1_to_v2())
    assert decoded[0] == OfferMadeV2(party="EU", tonnes=1200, species="cod")
    assert decoded[2] == OfferMadeV2(party="UK", tonnes=900, species="cod")


def test_an_old_version_without_its_upcast_is_refused_at_its_line(tmp_path: Path) -> None:
    path = record(tmp_path, "old")

    with pytest.raises(RecordingError, match="no upcast registered for demo:offer_made v1 -> v2") as raised:
        read_recording(path, registry=registry_v2())

    assert raised.value.line == 2


def test_a_version_newer_than_the_code_is_refused_at_its_line(tmp_path: Path) -> None:
    types = registry_v2()
    with SQLiteEventStore(tmp_path / "new.db") as store:
        store.append([types.encode(OfferMadeV2(party="EU", tonnes=1, species="hake"))])
        path = write_recording(tmp_path / "new.jsonl", store.read(), header=HEADER)

    with pytest.raises(RecordingError, match="newer than the registered version 1") as raised:
        read_recording(path, registry=registry_v1())

    assert raised.value.line == 2


def test_an_upcast_step_that_trips_over_an_old_payload_is_reported_at_its_line(tmp_path: Path) -> None:
    path = record(tmp_path, "old")
    upcasts = UpcastRegistry()

    @upcasts.register("demo", "offer_made", from_version=1)
    def expects_a_field_v1_never_had(payload: dict[str, Any]) -> dict[str, Any]:  # pyright: ignore[reportUnusedFunction]
        return {**payload, "species": payload["stock"]}

    with pytest.raises(RecordingError, match="decoding demo:offer_made v1 failed: KeyError") as raised:
        read_recording(path, registry=registry_v2(), upcasts=upcasts)

    assert (raised.value.path, raised.value.line) == (str(path), 2)
    assert isinstance(raised.value.__cause__, KeyError)


def test_writing_one_event_twice_is_refused(tmp_path: Path) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        first, second, *_ = append_run(store, registry_v1())
    clash = dataclasses.replace(second, event_id=first.event_id)
    with pytest.raises(UsageError, match="appears twice"):
        write_recording(tmp_path / "run.jsonl", [first, clash], header=HEADER)


def test_a_replay_streamed_from_a_recording_answers_as_one_built_from_its_events(tmp_path: Path) -> None:
    path = record(tmp_path, "run")
    types = registry_v2()
    streamed = ReplayPins.from_recording(path, types)
    built = ReplayPins.from_events(read_recording(path).events, types)
    keys = [e.payload_json()["key"] for e in read_recording(path).events if e.type == "pin_promoted"]
    assert keys and len(streamed) == len(built) == len(set(keys))
    for key in keys:
        answer = streamed.resolve(key, kind="model_call", effect=lambda: None, interpret=lambda raw: raw)
        assert answer == built.resolve(key, kind="model_call", effect=lambda: None, interpret=lambda raw: raw)


def test_a_streamed_replay_names_the_line_of_a_corrupt_pin_and_upcasts_old_ones(tmp_path: Path) -> None:
    key = "p1:model_call:" + "0" * 64
    lines = [
        json.dumps(
            {"format": "anagrapheus.recording", "version": 1, "description": "d", "recorded_with": "r", "rerecord": "x"}
        ),
        canonical_json(
            StoredEvent(
                1,
                "e1",
                "anagrapheus",
                "pin_promoted",
                1,
                None,
                None,
                "t",
                f'{{"attempts":1,"key":"{key}","kind":"model_call","raw":"old","unit_id":"u"}}',
            ).to_json()
        ),
        canonical_json(
            StoredEvent(
                2,
                "e2",
                "anagrapheus",
                "pin_promoted",
                1,
                None,
                None,
                "t",
                '{"attempts":"one","key":"k","kind":"model_call","raw":1,"unit_id":"u"}',
            ).to_json()
        ),
    ]
    path = tmp_path / "pins.jsonl"
    _write(path, lines[:2])

    # Version 1 pins upcast to version 2 (failed=False) through the built-in step, with no upcasts= given.
    replay = ReplayPins.from_recording(path, EventTypeRegistry())
    assert replay.resolve(key, kind="model_call", effect=lambda: None, interpret=lambda raw: raw) == "old"

    _write(path, lines)
    # A version 1 line is validated through the upcast: pydantic names the field.
    with pytest.raises(RecordingError, match="attempts") as raised:
        ReplayPins.from_recording(path, EventTypeRegistry())
    assert raised.value.line == 3
