"""Tool calls under `Pinning`: keyed as `pinned_tool` keys them, passed to the toolset under their own name, and
refused with the tool named when their result has no JSON form."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from anagrapheus import Pinning
from anagrapheus.errors import PinResultError
from anagrapheus.provider import pinned_tool
from anagrapheus.provider.callers import unit_salt
from anagrapheus.provider.tools import TOOL_CALL, WHOLE_DEPS, caller_of, tool_pin
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

PROMPT = "Where can the fleet berth?"


def calling(tool: str, args: dict[str, Any]) -> FunctionModel:
    """A model that calls `tool` with `args` once, then says what it returned."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        if not returns:
            return ModelResponse(parts=[ToolCallPart(tool, args)])
        return ModelResponse(parts=[TextPart(f"told: {returns[0].content}")])

    return FunctionModel(answer, model_name="scripted-uk")


def tool_keys(ledger: PinLedger) -> list[str]:
    return [pin.key for pin in ledger.pins() if pin.kind == TOOL_CALL]


def berths(port: str, **extra: int) -> str:
    """Count the free berths in a port."""
    return f"{port}: {4 + sum(extra.values())} free berths"


def test_a_tool_taking_keyword_extras_is_keyed_as_pinned_tool_keys_it(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # pydantic-ai hands the toolset the extras flat; pinned_tool binds them to the function's **extra.
    ledger = PinLedger(store, types)
    agent = Agent(calling("berths", {"port": "Brest", "tugs": 2}), tools=[berths], capabilities=[Pinning(ledger)])
    assert agent.run_sync(PROMPT).output == "told: Brest: 6 free berths"
    assert tool_keys(ledger) == [tool_pin("berths", {"port": "Brest", "extra": {"tugs": 2}}).key]

    pinned = PinLedger(store, types, unit_id="pinned-tool")
    alone = Agent(calling("berths", {"port": "Brest", "tugs": 2}), tools=[pinned_tool(pinned, berths)])
    assert alone.run_sync(PROMPT).output == "told: Brest: 6 free berths"
    assert tool_keys(pinned) == tool_keys(ledger)


def test_a_tool_keyed_with_part_of_the_deps_is_keyed_under_its_name(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def fleet(ctx: RunContext[str], city: str) -> str:
        """Name the fleet of a city."""
        return f"{ctx.deps} fleet in {city}"

    ledger = PinLedger(store, types)
    pinning = Pinning(ledger, tool_deps={"fleet": lambda deps: {"region": deps}})
    agent = Agent(calling("fleet", {"city": "Brest"}), deps_type=str, tools=[fleet], capabilities=[pinning])
    assert agent.run_sync(PROMPT, deps="Breton").output == "told: Breton fleet in Brest"
    assert tool_keys(ledger) == [tool_pin("fleet", {"city": "Brest"}, deps={"region": "Breton"}).key]


def test_a_prefixed_toolset_is_called_under_its_own_names_drawn_and_replayed(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # A prefixed toolset finds its tool by the name it is called with: the capability must pass that name on.
    ran: list[str] = []

    def berth(port: str) -> str:
        """Count the free berths in a port."""
        ran.append(port)
        return f"{port}: 4 free berths"

    def agent(pinning: Pinning) -> Agent[None, str]:
        ports = FunctionToolset([berth]).prefixed("harbour")
        return Agent(calling("harbour_berth", {"port": "Brest"}), toolsets=[ports], capabilities=[pinning])

    ledger = PinLedger(store, types)
    assert agent(Pinning(ledger)).run_sync(PROMPT).output == "told: Brest: 4 free berths"
    assert tool_keys(ledger) == [tool_pin("harbour_berth", {"port": "Brest"}).key]
    ledger.commit()
    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types))).run_sync(PROMPT)
    assert replayed.output == "told: Brest: 4 free berths"
    assert ran == ["Brest"]


def test_a_pinned_tool_in_a_prefixed_toolset_is_passed_its_name_and_run_context(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)

    def fleet(ctx: RunContext[str], city: str) -> str:
        """Name the fleet of a city."""
        return f"{ctx.deps} fleet in {city}"

    fleets = FunctionToolset([pinned_tool(ledger, fleet)]).prefixed("port")
    agent = Agent(calling("port_fleet", {"city": "Brest"}), deps_type=str, toolsets=[fleets])
    result = agent.run_sync(PROMPT, deps="Breton", capabilities=[Pinning(ledger)])
    assert result.output == "told: Breton fleet in Brest"
    # Pinned once, by the pinned tool itself, under its own name.
    caller = caller_of("Breton", WHOLE_DEPS, salt=unit_salt(ledger))
    assert tool_keys(ledger) == [tool_pin("fleet", {"city": "Brest"}, caller=caller).key]


class Catch:
    """A value pydantic cannot turn into JSON."""


@pytest.mark.parametrize(
    ("returned", "says"),
    [
        (Catch(), "tool 'survey' returned Catch, which has no JSON form ("),
        (math.nan, "tool 'survey' returned float, which is not JSON-shaped ("),
    ],
    ids=["no-json-form", "not-json-shaped"],
)
def test_a_toolset_result_without_json_is_refused_naming_the_tool(
    returned: object, says: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def survey(port: str) -> Any:
        """Survey a port."""
        return returned

    ledger = PinLedger(store, types)
    agent = Agent(calling("survey", {"port": "Brest"}), tools=[survey], capabilities=[Pinning(ledger)])
    with pytest.raises(PinResultError) as refused:
        agent.run_sync(PROMPT)
    assert str(refused.value).startswith(says)
