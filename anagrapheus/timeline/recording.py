"""Recordings: a header line, then the log's own events as canonical JSON lines, in a file for a repository."""

from __future__ import annotations

import glob
import io
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from anagrapheus.deprecation import deprecated
from anagrapheus.errors import AnagrapheusError, RecordingError, SecretInRecording, UsageError
from anagrapheus.timeline.canonical import (
    JSONValue,
    canonical_json,
    canonical_json_of_parsed,
    canonical_number,
    canonical_value,
    encode_normalised,
)
from anagrapheus.timeline.events import (
    BUILTIN_NAMESPACE,
    Event,
    EventTypeRegistry,
    PinPromoted,
    PinText,
    RunInputs,
    StoredEvent,
    events_of,
    given_or_builtins,
    is_current_pin,
)
from anagrapheus.timeline.ordered import read_ordered
from anagrapheus.timeline.provenance import Provenance, ProvenanceCheck, check_provenance, current_provenance
from anagrapheus.timeline.secrets import Redactor, SecretFinding, SecretPolicy, split_private_keys
from anagrapheus.timeline.upcast import UpcastRegistry

__all__ = [
    "MAX_LINE_BYTES",
    "RECORDING_FORMAT",
    "RECORDING_VERSION",
    "Recording",
    "RecordingHeader",
    "pin_events",
    "read_recording",
    "stream_pins",
    "stream_recording",
    "write_recording",
]

RECORDING_FORMAT = "anagrapheus.recording"
"""The format marker on every recording's header line."""

RECORDING_VERSION = 2
"""The recording format version this code writes; version 2 added the header's `provenance`."""

_READABLE_VERSIONS = (1, RECORDING_VERSION)

