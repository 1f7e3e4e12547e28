"""Reading a recording's pins fast: only pins streamed, each current pin as parsed, old ones upcast, refusals named."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import ClassVar

import pytest

from anagrapheus.errors import CorruptEvent, RecordingError
from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.events import EventTypeRegistry, PinPromoted, StoredEvent, events_of
from anagrapheus.timeline.provenance import ProvenanceWarning
from anagrapheus.timeline.recording import read_recording, stream_pins, write_recording
from anagrapheus.timeline.upcast import UpcastRegistry
from tests.timeline.sample_recording import HEADER, edited, lines_of, logged_events, rewrite


def test_only_pins_are_kept_and_streamed(tmp_path: Path, recording: Path) -> None:
    events = logged_events(tmp_path / "again.db")
    assert [e.seq for e in events_of(events, PinPromoted)] == [1, 3]
    _, pins = stream_pins(recording, EventTypeRegistry())
    assert [pin.key for pin in pins] == ["p1:model_call:1", "p1:tool_call:2"]


def test_a_corrupt_current_pin_in_a_stream_names_the_file_line_and_seq(recording: Path) -> None:
    edited(recording, 4, payload={"unit_id": "u1", "key": "k", "kind": "tool_call", "raw": 2, "attempts": "two"})
    _, pins = stream_pins(recording, EventTypeRegistry())
    with pytest.raises(RecordingError) as raised:
        list(pins)
    assert (raised.value.path, raised.value.line) == (str(recording), 4)
    assert isinstance(raised.value.__cause__, CorruptEvent) and raised.value.__cause__.seq == 3


def test_a_stream_of_pins_without_the_builtin_events_names_the_seq(recording: Path) -> None:
    _, pins = stream_pins(recording, EventTypeRegistry(builtins=False))
    with pytest.raises(RecordingError) as raised:
        list(pins)
    assert (raised.value.path, raised.value.line) == (str(recording), 2)
    assert "seq 1" in str(raised.value)


def test_an_old_pin_in_a_stream_names_the_file_and_line_of_a_payload_it_cannot_write(recording: Path) -> None:
    line = json.loads(lines_of(recording)[3])
    line["schema_version"] = 1
    line["payload"] = {"unit_id": "u1", "key": "k", "kind": "tool_call", "raw": "\ud800", "attempts": 1}
    rewrite(recording, 4, json.dumps(line))
    _, pins = stream_pins(recording, EventTypeRegistry())
    with pytest.raises(RecordingError) as raised:
        list(pins)
    assert (raised.value.path, raised.value.line) == (str(recording), 4)
    # Named once: the file and line do not come twice.
    assert str(raised.value).startswith(f"{recording}:4: payload cannot be written canonically (")


def test_a_current_pin_in_a_stream_is_read_as_parsed_never_written_out_again(recording: Path) -> None:
    line = json.loads(lines_of(recording)[3])
    line["payload"]["raw"] = "\ud800"
    rewrite(recording, 4, json.dumps(line))
    _, pins = stream_pins(recording, EventTypeRegistry())
    with pytest.raises(RecordingError) as raised:
        list(pins)
    # The pin's own check refuses its raw; the payload as a whole was never written out to canonical JSON.
    assert (raised.value.path, raised.value.line) == (str(recording), 4)
    assert "lone surrogate" in str(raised.value) and "payload cannot be written canonically" not in str(raised.value)


class PinPromotedV3(PinPromoted):
    """A later version of the pin, as a registry made with `builtins=False` may hold."""

    schema_version: ClassVar[int] = 3

    origin: str


def test_old_pins_in_a_stream_are_upcast_through_the_upcasts_given(recording: Path) -> None:
    types = EventTypeRegistry(builtins=False)
    types.register(PinPromotedV3, _builtin=True)
    upcasts = UpcastRegistry()
    upcasts.add("anagrapheus", "pin_promoted", from_version=2, step=lambda payload: {**payload, "origin": "v2"})
    _, pins = stream_pins(recording, types, upcasts=upcasts)
    assert [pin.key for pin in pins] == ["p1:model_call:1", "p1:tool_call:2"]


def test_a_stream_of_pins_checks_provenance_as_asked(recording: Path) -> None:
    header = json.loads(lines_of(recording)[0])
    header["provenance"]["anagrapheus"] = "0.0.1"
    rewrite(recording, 1, json.dumps(header))
    with pytest.raises(RecordingError, match=re.escape("recorded with anagrapheus 0.0.1")) as raised:
        stream_pins(recording, EventTypeRegistry(), provenance="strict")
    assert raised.value.path == str(recording)
    with pytest.warns(ProvenanceWarning, match=f"^{re.escape(str(recording))}: recorded with anagrapheus 0.0.1"):
        read_recording(recording)


def test_only_pins_report_the_models_of_a_recording(tmp_path: Path) -> None:
    response = {"kind": "response", "model_name": "not-a-pin", "parts": []}
    lookalike = StoredEvent(1, "e1", "demo", "pin_promoted", 1, None, None, "t", canonical_json({"raw": response}))
    path = write_recording(tmp_path / "run.jsonl", [lookalike], header=HEADER)
    provenance = read_recording(path).header.provenance
    assert provenance is not None and provenance.models == ()
