"""A recording's lines as read: each within the line limit, UTF-8 and newline-ended, each event line checked."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anagrapheus.errors import AnagrapheusError, RecordingError
from anagrapheus.timeline.canonical import JSONValue, stored_json_of_parsed
from anagrapheus.timeline.events import StoredEvent
from anagrapheus.timeline.recording.compact import restore_compact
from anagrapheus.timeline.recording.strict_json import parse_object

__all__ = ["EVENT_FIELDS", "MAX_LINE_BYTES", "checked_entries", "is_int", "read_lines", "stored_event"]

MAX_LINE_BYTES = 256 * 1024 * 1024
"""The longest recording line read by default (256 MiB); a longer one is refused naming its line number."""

EVENT_FIELDS = frozenset(
    (
        "seq",
        "event_id",
        "namespace",
        "type",
        "schema_version",
        "causation_id",
        "correlation_id",
        "created_at",
        "payload",
    )
)
"""The envelope fields of a recording line, as `StoredEvent.to_json` writes them."""


def read_lines(source: Path, where: str, limit: int, data: bytes | None = None) -> Iterator[tuple[int, str]]:
    """Each line's number and text, refusing one longer than `limit` bytes unread, not UTF-8, or cut short."""
    try:
        with io.BytesIO(data) if data is not None else source.open("rb") as lines:
            number = 0
            # At most the limit and its newline are read, so a huge line costs the limit, never the line.
            while raw := lines.readline(limit + 1):
                number += 1
                if len(raw) > limit and not (len(raw) == limit + 1 and raw.endswith(b"\n")):
                    message = f"line is longer than {limit} bytes (max_line_bytes); refused unread"
                    raise RecordingError(message, path=where, line=number)
                # A recording ends with a newline, so a last line without one was cut short.
                if not raw.endswith(b"\n"):
                    raise RecordingError("truncated: the last line has no newline", path=where, line=number)
                try:
                    text = raw[:-1].decode("utf-8")
                except UnicodeDecodeError as e:
                    message = f"line is not UTF-8 ({e.reason} at byte {e.start})"
                    raise RecordingError(message, path=where, line=number) from None
                yield number, text
    except OSError as e:
        raise RecordingError(f"cannot read the recording ({e.strerror or e})", path=where) from e


def is_int(value: object) -> bool:
    """Whether `value` is an integer and not a bool (JSON has no booleans that count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _event_fields(text: str, *, where: str, line: int) -> dict[str, Any]:
    """Parse and check one event line; the payload stays parsed."""
    fields = parse_object(text, where=where, line=line)
    if fields.keys() != EVENT_FIELDS and fields.keys() < EVENT_FIELDS:
        # A pin or a run's inputs written compact (a version 4 recording): what it leaves out is put back.
        restore_compact(fields, frozenset(EVENT_FIELDS - fields.keys()), where=where, line=line)
    if fields.keys() != EVENT_FIELDS:
        missing = sorted(EVENT_FIELDS - fields.keys())
        extra = sorted(fields.keys() - EVENT_FIELDS)
        detail = "; ".join(
            part for part in (f"missing {missing}" if missing else "", f"unexpected {extra}" if extra else "") if part
        )
        raise RecordingError(f"not a stored event: {detail}", path=where, line=line)
    seq, version, payload = fields["seq"], fields["schema_version"], fields["payload"]
    if not is_int(seq) or seq < 1:
        raise RecordingError(f"seq must be a positive integer, not {seq!r}", path=where, line=line)
    if not is_int(version) or version < 1:
        raise RecordingError(f"schema_version must be a positive integer, not {version!r}", path=where, line=line)
    for name in ("event_id", "namespace", "type", "created_at"):
        if not isinstance(fields[name], str):
            raise RecordingError(f"{name} must be a string", path=where, line=line)
    for name in ("causation_id", "correlation_id"):
        if fields[name] is not None and not isinstance(fields[name], str):
            raise RecordingError(f"{name} must be a string or null", path=where, line=line)
    if not isinstance(payload, dict):
        raise RecordingError("payload must be a JSON object", path=where, line=line)
    return fields


def stored_event(fields: dict[str, Any], *, where: str, line: int) -> StoredEvent:
    """The stored event a checked line holds, its payload written back as canonical JSON text."""
    payload: dict[str, JSONValue] = fields["payload"]
    try:
        payload_text = stored_json_of_parsed(payload)
    except AnagrapheusError as e:
        raise RecordingError(f"payload cannot be written canonically ({e})", path=where, line=line) from None
    return StoredEvent(
        seq=fields["seq"],
        event_id=fields["event_id"],
        namespace=fields["namespace"],
        type=fields["type"],
        schema_version=fields["schema_version"],
        causation_id=fields["causation_id"],
        correlation_id=fields["correlation_id"],
        created_at=fields["created_at"],
        payload=payload_text,
    )


def checked_entries(lines: Iterator[tuple[int, str]], where: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Each event line's number, text and checked fields, in a file whose seqs increase and event ids are unique."""
    seen_ids: dict[str, int] = {}
    last_seq = 0
    for number, text in lines:
        fields = _event_fields(text, where=where, line=number)
        seq, event_id = fields["seq"], fields["event_id"]
        if seq <= last_seq:
            raise RecordingError(
                f"seq {seq} does not follow seq {last_seq}: lines out of order or repeated", path=where, line=number
            )
        if event_id in seen_ids:
            raise RecordingError(
                f"event id {event_id} already appears on line {seen_ids[event_id]}", path=where, line=number
            )
        last_seq = seq
        seen_ids[event_id] = number
        yield number, text, fields