# The envelope fields of a recording line, as `StoredEvent.to_json` writes them.
_EVENT_FIELDS = frozenset(
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


class RecordingHeader(BaseModel):
    """What a recording says about itself: what run it holds, what recorded it and how to record it again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str
    """What run the recording holds, in a sentence."""
    recorded_with: str
    """How it was recorded: the provider route, or honestly how the models were scripted."""
    rerecord: str
    """The exact command that records it again."""
    models: dict[str, str] = {}
    """The model id behind each role, as it appears in the pin keys."""
    details: dict[str, JsonValue] = {}
    """Anything else the recorder wants a reader of the file to know."""
    provenance: Provenance | None = None
    """What made the recording; `write_recording` stamps it when the header has none (None in version 1 files)."""


@dataclass(frozen=True, slots=True)
class Recording:
    """A recording read from disk: its header and its events exactly as stored (not yet upcast)."""

    path: Path
    """The file it was read from."""
    header: RecordingHeader
    """The header line."""
    events: tuple[StoredEvent, ...]
    """The events in file order; event N sits on line N + 1."""

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

    def find_secrets(self, policy: SecretPolicy | None = None) -> list[SecretFinding]:
        """Every credential-shaped string in the header or the events, under `policy` (the default rules if None)."""
        rules = SecretPolicy() if policy is None else policy
        found = list(rules.scan(_header_line(self.header)))
        for event in self.events:
            found.extend(rules.scan(event.to_json(), seq=event.seq))
        return found


def pin_events(events: Iterable[StoredEvent], *, with_inputs: bool = False) -> Iterator[StoredEvent]:
    """Deprecated: read the pins with `store.read(namespace="anagrapheus", type="pin_promoted")`.

    Yields only the `PinPromoted` events of a stream (and each run's `RunInputs` with `with_inputs=True`).
    """
    deprecated("pin_events", 'read the pins with store.read(namespace="anagrapheus", type="pin_promoted")')
    return events_of(events, PinPromoted, RunInputs) if with_inputs else events_of(events, PinPromoted)


def _header_line(header: RecordingHeader) -> dict[str, JSONValue]:
    return {"format": RECORDING_FORMAT, "version": RECORDING_VERSION, **header.model_dump(mode="json")}


def _as_header(header: RecordingHeader | Mapping[str, Any]) -> RecordingHeader:
    if isinstance(header, RecordingHeader):
        return header
    try:
        return RecordingHeader.model_validate(dict(header))
    except ValidationError as e:
        raise UsageError(f"header= is not a recording header: {_problems(e)}") from None


def _problems(error: ValidationError) -> str:
    """What pydantic found wrong with a header's fields, each as `field.path: message` (a header is always a dict)."""
    return "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in error.errors())


class _LineWriter:
    """Writes one recording's lines: canonical text, redacted where asked, refused where a secret remains."""

    def __init__(self, target: Path, *, redact: SecretPolicy | None, refuse: SecretPolicy | None) -> None:
        self._target = target
        self._redact = redact
        self._redactor: Redactor | None = None if redact is None else redact.redactor()
        self._refuse = refuse
        # Redacting under the very rules the refusal uses (`redact=SecretPolicy()`): a line the redaction's search
        # passes over holds nothing to refuse either, so it is searched once, not twice.
        self._refusal_repeats_redaction = refuse is not None and redact is not None and redact.same_search(refuse)

    def text(self, line: dict[str, JSONValue], *, seq: int | None) -> str:
        # Searched as it is written: canonical text is NFC, which turns a look-alike (U+212A KELVIN SIGN) into the
        # very letter a rule looks for.
        line = cast(dict[str, JSONValue], canonical_value(line))
        text = encode_normalised(line)
        # Each policy first searches the whole line once; only a line that may hold a match is walked.
        if self._redact is not None and self._redactor is not None:
            if not self._redact.may_hold(text):
                return text if self._refusal_repeats_redaction else self._refused(line, text, seq)
            if self._refuse is not None and "-----BEGIN " in text:
                # A key whose END is in another string (`key.splitlines()`) or missing: its body has no shape,
                # so no redaction can find it all. Refused rather than half redacted.
                for finding in split_private_keys(line):
                    raise SecretInRecording(path=str(self._target), seq=seq, json_path=finding.path, rule=finding.rule)
            redacted = self._redactor.redact(line)
            if not isinstance(redacted, dict):  # pragma: no cover - redacting an object returns an object
                raise UsageError("a redacted line is not an object")
            line = redacted
            text = canonical_json(line)
        return self._refused(line, text, seq)

    def _refused(self, line: dict[str, JSONValue], text: str, seq: int | None) -> str:
        """Return `text`, the line as written, once the refusal policy finds nothing in it."""
        if self._refuse is not None:
            for finding in self._refuse.scan(line, text=text):
                raise SecretInRecording(path=str(self._target), seq=seq, json_path=finding.path, rule=finding.rule)
        return text


def _pinned_response(line: dict[str, JSONValue]) -> dict[str, JSONValue] | None:
    """The model response a `pin_promoted` line holds, if its raw result is one."""
    if line["namespace"] != BUILTIN_NAMESPACE or line["type"] != PinPromoted.event_type:
        return None
    payload = line["payload"]
    raw = read_ordered(payload.get("raw")) if isinstance(payload, dict) else None
    return raw if isinstance(raw, dict) and raw.get("kind") == "response" else None


def write_recording(
    path: str | os.PathLike[str],
    events: Iterable[StoredEvent],
    *,
    header: RecordingHeader | Mapping[str, Any],
    redact: SecretPolicy | None = None,
    call_policy: object | None = None,
    mode: int = 0o600,
    dangerously_keep_secrets: bool = False,
) -> Path:
    """Write `header` and `events` as a recording, replacing `path` atomically; return the path.

    Each event is written as the canonical JSON of `StoredEvent.to_json()`, seq and ids as the
    log holds them, so recording an unchanged run against the same ids and clock gives the
    same bytes. Events must come in strictly increasing seq order, as a log yields them.

    A header without provenance gets it stamped (versions, key scheme, `call_policy`'s name and
    version, the models seen in the pins). A credential-shaped string anywhere is refused with
    `SecretInRecording`, unless `redact=` replaces it with a placeholder first; only
    `dangerously_keep_secrets=True` writes it as it is. The file is created with `mode` (owner-only
    by default).
    """
    target = Path(path)
    chosen = _as_header(header)
    writer = _LineWriter(target, redact=redact, refuse=None if dangerously_keep_secrets else SecretPolicy())
    lines: list[str] = []
    responses: list[dict[str, JSONValue]] = []
    last_seq = 0
    event_ids: set[str] = set()
    # Refuse to write what `read_recording` would refuse to read.
    for event in events:
        if event.seq <= last_seq:
            raise UsageError(f"events must come in increasing seq order: seq {event.seq} follows seq {last_seq}")
        if event.event_id in event_ids:
            raise UsageError(f"event id {event.event_id} appears twice")
        last_seq = event.seq
        event_ids.add(event.event_id)
        line = event.to_json()
        response = _pinned_response(line)
        if response is not None:
            responses.append(response)
        lines.append(writer.text(line, seq=event.seq))
    if chosen.provenance is None:
        chosen = chosen.model_copy(update={"provenance": current_provenance(responses, call_policy=call_policy)})
    lines.insert(0, writer.text(_header_line(chosen), seq=None))
    data = "".join(line + "\n" for line in lines).encode()
    try:
        _replace_durably(target, data, mode=mode)
    except OSError as e:
        # A directory in the way, a missing folder, a full disk: named, and typed like every other refusal.
        raise RecordingError(f"cannot write the recording ({e.strerror or e})", path=str(target)) from e
    return target


def _replace_durably(target: Path, data: bytes, *, mode: int) -> None:
    """Write `data` beside `target` and rename it over, so a crash leaves the old file or the new, never half."""
    prefix = f".{target.name}."
    _clear_orphans(target.parent, prefix)
    # The writer's pid is in the name, so a later write can tell a killed writer's leftovers from a live one's.
    fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            # Owner-only unless the caller asks otherwise: a recording holds whatever the run was told and drew.
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # The rename is durable only once the directory entry is.
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _clear_orphans(folder: Path, prefix: str) -> None:
    """Remove the temporary files that writers killed mid-write (SIGKILL, power loss) left beside the target."""
    for leftover in folder.glob(f"{glob.escape(prefix)}*.tmp"):
        pid = leftover.name[len(prefix) :].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    fields = dict(pairs)
    if len(fields) != len(pairs):
        # JSON leaves a repeated name undefined and Python keeps the last: a line must say one thing.
        seen: set[str] = set()
        repeated = next(name for name, _ in pairs if name in seen or seen.add(name))
        raise ValueError(f"the name {repeated!r} appears twice in one object")
    return fields


# Numbers are read as canonical JSON spells them, so a payload is written back by the C encoder. One decoder
# for every line: json.loads with hooks would build a new one per call.
_decode = json.JSONDecoder(
    object_pairs_hook=_object, parse_constant=_refuse_constant, parse_float=canonical_number
).decode

MAX_LINE_BYTES = 256 * 1024 * 1024
"""The longest recording line read by default (256 MiB); a longer one is refused naming its line number."""


def _parse_object(text: str, *, where: str, line: int) -> dict[str, Any]:
    try:
        value = _decode(text)
    except ValueError as e:
        raise RecordingError(f"line is not valid JSON ({e})", path=where, line=line) from None
    except RecursionError:
        raise RecordingError("line is nested too deeply to read", path=where, line=line) from None
    if not isinstance(value, dict):
        raise RecordingError("line is not a JSON object", path=where, line=line)
    return value  # pyright: ignore[reportUnknownVariableType]


def _read_header(text: str, *, where: str) -> RecordingHeader:
    fields = _parse_object(text, where=where, line=1)
    marker = fields.pop("format", None)
    if marker is None:
        if fields.keys() >= _EVENT_FIELDS:
            raise RecordingError("missing header: line 1 is an event, not a recording header", path=where, line=1)
        raise RecordingError("missing header: line 1 has no format marker", path=where, line=1)
    if marker != RECORDING_FORMAT:
        raise RecordingError(f"foreign file: format is {marker!r}, not {RECORDING_FORMAT!r}", path=where, line=1)
    version = fields.pop("version", None)
    if not _is_int(version) or version not in _READABLE_VERSIONS:
        raise RecordingError(
            f"unknown recording format version {version!r}; this anagrapheus reads versions"
            f" {', '.join(map(str, _READABLE_VERSIONS))}",
            path=where,
            line=1,
        )
    try:
        return RecordingHeader.model_validate(fields)
    except ValidationError as e:
        raise RecordingError(f"malformed header: {_problems(e)}", path=where, line=1) from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _event_fields(text: str, *, where: str, line: int) -> dict[str, Any]:
    """Parse and check one event line; the payload stays parsed."""
    fields = _parse_object(text, where=where, line=line)
    if fields.keys() != _EVENT_FIELDS:
        missing = sorted(_EVENT_FIELDS - fields.keys())
        extra = sorted(fields.keys() - _EVENT_FIELDS)
        detail = "; ".join(
            part for part in (f"missing {missing}" if missing else "", f"unexpected {extra}" if extra else "") if part
        )
        raise RecordingError(f"not a stored event: {detail}", path=where, line=line)
    seq, version, payload = fields["seq"], fields["schema_version"], fields["payload"]
    if not _is_int(seq) or seq < 1:
        raise RecordingError(f"seq must be a positive integer, not {seq!r}", path=where, line=line)
    if not _is_int(version) or version < 1:
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


def _stored(fields: dict[str, Any], *, where: str, line: int) -> StoredEvent:
    payload: dict[str, JSONValue] = fields["payload"]
    try:
        payload_text = canonical_json_of_parsed(payload)
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


def read_recording(
    path: str | os.PathLike[str],
    *,
    registry: EventTypeRegistry | None = None,
    upcasts: UpcastRegistry | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    call_policy: object | None = None,
    provenance: ProvenanceCheck = "warn",
    data: bytes | None = None,
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
    and are read as they are.

    With `data`, the recording is those bytes, already read (a pipe can be read only once), and
    `path` only names it in messages.
    """
    source = Path(path)
    where = str(path)
    header, entries = _opened(source, where, max_line_bytes, call_policy, provenance, data=data)
    events = (_stored(fields, where=where, line=number) for number, fields in entries)
    recording = Recording(path=source, header=header, events=tuple(events))
    if registry is not None:
        recording.decode(registry, upcasts=upcasts)
    return recording


def stream_recording(
    path: str | os.PathLike[str],
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    call_policy: object | None = None,
    provenance: ProvenanceCheck = "warn",
) -> tuple[RecordingHeader, Iterator[StoredEvent]]:
    """Read a recording's header now and its events as they are iterated, one line at a time.

    The events are checked as `read_recording` checks them, each when it is reached; nothing but
    the line in hand is held, so a replay can be built from a file larger than memory allows twice.
    A line longer than `max_line_bytes` is refused with a `RecordingError` naming it, unread.
    The header's provenance is checked at once, as `read_recording` checks it.
    """
    where = str(path)
    header, entries = _opened(Path(path), where, max_line_bytes, call_policy, provenance)
    return header, (_stored(fields, where=where, line=number) for number, fields in entries)


def stream_pins(
    path: str | os.PathLike[str],
    registry: EventTypeRegistry | None = None,
    *,
    upcasts: UpcastRegistry | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    call_policy: object | None = None,
    provenance: ProvenanceCheck = "warn",
) -> tuple[RecordingHeader, Iterator[PinText]]:
    """Read a recording's header now and its pins, as texts, as they are iterated (what `ReplayPins` keeps).

    Every line is checked as `read_recording` checks it. A current pin's payload is read from the
    line as parsed, never written out and parsed again; an older one is upcast through `upcasts`.
    The header's provenance is checked at once, as `stream_recording` checks it.
    """
    where = str(path)
    header, entries = _opened(Path(path), where, max_line_bytes, call_policy, provenance)
    return header, _pins(entries, where, given_or_builtins(registry), upcasts)


def _pins(
    entries: Iterator[tuple[int, dict[str, Any]]],
    where: str,
    registry: EventTypeRegistry,
    upcasts: UpcastRegistry | None,
) -> Iterator[PinText]:
    for number, fields in entries:
        if fields["namespace"] != BUILTIN_NAMESPACE or fields["type"] != PinPromoted.event_type:
            continue
        seq = fields["seq"]
        try:
            if is_current_pin(fields["schema_version"], registry, seq=seq):
                yield PinPromoted.text_of_payload(fields["payload"], seq=seq)
            else:
                yield PinPromoted.read_text(_stored(fields, where=where, line=number), registry, upcasts=upcasts)
        except RecordingError:
            raise  # it names the file and line already
        except AnagrapheusError as e:
            raise RecordingError(str(e), path=where, line=number) from e


def _opened(
    source: Path,
    where: str,
    max_line_bytes: int,
    call_policy: object | None,
    provenance: ProvenanceCheck,
    *,
    data: bytes | None = None,
) -> tuple[RecordingHeader, Iterator[tuple[int, dict[str, Any]]]]:
    given = cast("object", max_line_bytes)
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise UsageError(f"max_line_bytes must be a positive integer, not {max_line_bytes!r}")
    lines = _lines(source, where, max_line_bytes, data)
    first = next(lines, None)
    if first is None:
        raise RecordingError("empty file: missing header", path=where, line=1)
    header = _read_header(first[1], where=where)
    check_provenance(header.provenance, path=where, rerecord=header.rerecord, call_policy=call_policy, check=provenance)
    return header, _entries(lines, where)


def _lines(source: Path, where: str, limit: int, data: bytes | None = None) -> Iterator[tuple[int, str]]:
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


def _entries(lines: Iterator[tuple[int, str]], where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each event line's checked fields, in a file whose seqs increase and whose event ids are unique."""
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
        yield number, fields
