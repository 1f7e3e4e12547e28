"""Typed events, their envelopes, and the registry that encodes and decodes them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import uuid_utils
from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from anagrapheus.errors import CorruptEvent, EventTypeError, FutureSchemaVersion, UnknownEventType, UsageError
from anagrapheus.timeline.canonical import (
    JSONValue,
    encode_normalised,
    stored_json,
    stored_json_of_parsed,
)
from anagrapheus.timeline.upcast import UpcastRegistry

__all__ = [
    "BUILTIN_EVENTS",
    "BUILTIN_NAMESPACE",
    "AbandonedPin",
    "Event",
    "EventTypeRegistry",
    "PendingEvent",
    "PinPromoted",
    "PinText",
    "PinsAbandoned",
    "ReplayDiverged",
    "StoredEvent",
    "events_of",
    "given_or_builtins",
    "new_uuid7",
    "register_builtin_events",
]

BUILTIN_NAMESPACE = "anagrapheus"
"""The namespace reserved for the library's own events."""


def new_uuid7() -> str:
    """Return a fresh UUIDv7 as text: the one source of event ids, unit ids and minted entity ids."""
    return str(uuid_utils.uuid7())


_NAME = re.compile(r"^[a-z][a-z0-9_.\-]*$")
E = TypeVar("E", bound="Event")


class Event(BaseModel):
    """Base of every event: a frozen pydantic model named by (namespace, event_type, schema_version)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: ClassVar[str]
    """Who owns the event type; `anagrapheus` is reserved for built-in events."""
    event_type: ClassVar[str]
    """The event's name within its namespace."""
    schema_version: ClassVar[int] = 1
    """The payload version this class reads and writes."""


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """An encoded event on its way into the log; the store gives it a seq, id and time."""

    namespace: str
    """The event's namespace."""
    type: str
    """The event's type name."""
    schema_version: int
    """The payload's schema version."""
    payload: str
    """The payload as canonical JSON text."""
    causation_id: str | None = None
    """The event id of what caused this event, if any."""
    correlation_id: str | None = None
    """An id shared by every event of one conversation, run or unit."""
    event_id: str | None = None
    """A preset event id; the store mints a UUIDv7 when None."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event as the log holds it: its envelope, its seq and its payload as canonical JSON text."""

    seq: int
    """Gap-free, strictly increasing position in the log."""
    event_id: str
    """The event's UUIDv7."""
    namespace: str
    """The event's namespace."""
    type: str
    """The event's type name."""
    schema_version: int
    """The payload's schema version as written (before any upcast)."""
    causation_id: str | None
    """The event id of what caused this event, if any."""
    correlation_id: str | None
    """An id shared by the events of one conversation, run or unit."""
    created_at: str
    """When it was appended, ISO 8601 in UTC."""
    payload: str
    """The payload as canonical JSON text."""

    def payload_json(self) -> dict[str, JSONValue]:
        """Parse the payload, reporting a malformed one with this event's seq."""
        try:
            value = json.loads(self.payload)
        except ValueError as e:
            raise CorruptEvent(f"payload is not JSON ({e})", seq=self.seq) from None
        if not isinstance(value, dict):
            raise CorruptEvent("payload is not a JSON object", seq=self.seq)
        return value  # pyright: ignore[reportUnknownVariableType]

    def to_json(self) -> dict[str, JSONValue]:
        """Return the envelope and parsed payload as one JSON object (the recording line)."""
        return {
            "seq": self.seq,
            "event_id": self.event_id,
            "namespace": self.namespace,
            "type": self.type,
            "schema_version": self.schema_version,
            "causation_id": self.causation_id,
            "correlation_id": self.correlation_id,
            "created_at": self.created_at,
            "payload": self.payload_json(),
        }


