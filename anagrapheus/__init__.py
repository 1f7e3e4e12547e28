"""anagrapheus: pin every model and tool call of a pydantic-ai agent, and replay runs offline, exactly."""

from anagrapheus.errors import AnagrapheusError
from anagrapheus.identity import mint_entity_id
from anagrapheus.timeline.events import register_builtin_events

__all__ = ["AnagrapheusError", "mint_entity_id", "register_builtin_events"]
