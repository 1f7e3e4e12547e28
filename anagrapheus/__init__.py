"""anagrapheus: pin every model and tool call of a pydantic-ai agent, and replay runs offline, exactly."""

from anagrapheus.durable import OpenRun, aresume, open_runs, resume
from anagrapheus.errors import AnagrapheusError, PinMiss
from anagrapheus.identity import mint_entity_id
from anagrapheus.provider.capability import Pinning
from anagrapheus.provider.keying.keys import walked
from anagrapheus.provider.model import PinnedModel
from anagrapheus.provider.policy import SemanticCallPolicy
from anagrapheus.provider.provenance import VERIFIED_PYDANTIC_AI, provenance_of_pins
from anagrapheus.provider.tools import pinned_tool
from anagrapheus.timeline.canonical import use_key_walk
from anagrapheus.timeline.events import EventTypeRegistry, register_builtin_events
from anagrapheus.timeline.pins import PinLedger
from anagrapheus.timeline.provenance import use_stamp
from anagrapheus.timeline.recording import pin_events, read_recording, write_recording
from anagrapheus.timeline.replay import ReplayPins
from anagrapheus.timeline.secrets import SecretPolicy, SecretRule
from anagrapheus.timeline.sqlite import SQLiteEventStore

# The composition root: recordings are stamped with what the provider layer reads from pydantic-ai's responses,
# a recording made or read without a named call policy is keyed by the provider's default, and `pin_key` walks its
# material with the provider's walk of key material, as every other key does (the timeline, below it, cannot
# import any of them).
use_stamp(provenance_of_pins, default_call_policy=SemanticCallPolicy, verified={"pydantic_ai": VERIFIED_PYDANTIC_AI})
use_key_walk(walked)

__all__ = [
    "AnagrapheusError",
    "EventTypeRegistry",
    "OpenRun",
    "PinLedger",
    "PinMiss",
    "PinnedModel",
    "Pinning",
    "ReplayPins",
    "SQLiteEventStore",
    "SecretPolicy",
    "SecretRule",
    "SemanticCallPolicy",
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
