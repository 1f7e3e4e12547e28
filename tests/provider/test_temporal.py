"""TemporalPins in one process: draws inside an activity (Temporal's ActivityEnvironment), the unit closed once.

The recipe against a real Temporal server, with workers killed, is tests/integration/test_temporal_recipe.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RunUsage

from anagrapheus import Pinning
from anagrapheus.errors import UsageError
from anagrapheus.provider.temporal import TemporalPins, TemporalUnits, temporal_unit_id
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.events import PinsAbandoned

pytestmark = pytest.mark.durable


@pytest.fixture(autouse=True)
def _temporal() -> None:
    pytest.importorskip("temporalio.testing", reason="Temporal is an optional extra (pip install -e '.[temporal]')")


def in_workflow(workflow_id: str) -> Any:
    """An activity environment whose activity belongs to the workflow `workflow_id`."""
    from temporalio.testing import ActivityEnvironment

    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, workflow_id=workflow_id)
    return environment


def context() -> RunContext[None]:
    return RunContext(deps=None, model=FunctionModel(lambda m, i: None), usage=RunUsage())  # type: ignore[arg-type]


def counting_agent(pins: TemporalPins, calls: list[str]) -> Agent[None, str]:
    def answer(messages: list[Any], info: AgentInfo) -> Any:
        from pydantic_ai.messages import ModelResponse, TextPart

        calls.append("model")
        return ModelResponse(parts=[TextPart("berth 4")])

    model = pins.model(FunctionModel(answer, model_name="harbour"))
    return Agent(model, instructions="Answer in one line.", capabilities=[pins])


def test_the_unit_is_named_only_inside_an_activity() -> None:
    with pytest.raises(UsageError, match="only inside a Temporal activity"):
        temporal_unit_id()


def test_a_run_in_an_activity_pins_into_its_workflows_unit_and_closes_it_once(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    pins, calls = TemporalPins(store, types), list[str]()
    agent = counting_agent(pins, calls)

    async def run() -> str:
        return (await agent.run("Where do we berth?")).output

    # Outside a workflow the close operation runs inline, in the same activity: the whole run is one unit.
    assert asyncio.run(in_workflow("storm").run(run)) == "berth 4"
    assert PinLedger(store, types, unit_id="temporal:storm").state == "committed"
    (inputs,) = [json.loads(e.payload)["inputs"] for e in store.read() if e.type == "run_inputs"]
    assert (inputs["prompt"], inputs["instructions"], inputs["output"]) == (
        "Where do we berth?",
        "Answer in one line.",
        "berth 4",
    )
    events = len(list(store.read()))

    # The close retried (a worker died before Temporal saw it end): it finds the unit committed and adds nothing.
    async def close() -> str:
        return await pins.close_unit(context(), run_id="r", prompt="p", messages=[], output=None, error=None)

    assert asyncio.run(in_workflow("storm").run(close)) == "committed"
    assert len(list(store.read())) == events
    # A request asked again in that workflow is answered from the committed unit's log: the model is not reached.
    assert isinstance(pins.units.unit_for("temporal:storm"), ReplayPins)
    assert asyncio.run(in_workflow("storm").run(run)) == "berth 4"
    assert calls == ["model"]


def test_a_run_that_failed_for_good_abandons_its_unit(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    pins = TemporalPins(store, types)

    async def fail() -> None:
        ledger = pins.units.ledger_for()
        assert isinstance(ledger, PinLedger)
        ledger.resolve("k", kind="model_call", effect=lambda: 1, interpret=lambda raw: raw)
        await pins.close_unit(context(), run_id="r", prompt="p", messages=[], output=None, error="ValueError: no")

    asyncio.run(in_workflow("gale").run(fail))
    assert PinLedger(store, types, unit_id="temporal:gale").state == "abandoned"
    (abandoned,) = [e for e in store.read() if e.type == PinsAbandoned.event_type]
    assert "ValueError: no" in abandoned.payload


def test_temporal_units_serve_no_run_under_pinning(store: SQLiteEventStore, tmp_path: Path) -> None:
    agent = Agent(FunctionModel(lambda m, i: None), capabilities=[Pinning(TemporalUnits(store))])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="serves no run under Pinning"):
        agent.run_sync("Where?")


def test_a_run_that_raised_abandons_its_unit_and_a_retried_close_finds_it_closed(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    pins = TemporalPins(store, types, record_inputs=False)

    def broken(messages: list[Any], info: AgentInfo) -> Any:
        raise ValueError("the model is down")

    agent = Agent(pins.model(FunctionModel(broken, model_name="harbour")), capabilities=[pins])

    async def run() -> None:
        await agent.run("Where do we berth?")

    with pytest.raises(ValueError, match="the model is down"):
        asyncio.run(in_workflow("squall").run(run))
    assert PinLedger(store, types, unit_id="temporal:squall").state == "abandoned"
    assert not [e for e in store.read() if e.type == "run_inputs"]  # record_inputs=False

    async def close() -> str:
        return await pins.close_unit(context(), run_id="r", prompt="p", messages=[], output=None, error=None)

    assert asyncio.run(in_workflow("squall").run(close)) == "abandoned"
    assert TemporalPins.get_serialization_name() is None
