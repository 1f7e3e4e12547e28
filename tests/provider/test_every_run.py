"""every_agent_run: inside the scope every agent run carries the capability once; refuse_model_requests."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent, models

from anagrapheus import Pinning
from anagrapheus.errors import UsageError
from anagrapheus.provider import every_agent_run, refuse_model_requests
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from tests.conftest import Scripted

PROMPT = "Where do the fleets land?"


def model_calls(ledger: PinLedger) -> list[int]:
    """The attempts of each model request the ledger pinned."""
    return [pin.attempts for pin in ledger.pins() if pin.kind == "model_call"]


def tool_calls(ledger: PinLedger) -> list[int]:
    """The attempts of each tool call the ledger pinned."""
    return [pin.attempts for pin in ledger.pins() if pin.kind == "tool_call"]


def fleet(city: str) -> str:
    """Name the fleet of a city."""
    return f"the fleet of {city}"


def test_an_agent_built_without_the_capability_carries_it_inside_the_scope_only(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    agent = Agent(Scripted("scripted-uk").model)
    with every_agent_run(Pinning(ledger)):
        agent.run_sync(PROMPT)
    assert model_calls(ledger) == [1]
    agent.run_sync("Another question, outside the scope.")
    assert model_calls(ledger) == [1]


def test_a_run_that_carries_the_capability_already_keeps_one_copy(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Two layers of one Pinning would ask the ledger for each tool call's key twice, once inside the other.
    ledger = PinLedger(store, types)
    pinning = Pinning(ledger)
    with every_agent_run(pinning):
        Agent(Scripted("scripted-uk").model, tools=[fleet], capabilities=[pinning]).run_sync(PROMPT)
        Agent(Scripted("scripted-uk").model, tools=[fleet]).run_sync(PROMPT, capabilities=[pinning])
    # Each run draws its own call once (the run rule); one asked twice through two layers would say 2.
    assert tool_calls(ledger) == [1, 1]


def test_scopes_do_not_nest_and_one_that_failed_closes(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    inner = Pinning(PinLedger(store, types, unit_id="inner"))
    with every_agent_run(Pinning(ledger)):
        refused = r"^every_agent_run scopes do not nest: close the open one first$"
        with pytest.raises(UsageError, match=refused), every_agent_run(inner):
            pass
        # The refused scope left the open one in place.
        Agent(Scripted("scripted-uk").model).run_sync(PROMPT)
    assert model_calls(ledger) == [1]

    with pytest.raises(RuntimeError, match="the test stops here"), every_agent_run(Pinning(ledger)):
        raise RuntimeError("the test stops here")
    # Closed by the failure: a new scope opens.
    with every_agent_run(Pinning(ledger)):
        pass


def test_model_requests_are_refused_inside_the_scope_only() -> None:
    with models.override_allow_model_requests(True):
        with refuse_model_requests():
            assert models.ALLOW_MODEL_REQUESTS is False
        assert models.ALLOW_MODEL_REQUESTS is True


def test_scopes_opened_one_after_another_wrap_agent_runs_once(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # The pytest plugin opens a scope per test: a wrapper per scope would nest thousands deep in a long session.
    # Each scope puts pydantic-ai's own `Agent.iter` back as it closes, so the next one wraps it, not its wrapper.
    ledger = PinLedger(store, types)
    original = Agent.iter
    for _ in range(2):
        with every_agent_run(Pinning(ledger)):
            assert Agent.iter is not original
            assert getattr(Agent.iter, "__wrapped__", None) is original
        assert Agent.iter is original
