"""Reading a recording: the header checked for provenance, then each event line checked, at once or as iterated."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

from anagrapheus.deprecation import deprecated
from anagrapheus.errors import AnagrapheusError, RecordingError, RecordingExpired, UsageError
from anagrapheus.timeline.ages import UnitAge, expired, unit_ages
from anagrapheus.timeline.events import Event, EventTypeRegistry, StoredEvent, given_or_builtins
from anagrapheus.timeline.provenance import ProvenanceCheck, Stamping, check_provenance
from anagrapheus.timeline.recording.deltas import expanded
from anagrapheus.timeline.recording.header import RecordingHeader, header_line, paused_collection, read_header
from anagrapheus.timeline.recording.lines import MAX_LINE_BYTES, checked_entries, read_lines, stored_event
from anagrapheus.timeline.recording.seal import SEAL_DETAIL, Seal, SealCheck, read_seal, verified
from anagrapheus.timeline.secrets import SecretFinding, SecretScanner
from anagrapheus.timeline.upcast import UpcastRegistry

__all__ = ["Recording", "open_recording", "read_recording", "stream_recording"]


@dataclass(frozen=True, slots=True)
class Recording:
    """A recording read from disk: its header and its events exactly as stored (not yet upcast)."""

    path: Path
    """The file it was read from."""
    header: RecordingHeader
    """The header line."""
    events: tuple[StoredEvent, ...]
    """The events in file order; event N sits on line N + 1."""
    seal: Seal | None = None
    """The seal the file holds (None: unsealed); kept apart from `header`, whose `details` never show it."""

    def ages(self, *, now: datetime | None = None) -> dict[str, UnitAge]:
        """When each unit was recorded (the last instant its runs were given) and how old it is; see `unit_ages`."""
        return unit_ages(self.events, now=now)

    def decode(
        self, registry: EventTypeRegistry | None = None, *, upcasts: UpcastRegistry | None = None
    ) -> list[Event]:
        """Decode every event into its current class, upcasting old ones (`registry`: the built-ins by default)."""
        types = given_or_builtins(registry)
        decoded: list[Event] = []
        for line, stored in enumerate(self.events, start=2):
            try:
                decoded.append(types.decode(stored, upcasts=upcasts))
            except AnagrapheusError as e:
                raise RecordingError(str(e), path=str(self.path), line=line) from e
            except (LookupError, ValueError, TypeError) as e:
                # An upcast step is application code; one that trips over an old payload still names the line.
                message = f"decoding {stored.namespace}:{stored.type} v{stored.schema_version} failed: {e!r}"
                raise RecordingError(message, path=str(self.path), line=line) from e
        return decoded

    def find_secrets(
        self, scanner: SecretScanner | None = None, *, policy: SecretScanner | None = None
    ) -> list[SecretFinding]:
        """Every credential-shaped string in the header or the events, found by `scanner` (the default rules if None).

        `policy=` is the name `scanner` had until 0.2.0: kept for one release, with a warning.
        """
        if policy is not None:
            if scanner is not None:
                raise UsageError("give scanner= alone: policy= is its old name")
            deprecated("Recording.find_secrets(policy=...)", "pass the scanner as `scanner=` (or first)")
            scanner = policy
        rules = SecretScanner() if scanner is None else scanner
        found = list(rules.scan(header_line(self.header)))
        for event in self.events:
            found.extend(rules.scan(event.to_json(), seq=event.seq))
        return found


def read_recording(
    path: str | os.PathLike[str],
    *,
    registry: EventTypeRegistry | None = None,
    upcasts: UpcastRegistry | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    call_policy: object | None = None,
    provenance: ProvenanceCheck = "warn",
    data: bytes | None = None,
    seal: SealCheck = "verify",
    max_age: timedelta | None = None,
    stamping: Stamping | None = None,
) -> Recording:
    """Read a recording, refusing anything malformed with a `RecordingError` that names the file and line.

    With a `registry`, every event is also decoded (through `upcasts`), so an unknown event
    type, a future schema version or a payload that no longer fits is refused here, at its
    line, rather than at replay. The events returned are as stored; replay upcasts them again
    when given the same `upcasts`. A line longer than `max_line_bytes` is refused unread.

    The header's provenance is checked against this process: another key scheme, or another call
    policy than `call_policy` (the default policy if None), raises `ProvenanceMismatch`; another
    anagrapheus or pydantic-ai version warns (`ProvenanceWarning`), or raises with
    `provenance="strict"`. `provenance="ignore"` checks nothing. Version 1 files have no provenance
    and are read as they are. `stamping` says what this process is and which policy is the default
    (the provider layer's if None).

    A sealed recording (see `write_recording`) whose lines no longer match its seal is refused with
    `SealBroken`, naming the first line that does not; `seal="ignore"` reads it as it is. An unsealed
    recording is read as it is.

    With `data`, the recording is those bytes, already read (a pipe can be read only once), and
    `path` only names it in messages. With `max_age`, a unit recorded longer ago (by the instants its runs
    were given: `Recording.ages()`) raises `RecordingExpired`; a unit of unknown date is not judged.
    """
    source = Path(path)
    where = str(path)
    header, sealed, entries = open_recording(
        source, where, max_line_bytes, call_policy, provenance, data=data, seal=seal, stamping=stamping
    )
    events = (stored_event(fields, where=where, line=number) for number, fields in entries)
    recording = Recording(path=source, header=header, events=tuple(events), seal=sealed)
    if registry is not None:
        recording.decode(registry, upcasts=upcasts)
    if max_age is not None:
        old = expired(recording.ages(), max_age)
        if old:
            raise RecordingExpired(where, max_age=max_age, units=old, rerecord=header.rerecord)
    return recording


def stream_recording(
    path: str | os.PathLike[str],
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    call_policy: object | None = None,
    provenance: ProvenanceCheck = "warn",
    seal: SealCheck = "verify",
    stamping: Stamping | None = None,
) -> tuple[RecordingHeader, Iterator[StoredEvent]]:
    """Read a recording's header now and its events as they are iterated, one line at a time.

    The events are checked as `read_recording` checks them, each when it is reached; nothing but
    the line in hand is held, so a replay can be built from a file larger than memory allows twice.
    A line longer than `max_line_bytes` is refused with a `RecordingError` naming it, unread.
    The header's provenance is checked at once, and each line against the seal as it is reached, as
    `read_recording` checks them (a unit's lines missing at its end are found once the last line is read).
    """
    where = str(path)
    header, _, entries = open_recording(
        Path(path), where, max_line_bytes, call_policy, provenance, seal=seal, stamping=stamping
    )
    return header, (stored_event(fields, where=where, line=number) for number, fields in entries)


def open_recording(
    source: Path,
    where: str,
    max_line_bytes: int,
    call_policy: object | None,
    provenance: ProvenanceCheck,
    *,
    data: bytes | None = None,
    seal: SealCheck = "verify",
    stamping: Stamping | None = None,
) -> tuple[RecordingHeader, Seal | None, Iterator[tuple[int, dict[str, Any]]]]:
    """Read and check the header now; return it, its seal, and each event line's checked fields, read as iterated.

    Each pin's fingerprint is whole in the fields returned, as the log held it, however the line holds it.

    Each line is checked against the seal as it is read, unless `seal="ignore"` (a seal that cannot be read is
    then None). The header returned holds no seal in its `details`: a header read is the header written.
    """
    given = cast("object", max_line_bytes)
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise UsageError(f"max_line_bytes must be a positive integer, not {max_line_bytes!r}")
    lines = read_lines(source, where, max_line_bytes, data)
    first = next(lines, None)
    if first is None:
        raise RecordingError("empty file: missing header", path=where, line=1)
    header = read_header(first[1], where=where)
    check_provenance(
        header.provenance,
        path=where,
        rerecord=header.rerecord,
        call_policy=call_policy,
        check=provenance,
        stamping=stamping,
    )
    try:
        with paused_collection():
            sealed = read_seal(header.details, where=where)
    except RecordingError:
        if seal != "ignore":
            raise
        sealed = None
    if SEAL_DETAIL in header.details:
        details = {name: value for name, value in header.details.items() if name != SEAL_DETAIL}
        header = header.model_copy(update={"details": details})
    # Each line is checked against the seal as written, then each pin's fingerprint is made whole (`deltas`).
    entries = verified(checked_entries(lines, where), None if seal == "ignore" else sealed, where)
    return header, sealed, expanded(entries, where)