class EventTypeRegistry:
    """Maps (namespace, type) to the event class that reads and writes it at its current version."""

    def __init__(self, *, builtins: bool = True) -> None:
        """Start with the built-in events registered; `builtins=False` leaves them out (to register other versions)."""
        self._by_name: dict[tuple[str, str], type[Event]] = {}
        if builtins:
            for cls in BUILTIN_EVENTS:
                self.register(cls, _builtin=True)

    def register(self, cls: type[E], *, _builtin: bool = False) -> type[E]:
        """Register an event class; usable as a class decorator."""
        namespace = getattr(cls, "namespace", None)
        event_type = getattr(cls, "event_type", None)
        version = getattr(cls, "schema_version", None)
        if not isinstance(namespace, str) or not isinstance(event_type, str):
            raise EventTypeError(f"{cls.__qualname__} must set the class variables namespace and event_type")
        if not _NAME.match(namespace) or not _NAME.match(event_type):
            raise EventTypeError(f"{namespace}:{event_type}: names are lowercase letters, digits, '_', '.', '-'")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise EventTypeError(f"{namespace}:{event_type}: schema_version must be an integer >= 1")
        if namespace == BUILTIN_NAMESPACE and not _builtin:
            raise UsageError(f"the namespace {BUILTIN_NAMESPACE!r} is reserved for built-in events")
        existing = self._by_name.get((namespace, event_type))
        if existing is not None and existing is not cls:
            raise EventTypeError(f"{namespace}:{event_type} is already registered to {existing.__qualname__}")
        self._by_name[(namespace, event_type)] = cls
        return cls

    def lookup(self, namespace: str, event_type: str, *, seq: int | None = None) -> type[Event]:
        """Return the class registered for (namespace, type), or raise `UnknownEventType`."""
        try:
            return self._by_name[(namespace, event_type)]
        except KeyError:
            raise UnknownEventType(namespace, event_type, seq=seq) from None

    def __contains__(self, name: tuple[str, str]) -> bool:
        return name in self._by_name

    def encode(
        self, event: Event, *, causation_id: str | None = None, correlation_id: str | None = None
    ) -> PendingEvent:
        """Encode a registered event into a `PendingEvent` ready to append."""
        cls = type(event)
        if self._by_name.get((cls.namespace, cls.event_type)) is not cls:
            raise UnknownEventType(cls.namespace, cls.event_type)
        return PendingEvent(
            namespace=cls.namespace,
            type=cls.event_type,
            schema_version=cls.schema_version,
            payload=stored_json(event.model_dump(mode="json")),
            causation_id=causation_id,
            correlation_id=correlation_id,
        )

    def decode(self, stored: StoredEvent, *, upcasts: UpcastRegistry | None = None) -> Event:
        """Decode a stored event into its current class, upcasting an old payload one step at a time."""
        cls = self.lookup(stored.namespace, stored.type, seq=stored.seq)
        payload: dict[str, Any] = stored.payload_json()
        version = stored.schema_version
        if version > cls.schema_version:
            raise FutureSchemaVersion(
                stored.namespace, stored.type, version=version, known=cls.schema_version, seq=stored.seq
            )
        if version < cls.schema_version:
            if upcasts is None:
                upcasts = UpcastRegistry()
            payload = upcasts.upcast(stored.namespace, stored.type, payload, version=version, target=cls.schema_version)
        try:
            return cls.model_validate(payload)
        except ValidationError as e:
            raise CorruptEvent(f"payload does not match {cls.__qualname__}: {e}", seq=stored.seq) from None


# Built-in events. Their payloads are part of the recording format: change them only with a new
# schema_version and an upcast.


