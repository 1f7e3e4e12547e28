"""A sample recording (two pins and an abandoned unit, or two pins) and the edits the recording tests make to it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from anagrapheus.errors import RecordingError
from anagrapheus.timeline.events import EventTypeRegistry, PinPromoted, PinsAbandoned, StoredEvent
from anagrapheus.timeline.recording import RecordingHeader, read_recording
from anagrapheus.timeline.stores.sqlite import SQLiteEventStore

HEADER = RecordingHeader(
    description="Two pins and an abandoned unit, for the refusals of a recording to the letter.",
    recorded_with="hand-written events appended to a fresh store; no model involved",
    rerecord="pytest tests/timeline/recording/test_lines.py",
)


def promoted(seq: int, raw: Any, *, key: str, fingerprint: dict[str, str] | None = None) -> StoredEvent:
    """A stored `pin_promoted` event of unit `u` answering `key` (a tool call) with `raw`, as a log holds it."""
    payload = PinPromoted(unit_id="u", key=key, kind="tool_call", raw=raw, attempts=1, fingerprint=fingerprint)
    return StoredEvent(
        seq=seq,
        event_id=f"00000000-0000-7000-8000-{seq:012d}",
        namespace="anagrapheus",
        type="pin_promoted",
        schema_version=1,
        causation_id=None,
        correlation_id="u",
        created_at="2026-01-01T00:00:00.000000Z",
        payload=payload.model_dump_json(),
    )


def stored_event(
    seq: int,
    unit: str | None,
    namespace: str,
    kind: str,
    payload: str,
    *,
    version: int = 1,
    causation_id: str | None = None,
) -> StoredEvent:
    """A stored event of `unit` numbered `seq`, with a fixed id and time, as a log holds it."""
    return StoredEvent(
        seq=seq,
        event_id=f"00000000-0000-7000-8000-{seq:012d}",
        namespace=namespace,
        type=kind,
        schema_version=version,
        causation_id=causation_id,
        correlation_id=unit,
        created_at="2026-01-05T09:00:00.000000Z",
        payload=payload,
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


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def unsealed(lines: list[str]) -> list[str]:
    """`lines` with the seal taken out of the header: an edited file then says what a reader says of its edit.

    The seal's own refusals of an edit are tested in test_recording_seal.py.
    """
    try:
        header = json.loads(lines[0])
    except (IndexError, ValueError, RecursionError):
        return lines
    if isinstance(header, dict) and isinstance(header.get("details"), dict) and "seal" in header["details"]:
        del header["details"]["seal"]
        return [json.dumps(header), *lines[1:]]
    return lines


def rewrite(path: Path, number: int, text: str) -> None:
    """Put `text` on 1-based line `number` (of the file, unsealed)."""
    lines = lines_of(path)
    lines[number - 1] = text
    path.write_text("".join(line + "\n" for line in unsealed(lines)), encoding="utf-8")


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


TWO_PINS_HEADER = RecordingHeader(
    description="Two pins, for the type checks of a recording's lines.",
    recorded_with="hand-written pins appended to a fresh store; no model involved",
    rerecord="pytest tests/timeline/recording/test_header.py",
)


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
    path.write_text("\n".join(unsealed(lines)), encoding="utf-8")


def refused_like(path: Path, line: int, message: str) -> None:
    # Matched literally: a regex escape in a parameter would put a backslash in the test's id, and pytest
    # escapes such an id once more on every run in one process, so mutmut's second run could not find it.
    with pytest.raises(RecordingError, match=re.escape(message)) as raised:
        read_recording(path)
    assert (raised.value.path, raised.value.line) == (str(path), line)
