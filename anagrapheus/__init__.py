"""anagrapheus: pin every model and tool call of a pydantic-ai agent, and replay runs offline, exactly."""

from anagrapheus.durable import OpenRun, aresume, open_runs, resume
from anagrapheus.errors import AnagrapheusError
from anagrapheus.identity import mint_entity_id
from anagrapheus.provider.capability import Pinning
from anagrapheus.provider.model import PinnedModel
from anagrapheus.provider.provenance import provenance_of_pins
from anagrapheus.provider.tools import pinned_tool
from anagrapheus.timeline.events import EventTypeRegistry, register_builtin_events
from anagrapheus.timeline.pins import PinLedger
from anagrapheus.timeline.provenance import use_stamp
from anagrapheus.timeline.recording import pin_events, read_recording, write_recording
from anagrapheus.timeline.replay import ReplayPins
from anagrapheus.timeline.sqlite import SQLiteEventStore

# The composition root: recordings are stamped with what the provider layer reads from pydantic-ai's responses
# (the timeline, below it, cannot import it).
use_stamp(provenance_of_pins)

__all__ = [
    "AnagrapheusError",
    "EventTypeRegistry",
    "OpenRun",
    "PinLedger",
    "PinnedModel",
    "Pinning",
    "ReplayPins",
    "SQLiteEventStore",
    "aresume",
    "mint_entity_id",
    "open_runs",
    "pin_events",
    "pinned_tool",
    "read_recording",
    "register_builtin_events",
    "resume",
    "write_recording",
]
