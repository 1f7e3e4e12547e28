"""anagrapheus: pin every model and tool call of a pydantic-ai agent, and replay runs offline, exactly."""

from typing import TYPE_CHECKING

from anagrapheus.deprecation import deprecated
from anagrapheus.importing import lazy_names

if TYPE_CHECKING:
    from anagrapheus.durable import OpenRun, aresume, open_runs, resume
    from anagrapheus.errors import AnagrapheusError, PinMiss
    from anagrapheus.identity import mint_entity_id
    from anagrapheus.provider.capability import Pinning
    from anagrapheus.provider.model import PinnedModel
    from anagrapheus.provider.policy import SemanticCallPolicy
    from anagrapheus.provider.tools import pinned_tool
    from anagrapheus.timeline.events import EventTypeRegistry, register_builtin_events
    from anagrapheus.timeline.recording import pin_events, read_recording, write_recording
    from anagrapheus.timeline.resolving.ledger import PinLedger
    from anagrapheus.timeline.resolving.replay import ReplayPins
    from anagrapheus.timeline.secrets import SecretRule, SecretScanner
    from anagrapheus.timeline.stores.sqlite import SQLiteEventStore

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
    "SecretRule",
    "SecretScanner",
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

# Each name is imported from its module when first read, so importing a layer imports no other.
_lazy, __dir__ = lazy_names(
    __name__,
    {
        "AnagrapheusError": "anagrapheus.errors",
        "EventTypeRegistry": "anagrapheus.timeline.events",
        "OpenRun": "anagrapheus.durable",
        "PinLedger": "anagrapheus.timeline.resolving.ledger",
        "PinMiss": "anagrapheus.errors",
        "PinnedModel": "anagrapheus.provider.model",
        "Pinning": "anagrapheus.provider.capability",
        "ReplayPins": "anagrapheus.timeline.resolving.replay",
        "SQLiteEventStore": "anagrapheus.timeline.stores.sqlite",
        "SecretScanner": "anagrapheus.timeline.secrets",
        "SecretRule": "anagrapheus.timeline.secrets",
        "SemanticCallPolicy": "anagrapheus.provider.policy",
        "aresume": "anagrapheus.durable",
        "mint_entity_id": "anagrapheus.identity",
        "open_runs": "anagrapheus.durable",
        "pinned_tool": "anagrapheus.provider.tools",
        "read_recording": "anagrapheus.timeline.recording",
        "resume": "anagrapheus.durable",
        "write_recording": "anagrapheus.timeline.recording",
        "pin_events": "anagrapheus.timeline.recording",
        "register_builtin_events": "anagrapheus.timeline.events",
    },
)

# Renamed in 0.2.0 ("policy" is the call policy's word alone): the old name kept one release, warning.
_RENAMED = {"SecretPolicy": "SecretScanner"}


def __getattr__(name: str) -> object:
    """A public name, imported when first read; a renamed one warns and gives what replaced it."""
    renamed = _RENAMED.get(name)
    if renamed is None:
        return _lazy(name)
    deprecated(f"{__name__}.{name}", f"use {__name__}.{renamed}")
    return _lazy(renamed)
