"""pydantic-ai adapters: the only layer that imports pydantic_ai."""

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
    "call_pin",
    "dbos_workflow_id",
    "every_agent_run",
    "fork_run",
    "pinned_tool",
    "prefect_flow_run_id",
    "refuse_model_requests",
]
