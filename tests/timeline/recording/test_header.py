"""A recording's header line: each type check refuses its own bad value, and each refusal is named in full.

A check that accepted `"version": true` (a bool is an int in Python) would let a file that is not a recording
replay as one; every case edits one field of a valid file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import RecordingError, UsageError
from anagrapheus.timeline.recording import RECORDING_FORMAT, read_recording, write_recording
from tests.timeline.sample_recording import edit, lines_of, refused, refused_like, rewrite


def test_a_header_that_is_no_json_is_refused_at_line_1(recording: Path) -> None:
    rewrite(recording, 1, "{")
    with pytest.raises(RecordingError) as raised:
        read_recording(recording)
    assert (raised.value.path, raised.value.line) == (str(recording), 1)
    assert str(raised.value).startswith(f"{recording}:1: line is not valid JSON (")


def test_header_refusals_in_full(recording: Path) -> None:
    header = json.loads(lines_of(recording)[0])
    rewrite(recording, 1, lines_of(recording)[1])
    refused(recording, 1, "missing header: line 1 is an event, not a recording header")
    rewrite(recording, 1, json.dumps({key: value for key, value in header.items() if key != "format"}))
    refused(recording, 1, "missing header: line 1 has no format marker")
    rewrite(recording, 1, json.dumps({**header, "version": 5}))
    refused(recording, 1, "unknown recording format version 5; this anagrapheus reads versions 1, 2, 3, 4")


def test_each_problem_of_a_malformed_header_is_named_by_its_field(recording: Path) -> None:
    header = json.loads(lines_of(recording)[0])
    rewrite(recording, 1, json.dumps({**header, "description": 7, "models": {"eu": 1}}))
    refused(
        recording,
        1,
        "malformed header: description: Input should be a valid string; models.eu: Input should be a valid string",
    )


def test_a_header_mapping_with_two_problems_names_both(tmp_path: Path) -> None:
    fields = {"description": 7, "recorded_with": "w", "rerecord": "r", "models": {"eu": 1}}
    with pytest.raises(UsageError) as raised:
        write_recording(tmp_path / "run.jsonl", [], header=fields)
    assert str(raised.value) == (
        "header= is not a recording header: description: Input should be a valid string;"
        " models.eu: Input should be a valid string"
    )


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
def test_the_header_version_must_be_the_integer_this_code_reads(two_pins: Path, version: object, why: str) -> None:
    edit(two_pins, 1, {"version": version})
    refused_like(two_pins, 1, "unknown recording format version")


def test_the_header_without_a_version_is_refused(two_pins: Path) -> None:
    edit(two_pins, 1, {"version": ...})
    refused_like(two_pins, 1, "unknown recording format version None")


def test_the_header_format_must_be_the_recording_format(two_pins: Path) -> None:
    edit(two_pins, 1, {"format": RECORDING_FORMAT.upper()})
    refused_like(two_pins, 1, "foreign file")


def test_a_header_without_a_format_is_refused(two_pins: Path) -> None:
    edit(two_pins, 1, {"format": ...})
    refused_like(two_pins, 1, "missing header: line 1 has no format marker")


def test_an_event_on_the_header_line_is_named_as_such(two_pins: Path) -> None:
    lines = two_pins.read_text(encoding="utf-8").split("\n")
    two_pins.write_text("\n".join(lines[1:]), encoding="utf-8")
    refused_like(two_pins, 1, "line 1 is an event, not a recording header")


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
def test_each_header_field_is_type_checked(two_pins: Path, change: dict[str, Any]) -> None:
    edit(two_pins, 1, change)
    refused_like(two_pins, 1, "malformed header")