class PinPromoted(Event):
    """A pin drawn in a unit of work, promoted into the log when the unit committed."""

    namespace: ClassVar[str] = BUILTIN_NAMESPACE
    event_type: ClassVar[str] = "pin_promoted"
    schema_version: ClassVar[int] = 2

    unit_id: str
    """The unit of work that drew the pin."""
    key: str
    """The pin key, `p1:<kind>:<sha256>`."""
    kind: str
    """What was pinned: `model_call`, `tool_call`, `entity_id`, ..."""
    raw: JsonValue
    """The raw JSON-shaped result the effect drew; when `failed`, the failure: `{"error": ..., "captured": ...}`."""
    attempts: int
    """How many times the unit asked for this key (1 = drawn once, never retried)."""
    fingerprint: dict[str, str] | None = None
    """A compact per-field digest of the key material, used to say what moved on a miss."""
    failed: bool = False
    """Whether the draw failed (version 2): `raw` then describes the exception, which replay raises again."""

    # The codec, used by the ledger's commit, replay and recordings: one writer (`payload_text`); one reader of the
    # event (`read`) and one of its texts (`_texts`, behind `read_text` and `text_of_payload`); `result_in` for `raw`.

    @staticmethod
    def payload_text(
        *, unit_id: str, key: str, kind: str, raw: str, attempts: int, fingerprint: str | None, failed: bool = False
    ) -> str:
        """Write the payload from `raw` and `fingerprint` already as canonical JSON text, without re-encoding them.

        Byte-equal to `registry.encode(PinPromoted(...)).payload` (keys in sorted order), so a
        10,000-pin commit does not parse and re-encode every result.
        """
        return (
            f'{{"attempts":{attempts},"failed":{"true" if failed else "false"},"fingerprint":{fingerprint or "null"},'
            f'"key":{stored_json(key)},"kind":{stored_json(kind)},"raw":{raw},'
            f'"unit_id":{stored_json(unit_id)}}}'
        )

    @staticmethod
    def result_in(payload: JSONValue) -> JSONValue:
        """The raw result a parsed payload holds (every version keeps it in `raw`), None when it holds none."""
        return payload.get("raw") if isinstance(payload, dict) else None

    @classmethod
    def read(
        cls, stored: StoredEvent, registry: EventTypeRegistry, *, upcasts: UpcastRegistry | None = None
    ) -> PinPromoted:
        """Decode a stored `pin_promoted`, upcast first; a current-version payload is checked by hand, for speed."""
        payload = _current_payload(stored, registry)
        if payload is None:
            return _decoded(stored, registry, upcasts)
        # Every field checked and `raw` parsed from JSON: validating again would only cost time.
        return cls.model_construct(**payload)

    @classmethod
    def read_text(
        cls, stored: StoredEvent, registry: EventTypeRegistry, *, upcasts: UpcastRegistry | None = None
    ) -> PinText:
        """Read a stored `pin_promoted` as texts, cutting `raw` out of the canonical payload rather than re-encoding."""
        payload = _current_payload(stored, registry)
        if payload is None:
            event = _decoded(stored, registry, upcasts)
            return PinText(
                unit_id=event.unit_id,
                key=event.key,
                kind=event.kind,
                raw_text=stored_json(event.raw),
                attempts=event.attempts,
                fingerprint=None if event.fingerprint is None else stored_json(event.fingerprint),
                failed=event.failed,
            )
        return _texts(payload, text=stored.payload)

    @classmethod
    def text_of_payload(cls, payload: dict[str, Any], *, seq: int) -> PinText:
        """Read a current-version payload as texts; `json.loads` parsed it with `parse_float=canonical_number`."""
        return _texts(_checked(payload, seq=seq), text=None)


def _texts(payload: dict[str, Any], *, text: str | None) -> PinText:
    """The reader of a checked current-version payload as texts: `raw` cut out of the stored `text` where it can be.

    Without `text`, the payload was parsed with `parse_float=canonical_number`, so the C encoder writes `raw` back.
    """
    fingerprint = _fingerprint_text(payload)
    if text is None:
        return _pin_text(payload, raw=stored_json_of_parsed(payload["raw"]), fingerprint=fingerprint)
    head, tail = _around_raw(payload, fingerprint)
    if text.startswith(head) and text.endswith(tail):
        # A stored payload is canonical JSON text, so the part between the fields around `raw` is its text.
        # (The two cannot overlap: `raw`'s value lies between them, and `"raw":` cannot occur in the tail.)
        return _pin_text(payload, raw=text[len(head) : len(text) - len(tail)], fingerprint=fingerprint)
    return _pin_text(payload, raw=stored_json(payload["raw"]), fingerprint=fingerprint)


