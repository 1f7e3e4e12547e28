"""A recording's event lines: each field type-checked, a repeated event id refused, the line limit, a truncated file.

The refusals are pinned to the letter: one that names the wrong file or line, or says something else, fails here.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import RecordingError, UsageError
from anagrapheus.timeline.recording import read_recording, stream_recording
from tests.timeline.sample_recording import HEADER, edit, edited, lines_of, refused, refused_like, rewrite


def test_a_payload_that_is_no_object_is_refused_in_full(recording: Path) -> None:
    edited(recording, 2, payload=[1])
    refused(recording, 2, "payload must be a JSON object")


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"extra": 1}, "unexpected ['extra']"),
        ({"created_at": ...}, "missing ['created_at']"),
        ({"created_at": ..., "extra": 1}, "missing ['created_at']; unexpected ['extra']"),
    ],
    ids=["extra", "missing", "both"],
)
def test_a_line_that_is_no_stored_event_names_what_is_missing_and_what_is_extra(
    recording: Path, change: dict[str, object], detail: str
) -> None:
    line = json.loads(lines_of(recording)[2])
    for name, value in change.items():
        if value is ...:
            del line[name]
        else:
            line[name] = value
    rewrite(recording, 3, json.dumps(line))
    refused(recording, 3, f"not a stored event: {detail}")


def test_a_payload_that_cannot_be_written_canonically_is_refused_at_its_line(recording: Path) -> None:
    # A lone surrogate is valid JSON text but no Unicode string: canonical JSON refuses it.
    rewrite(recording, 3, lines_of(recording)[2].replace('"reason":"a test"', '"reason":"\\ud800"'))
    with pytest.raises(RecordingError) as raised:
        read_recording(recording)
    assert (raised.value.path, raised.value.line) == (str(recording), 3)
    assert str(raised.value).startswith(f"{recording}:3: payload cannot be written canonically (")
    _, events = stream_recording(recording)
    with pytest.raises(RecordingError) as streamed:
        list(events)
    assert (streamed.value.path, streamed.value.line, str(streamed.value)) == (
        str(recording),
        3,
        str(raised.value),
    )


def test_an_empty_file_and_a_truncated_one_are_refused_in_full(recording: Path) -> None:
    data = recording.read_bytes()
    recording.write_bytes(data[:-1])
    refused(recording, 4, "truncated: the last line has no newline")
    recording.write_bytes(b"")
    refused(recording, 1, "empty file: missing header")


def longest_line(path: Path) -> tuple[int, int]:
    """The 1-based number and byte length (without its newline) of the file's longest line."""
    lengths = [len(line) for line in path.read_bytes().split(b"\n")[:-1]]
    longest = max(lengths)
    return lengths.index(longest) + 1, longest


def test_a_line_as_long_as_the_limit_is_read_and_one_byte_longer_is_refused_unread(recording: Path) -> None:
    number, longest = longest_line(recording)
    for limit in (longest, longest + 1, longest + 2):
        assert len(read_recording(recording, max_line_bytes=limit).events) == 3
        header, events = stream_recording(recording, max_line_bytes=limit)
        assert len(list(events)) == 3 and header.description == HEADER.description
    refused(
        recording,
        number,
        f"line is longer than {longest - 1} bytes (max_line_bytes); refused unread",
        max_line_bytes=longest - 1,
    )


def test_a_huge_line_costs_the_limit_never_the_line(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    path.write_bytes(b"x" * 20_000_000 + b"\n")
    tracemalloc.start()
    try:
        with pytest.raises(RecordingError, match="longer than 1000 bytes"):
            read_recording(path, max_line_bytes=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "1000"], ids=repr)
def test_a_limit_that_is_no_positive_integer_is_refused(recording: Path, limit: object) -> None:
    with pytest.raises(UsageError) as raised:
        read_recording(recording, max_line_bytes=limit)  # pyright: ignore[reportArgumentType]
    assert str(raised.value) == f"max_line_bytes must be a positive integer, not {limit!r}"


def test_a_limit_of_one_byte_is_a_limit(recording: Path) -> None:
    refused(recording, 1, "line is longer than 1 bytes (max_line_bytes); refused unread", max_line_bytes=1)


def test_the_unedited_recording_reads(two_pins: Path) -> None:
    assert [e.seq for e in read_recording(two_pins).events] == [1, 2]


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
def test_each_event_field_is_type_checked(two_pins: Path, change: dict[str, Any], message: str) -> None:
    edit(two_pins, 3, change)
    refused_like(two_pins, 3, message)


def test_a_null_causation_and_correlation_id_read(two_pins: Path) -> None:
    edit(two_pins, 3, {"causation_id": None, "correlation_id": None})
    assert read_recording(two_pins).events[1].correlation_id is None


def test_a_duplicate_event_id_is_refused_even_in_seq_order(two_pins: Path) -> None:
    first = json.loads(two_pins.read_text(encoding="utf-8").split("\n")[1])
    edit(two_pins, 3, {"event_id": first["event_id"]})
    refused_like(two_pins, 3, f"event id {first['event_id']} already appears on line 2")
