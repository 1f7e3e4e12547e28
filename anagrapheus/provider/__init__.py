"""pydantic-ai adapters: the only layer that imports pydantic_ai."""

from typing import TYPE_CHECKING

from anagrapheus.importing import lazy_names

if TYPE_CHECKING:
    from anagrapheus.provider.cancelled_askings import UnpinnedCancellationWarning
    from anagrapheus.provider.capability import PinnedToolset, Pinning
    from anagrapheus.provider.every_run import every_agent_run, refuse_model_requests
    from anagrapheus.provider.fork import Forked, ForkPins, fork_run
    from anagrapheus.provider.model import PinnedModel
    from anagrapheus.provider.policy import CallPin, CallPolicy, SemanticCallPolicy, call_pin
    from anagrapheus.provider.stream import PinnedStreamedResponse
    from anagrapheus.provider.tools import pinned_tool
    from anagrapheus.provider.unit_per_run import UnitPerRun, dbos_workflow_id, prefect_flow_run_id

__all__ = [
    "CallPin",
    "CallPolicy",
    "ForkPins",
    "Forked",
    "PinnedModel",
    "PinnedStreamedResponse",
    "PinnedToolset",
    "Pinning",
    "SemanticCallPolicy",
    "UnitPerRun",
    "UnpinnedCancellationWarning",
    "call_pin",
    "dbos_workflow_id",
    "every_agent_run",
    "fork_run",
    "pinned_tool",
    "prefect_flow_run_id",
    "refuse_model_requests",
]

# Each name is imported from its module when first read: the root reads this layer's provenance stamp (which needs
# no pydantic-ai) without loading the rest of it.
__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "CallPin": "anagrapheus.provider.policy",
        "CallPolicy": "anagrapheus.provider.policy",
        "ForkPins": "anagrapheus.provider.fork",
        "Forked": "anagrapheus.provider.fork",
        "PinnedModel": "anagrapheus.provider.model",
        "PinnedStreamedResponse": "anagrapheus.provider.stream",
        "PinnedToolset": "anagrapheus.provider.capability",
        "Pinning": "anagrapheus.provider.capability",
        "SemanticCallPolicy": "anagrapheus.provider.policy",
        "UnitPerRun": "anagrapheus.provider.unit_per_run",
        "UnpinnedCancellationWarning": "anagrapheus.provider.cancelled_askings",
        "call_pin": "anagrapheus.provider.policy",
        "dbos_workflow_id": "anagrapheus.provider.unit_per_run",
        "prefect_flow_run_id": "anagrapheus.provider.unit_per_run",
        "every_agent_run": "anagrapheus.provider.every_run",
        "fork_run": "anagrapheus.provider.fork",
        "pinned_tool": "anagrapheus.provider.tools",
        "refuse_model_requests": "anagrapheus.provider.every_run",
    },
)
