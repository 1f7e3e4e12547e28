"""The event log and pins; knows nothing of pydantic-ai."""

from anagrapheus.deprecation import moved_modules, moved_names
from anagrapheus.errors import AmbiguousPin, PinMiss
from anagrapheus.timeline.canonical import JSONValue, canonical_json, pin_key
from anagrapheus.timeline.divergence import Divergence
from anagrapheus.timeline.events import (
    Event,
    EventTypeRegistry,
    PendingEvent,
    PinPromoted,
    PinsAbandoned,
    ReplayDiverged,
    StoredEvent,
    register_builtin_events,
)
from anagrapheus.timeline.fingerprint import fingerprint_of, moved_fields
from anagrapheus.timeline.moved import MOVED
from anagrapheus.timeline.provenance import ProvenanceWarning
from anagrapheus.timeline.recording import Recording, RecordingHeader, pin_events, read_recording, write_recording
from anagrapheus.timeline.resolving.ledger import PinLedger
from anagrapheus.timeline.resolving.replay import ReplayPins
from anagrapheus.timeline.resolving.resolver import PinResolver, Resolver
from anagrapheus.timeline.secrets import (
    CARD_NUMBER_RULE,
    DEFAULT_RULES,
    EMAIL_RULE,
    SecretFinding,
    SecretRule,
    SecretScanner,
)
from anagrapheus.timeline.seeded import SeededRun
from anagrapheus.timeline.stores.copying import copy_log, open_store
from anagrapheus.timeline.stores.ports import EventStore, TimelineStore
from anagrapheus.timeline.stores.sqlite import LeaseHolder, SQLiteEventStore
from anagrapheus.timeline.upcast import UpcastRegistry

# What users write against, as the guides show it.
# Store authors import the ports from `anagrapheus.timeline.stores.ports`.
__all__ = [
    "CARD_NUMBER_RULE",
    "DEFAULT_RULES",
    "EMAIL_RULE",
    "AmbiguousPin",
    "Divergence",
    "Event",
    "EventStore",
    "EventTypeRegistry",
    "JSONValue",
    "LeaseHolder",
    "PendingEvent",
    "PinLedger",
    "PinMiss",
    "PinPromoted",
    "PinResolver",
    "PinsAbandoned",
    "ProvenanceWarning",
    "Recording",
    "RecordingHeader",
    "ReplayDiverged",
    "ReplayPins",
    "Resolver",
    "SQLiteEventStore",
    "SecretFinding",
    "SecretRule",
    "SecretScanner",
    "SeededRun",
    "StoredEvent",
    "TimelineStore",
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
    "write_recording",
]

# The modules moved into the timeline's rooms: each old path stays importable for one release, warning once.
moved_modules(MOVED)

# Renamed in 0.2.0 ("policy" is the call policy's word alone): the old name kept one release, warning.
__getattr__ = moved_names(__name__, {"SecretPolicy": "anagrapheus.timeline.secrets:SecretScanner"})
