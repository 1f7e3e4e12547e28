"""Each type check of a recording's header and event lines refuses its own bad value, by its own test.

A check that accepted `"version": true` (a bool is an int in Python) or a repeated event id would
let a file that is not a recording replay as one; every case here edits one field of a valid file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import RecordingError
from anagrapheus.timeline.events import EventTypeRegistry, PinPromoted
from anagrapheus.timeline.recording import RECORDING_FORMAT, RecordingHeader, read_recording, write_recording
from anagrapheus.timeline.sqlite import SQLiteEventStore

HEADER = RecordingHeader(
    description="Two pins, for the type checks of a recording's lines.",
    recorded_with="hand-written pins appended to a fresh store; no model involved",
    rerecord="pytest tests/test_recording_checks.py",
)


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    types = EventTypeRegistry()
    with SQLiteEventStore(tmp_path / "run.db") as store:
        store.append(
            [
                types.encode(
                    PinPromoted(unit_id="u1", key=f"p1:model_call:{n}", kind="model_call", raw=n, attempts=1),
                    correlation_id="u1",
                )
                for n in range(2)
            ]
        )
        return write_recording(tmp_path / "run.jsonl", store.read(), header=HEADER)


def edit(path: Path, line: int, change: dict[str, Any]) -> None:
    """Set the fields of `change` on the JSON object at 1-based `line` (a value of `...` deletes the field)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    fields = json.loads(lines[line - 1])
    for name, value in change.items():
        if value is ...:
            del fields[name]
        else:
            fields[name] = value
    lines[line - 1] = json.dumps(fields)
    path.write_text("\n".join(lines), encoding="utf-8")


def refused(path: Path, line: int, message: str) -> None:
    # Matched literally: a regex escape in a parameter would put a backslash in the test's id, and pytest
    # escapes such an id once more on every run in one process, so mutmut's second run could not find it.
    with pytest.raises(RecordingError, match=re.escape(message)) as raised:
        read_recording(path)
    assert (raised.value.path, raised.value.line) == (str(path), line)


def test_the_unedited_recording_reads(recording: Path) -> None:
    assert [e.seq for e in read_recording(recording).events] == [1, 2]


@pytest.mark.parametrize(
    ("version", "why"),
    [
        (True, "a bool is an int in Python, and True == 1"),
        ("1", "a string"),
        (None, "null"),
        (99, "a version this code does not read"),
        (0, "no version 0 was ever written"),
    ],
)
def test_the_header_version_must_be_the_integer_this_code_reads(recording: Path, version: object, why: str) -> None:
    edit(recording, 1, {"version": version})
    refused(recording, 1, "unknown recording format version")


def test_the_header_without_a_version_is_refused(recording: Path) -> None:
    edit(recording, 1, {"version": ...})
    refused(recording, 1, "unknown recording format version None")


def test_the_header_format_must_be_the_recording_format(recording: Path) -> None:
    edit(recording, 1, {"format": RECORDING_FORMAT.upper()})
    refused(recording, 1, "foreign file")


def test_a_header_without_a_format_is_refused(recording: Path) -> None:
    edit(recording, 1, {"format": ...})
    refused(recording, 1, "missing header: line 1 has no format marker")


def test_an_event_on_the_header_line_is_named_as_such(recording: Path) -> None:
    lines = recording.read_text(encoding="utf-8").split("\n")
    recording.write_text("\n".join(lines[1:]), encoding="utf-8")
    refused(recording, 1, "line 1 is an event, not a recording header")


@pytest.mark.parametrize(
    "change",
    [
        {"description": 7},
        {"recorded_with": None},
        {"rerecord": ["pytest"]},
        {"models": {"eu": 1}},
        {"models": ["eu"]},
        {"details": "rounds"},
        {"description": ...},
    ],
    ids=str,
)
def test_each_header_field_is_type_checked(recording: Path, change: dict[str, Any]) -> None:
    edit(recording, 1, change)
    refused(recording, 1, "malformed header")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seq": True}, "seq must be a positive integer"),
        ({"seq": 0}, "seq must be a positive integer"),
        ({"seq": -1}, "seq must be a positive integer"),
        ({"schema_version": True}, "schema_version must be a positive integer"),
        ({"schema_version": 0}, "schema_version must be a positive integer"),
        ({"schema_version": "1"}, "schema_version must be a positive integer"),
        ({"event_id": 1}, "event_id must be a string"),
        ({"namespace": None}, "namespace must be a string"),
        ({"type": ["pin_promoted"]}, "type must be a string"),
        ({"created_at": 0}, "created_at must be a string"),
        ({"causation_id": 1}, "causation_id must be a string or null"),
        ({"correlation_id": {"u": 1}}, "correlation_id must be a string or null"),
        ({"payload": "{}"}, "payload must be a JSON object"),
        ({"payload": None}, "payload must be a JSON object"),
        ({"payload": [1]}, "payload must be a JSON object"),
        ({"created_at": ...}, "missing ['created_at']"),
        ({"extra": 1}, "unexpected ['extra']"),
    ],
    ids=str,
)
def test_each_event_field_is_type_checked(recording: Path, change: dict[str, Any], message: str) -> None:
    edit(recording, 3, change)
    refused(recording, 3, message)


def test_a_null_causation_and_correlation_id_read(recording: Path) -> None:
    edit(recording, 3, {"causation_id": None, "correlation_id": None})
    assert read_recording(recording).events[1].correlation_id is None


def test_a_duplicate_event_id_is_refused_even_in_seq_order(recording: Path) -> None:
    first = json.loads(recording.read_text(encoding="utf-8").split("\n")[1])
    edit(recording, 3, {"event_id": first["event_id"]})
    refused(recording, 3, f"event id {first['event_id']} already appears on line 2")
