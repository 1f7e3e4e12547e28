"""A recording file to the letter: each refusal's message, file and line; the line limit; dead writers' leftovers.

The other recording tests match a word of each message; these pin the message down, so a refusal that
names the wrong file or line, or says something else, fails here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import tracemalloc
from pathlib import Path
from typing import ClassVar

import pytest

from anagrapheus.errors import CorruptEvent, RecordingError, SecretInRecording, UsageError
from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.events import EventTypeRegistry, PinPromoted, PinsAbandoned, StoredEvent, events_of
from anagrapheus.timeline.provenance import ProvenanceWarning
from anagrapheus.timeline.recording import (
    RecordingHeader,
    read_recording,
    stream_pins,
    stream_recording,
    write_recording,
)
from anagrapheus.timeline.sqlite import SQLiteEventStore
from anagrapheus.timeline.upcast import UpcastRegistry

HEADER = RecordingHeader(
    description="Two pins and an abandoned unit, for the refusals of a recording to the letter.",
    recorded_with="hand-written events appended to a fresh store; no model involved",
    rerecord="pytest tests/test_recording_files.py",
)

# No process has this id: it is beyond every system's largest pid.
DEAD_PID = 2**31 - 1


def logged_events(path: Path) -> list[StoredEvent]:
    """A pin, an abandoned unit's summary, then another pin, as a store logs them."""
    types = EventTypeRegistry()
    with SQLiteEventStore(path) as store:
        store.append(
            [
                types.encode(
                    PinPromoted(unit_id="u1", key="p1:model_call:1", kind="model_call", raw=1, attempts=1),
                    correlation_id="u1",
                ),
                types.encode(
                    PinsAbandoned(unit_id="u0", reason="a test", pins=()), causation_id="c0", correlation_id="u0"
                ),
                types.encode(
                    PinPromoted(unit_id="u1", key="p1:tool_call:2", kind="tool_call", raw=[2], attempts=1),
                    correlation_id="u1",
                ),
            ]
        )
        return list(store.read())


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    return write_recording(tmp_path / "run.jsonl", logged_events(tmp_path / "run.db"), header=HEADER)


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def rewrite(path: Path, number: int, text: str) -> None:
    """Put `text` on 1-based line `number`."""
    lines = lines_of(path)
    lines[number - 1] = text
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def edited(path: Path, number: int, **fields: object) -> None:
    line = json.loads(lines_of(path)[number - 1])
    line.update(fields)
    rewrite(path, number, json.dumps(line))


def refused(path: Path, line: int | None, message: str, **options: object) -> RecordingError:
    with pytest.raises(RecordingError) as raised:
        read_recording(path, **options)  # pyright: ignore[reportArgumentType]
    where = str(path) if line is None else f"{path}:{line}"
    assert str(raised.value) == f"{where}: {message}"
    assert (raised.value.path, raised.value.line) == (str(path), line)
    return raised.value


def test_the_events_read_back_are_the_events_written(tmp_path: Path) -> None:
    events = logged_events(tmp_path / "run.db")
    path = write_recording(tmp_path / "run.jsonl", events, header=HEADER)
    assert read_recording(path).events == tuple(events)
    assert list(stream_recording(path)[1]) == events
    assert events[1].causation_id == "c0"


# Each refusal of a line, in full.


def test_a_line_that_is_no_object_is_refused_in_full(recording: Path) -> None:
    rewrite(recording, 3, "[1]")
    refused(recording, 3, "line is not a JSON object")


def test_a_payload_that_is_no_object_is_refused_in_full(recording: Path) -> None:
    edited(recording, 2, payload=[1])
    refused(recording, 2, "payload must be a JSON object")


def test_a_name_given_twice_in_one_object_is_refused_naming_it(recording: Path) -> None:
    rewrite(recording, 2, lines_of(recording)[1].replace('"unit_id":"u1"}', '"unit_id":"u1","key":"again"}'))
    refused(recording, 2, "line is not valid JSON (the name 'key' appears twice in one object)")


def test_a_nan_is_refused_as_no_json_number(recording: Path) -> None:
    rewrite(recording, 4, lines_of(recording)[3].replace('"raw":[2]', '"raw":[NaN]'))
    refused(recording, 4, "line is not valid JSON (NaN is not a JSON number)")


