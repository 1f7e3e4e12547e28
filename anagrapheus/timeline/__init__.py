"""The event log and pins; knows nothing of pydantic-ai."""

from anagrapheus.errors import AmbiguousPin, PinMiss
from anagrapheus.timeline.canonical import JSONValue, canonical_json, pin_key
from anagrapheus.timeline.copying import copy_log, open_store
from anagrapheus.timeline.divergence import Divergence
from anagrapheus.timeline.events import (
    Event,
    EventTypeRegistry,
    PendingEvent,
    PinPromoted,
    PinsAbandoned,
    ReplayDiverged,
    RunInputs,
    StoredEvent,
    UnitForked,
    register_builtin_events,
)
from anagrapheus.timeline.fingerprint import fingerprint_of, moved_fields
from anagrapheus.timeline.pins import PinLedger
from anagrapheus.timeline.provenance import Provenance, ProvenanceWarning
from anagrapheus.timeline.recording import (
    RECORDING_FORMAT,
    RECORDING_VERSION,
    Recording,
    RecordingHeader,
    pin_events,
    read_recording,
    stream_pins,
    stream_recording,
    write_recording,
)
from anagrapheus.timeline.replay import AmbiguousPinWarning, ReplayPins
from anagrapheus.timeline.resolver import PinResolver, StreamDraw
from anagrapheus.timeline.secrets import (
    CARD_NUMBER_RULE,
    DEFAULT_RULES,
    EMAIL_RULE,
    SecretFinding,
    SecretPolicy,
    SecretRule,
)
from anagrapheus.timeline.seeded import SeededRun
from anagrapheus.timeline.sqlite import LeaseHolder, SQLiteEventStore
from anagrapheus.timeline.store import (
    ClosedUnit,
    ClosedUnitLog,
    EventStore,
    LogImport,
    OpenUnit,
    PinScratchStore,
    ScratchPin,
    TimelineStore,
    UnitOutcome,
)
from anagrapheus.timeline.upcast import UpcastRegistry

__all__ = [
    "CARD_NUMBER_RULE",
    "DEFAULT_RULES",
    "EMAIL_RULE",
    "RECORDING_FORMAT",
    "RECORDING_VERSION",
    "AmbiguousPin",
    "AmbiguousPinWarning",
    "ClosedUnit",
    "ClosedUnitLog",
    "Divergence",
    "Event",
    "EventStore",
    "EventTypeRegistry",
    "JSONValue",
    "LeaseHolder",
    "LogImport",
    "OpenUnit",
    "PendingEvent",
    "PinLedger",
    "PinMiss",
    "PinPromoted",
    "PinResolver",
    "PinScratchStore",
    "PinsAbandoned",
    "Provenance",
    "ProvenanceWarning",
    "Recording",
    "RecordingHeader",
    "ReplayDiverged",
    "ReplayPins",
    "RunInputs",
    "SQLiteEventStore",
    "ScratchPin",
    "SecretFinding",
    "SecretPolicy",
    "SecretRule",
    "SeededRun",
    "StoredEvent",
    "StreamDraw",
    "TimelineStore",
    "UnitForked",
    "UnitOutcome",
    "UpcastRegistry",
    "canonical_json",
    "copy_log",
    "fingerprint_of",
    "moved_fields",
    "open_store",
    "pin_events",
    "pin_key",
    "read_recording",
    "register_builtin_events",
    "stream_pins",
    "stream_recording",
    "write_recording",
]