def _around_raw(payload: dict[str, Any], fingerprint: str | None) -> tuple[str, str]:
    """The canonical text of a checked payload before its `raw` and after it."""
    head = f'{{"attempts":{payload["attempts"]},'
    if "failed" in payload:
        head += f'"failed":{"true" if payload["failed"] else "false"},'
    if "fingerprint" in payload:
        head += f'"fingerprint":{fingerprint or "null"},'
    head += f'"key":{encode_normalised(payload["key"])},"kind":{encode_normalised(payload["kind"])},"raw":'
    return head, f',"unit_id":{encode_normalised(payload["unit_id"])}}}'


def _fingerprint_text(payload: dict[str, Any]) -> str | None:
    fingerprint = payload.get("fingerprint")
    # A flat object of strings: the C encoder writes it as canonical JSON does.
    return None if fingerprint is None else encode_normalised(fingerprint)


def _pin_text(payload: dict[str, Any], *, raw: str, fingerprint: str | None) -> PinText:
    return PinText(
        unit_id=payload["unit_id"],
        key=payload["key"],
        kind=payload["kind"],
        raw_text=raw,
        attempts=payload["attempts"],
        fingerprint=fingerprint,
        failed=payload.get("failed", False),
    )


@dataclass(frozen=True, slots=True)
class PinText:
    """A `PinPromoted` with its result and fingerprint as canonical JSON text, as replay keeps it."""

    unit_id: str
    """The unit of work that drew the pin."""
    key: str
    """The pin key."""
    kind: str
    """What was pinned."""
    raw_text: str
    """The raw result as canonical JSON text (`PinPromoted.raw` is the parsed JSON)."""
    attempts: int
    """How many times the unit asked for the key."""
    fingerprint: str | None
    """The fingerprint as canonical JSON text, if the pin has one."""
    failed: bool = False
    """Whether the draw failed: `raw_text` then describes the exception."""


def _decoded(stored: StoredEvent, registry: EventTypeRegistry, upcasts: UpcastRegistry | None) -> PinPromoted:
    event = registry.decode(stored, upcasts=upcasts)
    if not isinstance(event, PinPromoted):
        raise CorruptEvent(f"expected PinPromoted, decoded {type(event).__qualname__}", seq=stored.seq)
    return event


def _current_payload(stored: StoredEvent, registry: EventTypeRegistry) -> dict[str, Any] | None:
    """The checked payload of a current-version `pin_promoted`; None when it needs the registry and upcasts."""
    if not is_current_pin(stored.schema_version, registry, seq=stored.seq):
        return None
    return _checked(stored.payload_json(), seq=stored.seq)


def is_current_pin(schema_version: int, registry: EventTypeRegistry, *, seq: int) -> bool:
    """Whether a `pin_promoted` of `schema_version` is read by this module's `PinPromoted` as it stands."""
    current = registry.lookup(BUILTIN_NAMESPACE, PinPromoted.event_type, seq=seq)
    return schema_version == PinPromoted.schema_version and current is PinPromoted


def _checked(payload: dict[str, Any], *, seq: int) -> dict[str, Any]:
    unknown = payload.keys() - _PROMOTED_FIELDS
    if unknown:
        raise CorruptEvent(f"pin_promoted payload has unknown fields {sorted(unknown)}", seq=seq)
    missing = [name for name in ("attempts", "key", "kind", "raw", "unit_id") if name not in payload]
    if missing:
        raise CorruptEvent(f"pin_promoted payload lacks {missing}", seq=seq)
    unit_id, key, kind, attempts = payload["unit_id"], payload["key"], payload["kind"], payload["attempts"]
    fingerprint: JSONValue = payload.get("fingerprint")
    if not (isinstance(unit_id, str) and isinstance(key, str) and isinstance(kind, str)):
        raise CorruptEvent("pin_promoted unit_id, key and kind must be strings", seq=seq)
    if type(attempts) is not int:
        raise CorruptEvent("pin_promoted attempts must be an integer", seq=seq)
    if type(payload.get("failed", False)) is not bool:
        raise CorruptEvent("pin_promoted failed must be a boolean", seq=seq)
    if fingerprint is not None and not (
        isinstance(fingerprint, dict) and all(type(digest) is str for digest in fingerprint.values())
    ):
        raise CorruptEvent("pin_promoted fingerprint must be an object of strings", seq=seq)
    return payload