def test_a_line_nested_too_deeply_is_refused_naming_it(recording: Path) -> None:
    rewrite(recording, 3, "[" * 100_000 + "]" * 100_000)
    refused(recording, 3, "line is nested too deeply to read")
    rewrite(recording, 1, "[" * 100_000 + "]" * 100_000)
    refused(recording, 1, "line is nested too deeply to read")


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
    rewrite(recording, 1, json.dumps({**header, "version": 3}))
    refused(recording, 1, "unknown recording format version 3; this anagrapheus reads versions 1, 2")


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


def test_a_missing_file_is_refused_naming_it_and_why(tmp_path: Path) -> None:
    refused(tmp_path / "nowhere.jsonl", None, "cannot read the recording (No such file or directory)")


def test_a_recording_that_cannot_be_written_is_refused_naming_it_and_why(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").mkdir()
    (tmp_path / "run.jsonl" / "inside").write_text("a directory in the way")
    with pytest.raises(RecordingError) as raised:
        write_recording(tmp_path / "run.jsonl", [], header=HEADER)
    assert (raised.value.path, raised.value.line) == (str(tmp_path / "run.jsonl"), None)
    assert str(raised.value) == f"{tmp_path / 'run.jsonl'}: cannot write the recording (Is a directory)"
    # The temporary file beside it is gone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_events_with_one_seq_are_refused_on_write(tmp_path: Path) -> None:
    first, second, _ = logged_events(tmp_path / "run.db")
    with pytest.raises(UsageError, match="seq 1 follows seq 1"):
        write_recording(tmp_path / "run.jsonl", [first, dataclasses.replace(second, seq=1)], header=HEADER)


# Decoding and streams: the file and line of what they refuse, and only pins in a stream of pins.


def test_a_decode_failure_names_the_file_and_line(recording: Path) -> None:
    edited(recording, 4, type="unheard_of")
    with pytest.raises(RecordingError) as raised:
        read_recording(recording, registry=EventTypeRegistry())
    assert (raised.value.path, raised.value.line) == (str(recording), 4)
    assert read_recording(recording).path == recording


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


# The line limit: a line of the limit is read, one byte more is refused unread.


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


# A killed writer's temporary file is cleared by the next write; a live writer's, or another file's, is not.


def test_the_next_write_clears_only_the_leftovers_of_writers_that_died(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        leftovers = {
            "dead writer": f".run.jsonl.{DEAD_PID}.abc.tmp",
            "live writer": f".run.jsonl.{sleeper.pid}.abc.tmp",
            "this process": f".run.jsonl.{os.getpid()}.abc.tmp",
            "no pid": ".run.jsonl.abc.tmp",
            "another recording": f".other.jsonl.{DEAD_PID}.abc.tmp",
            "not a temporary file": f".run.jsonl.{DEAD_PID}.abc.part",
        }
        for name in leftovers.values():
            (tmp_path / name).write_text("half a recording")
        write_recording(tmp_path / "run.jsonl", [], header=HEADER)
        left = {p.name for p in tmp_path.iterdir()}
        assert left == {"run.jsonl", *leftovers.values()} - {leftovers["dead writer"]}
        # Asking whether the live writer is alive sent it no signal.
        sleeper.terminate()
        assert sleeper.wait() == -signal.SIGTERM
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_leftover_of_another_users_writer_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As root every process may be signalled; another user's live process answers with EPERM otherwise.
    def kill(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    leftover = tmp_path / f".run.jsonl.{DEAD_PID}.abc.tmp"
    leftover.write_text("half a recording")
    monkeypatch.setattr(os, "kill", kill)
    write_recording(tmp_path / "run.jsonl", [], header=HEADER)
    assert leftover.exists()


def test_a_secret_is_refused_naming_the_recording_not_written(tmp_path: Path) -> None:
    header = {**HEADER.model_dump(), "details": {"endpoint": "https://user:hunter2hunter2@example.com/x"}}
    with pytest.raises(SecretInRecording) as raised:
        write_recording(tmp_path / "run.jsonl", [], header=header)
    assert raised.value.path == str(tmp_path / "run.jsonl")


def test_a_recording_is_written_beside_its_target_in_a_file_the_next_write_can_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What sits in the folder while the data reaches the disk: what a writer killed at that moment leaves.
    seen: list[list[str]] = []
    fsync = os.fsync

    def watched(fd: int) -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", watched)
    write_recording(tmp_path / "run.jsonl", [], header=HEADER)
    (temporary,) = seen[0]
    assert temporary.startswith(f".run.jsonl.{os.getpid()}.") and temporary.endswith(".tmp")