_PROMOTED_FIELDS = frozenset(PinPromoted.model_fields)


class AbandonedPin(BaseModel):
    """One discarded pin in a `PinsAbandoned` summary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    """The discarded pin's key."""
    kind: str
    """The discarded pin's kind."""
    attempts: int
    """How many times the unit asked for it."""


class PinsAbandoned(Event):
    """A unit of work given up: one audit line listing what it had drawn, never the results."""

    namespace: ClassVar[str] = BUILTIN_NAMESPACE
    event_type: ClassVar[str] = "pins_abandoned"
    schema_version: ClassVar[int] = 1

    unit_id: str
    """The abandoned unit."""
    reason: str
    """Why the caller gave the unit up."""
    pins: tuple[AbandonedPin, ...]
    """Each discarded key with its kind and attempts, in draw order."""


class ReplayDiverged(Event):
    """A record-mode replay left the recording: the first call it had no pin for."""

    namespace: ClassVar[str] = BUILTIN_NAMESPACE
    event_type: ClassVar[str] = "replay_diverged"
    schema_version: ClassVar[int] = 1

    unit_id: str
    """The unit that recorded the new run."""
    key: str
    """The first key the recording could not answer."""
    kind: str
    """Its kind."""
    after_hits: int
    """How many pins were answered from the recording before it."""
    moved: tuple[str, ...] = ()
    """The fields that differ from the nearest recorded call, where the recording allows saying."""
    nearest_key: str | None = None
    """The recorded key the miss was compared with, if any."""


class RunInputs(Event):
    """What one agent run of a unit was asked: its prompt, the history it continued, its settings.

    The timeline keeps it as it keeps any event and never reads `inputs`: its shape is the provider's.
    Replay ignores it; a re-run, an exported test or an eval reads it to ask the run again.
    """

    namespace: ClassVar[str] = BUILTIN_NAMESPACE
    event_type: ClassVar[str] = "run_inputs"
    schema_version: ClassVar[int] = 1

    unit_id: str
    """The unit of work the run belonged to."""
    run_id: str
    """The run's pinned id."""
    inputs: JsonValue
    """What the run was asked, as JSON shaped by the layer that recorded it."""


class UnitForked(Event):
    """A unit that began as a replay of another unit's first pins and went on live from there (a fork)."""

    namespace: ClassVar[str] = BUILTIN_NAMESPACE
    event_type: ClassVar[str] = "unit_forked"
    schema_version: ClassVar[int] = 1

    unit_id: str
    """The new unit: its first pins are the origin's, the rest were drawn live."""
    origin_unit_id: str
    """The unit it was forked from."""
    replayed: int
    """How many of its pins were answered from the origin before it went live."""
    at: str
    """Where the fork was asked for, as said (`after 3 pins`, `after turn 2`)."""


BUILTIN_EVENTS: tuple[type[Event], ...] = (PinPromoted, PinsAbandoned, ReplayDiverged, RunInputs, UnitForked)
"""The library's own events, which every `EventTypeRegistry` knows from the start."""


def given_or_builtins(registry: EventTypeRegistry | None) -> EventTypeRegistry:
    """The registry given, or (for None) a fresh one that knows only the built-in events: all that pins need."""
    return EventTypeRegistry() if registry is None else registry


def events_of(events: Iterable[StoredEvent], *types: type[Event]) -> Iterator[StoredEvent]:
    """Yield the events of the given types, in order: what `store.read(namespace=, type=)` reads, over any stream."""
    wanted = {(cls.namespace, cls.event_type) for cls in types}
    return (event for event in events if (event.namespace, event.type) in wanted)


def register_builtin_events(registry: EventTypeRegistry) -> None:
    """Register the built-in events on `registry`, as the reference page's example does; a no-op kept for it.

    Every `EventTypeRegistry` knows the built-in events already, so new code need not call it. It is the seed's
    own API (issue #40): it stays, and never warns.
    """
    for cls in BUILTIN_EVENTS:
        registry.register(cls, _builtin=True)
