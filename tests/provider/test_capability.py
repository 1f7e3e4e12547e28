"""Pinning: one capability pins every model request and every tool call of a run; strict replay reaches neither."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from anagrapheus import Pinning
from anagrapheus.provider import PinnedModel, SemanticCallPolicy, pinned_tool
from anagrapheus.provider.callers import unit_salt
from anagrapheus.provider.tools import WHOLE_DEPS, caller_of, tool_pin
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinMiss, ReplayPins, SQLiteEventStore
from tests.conftest import Scripted

PROMPT = "Where do the fleets land?"


@dataclass
class World:
    """Counts every tool body that ran, so a replay can prove none did."""

    calls: list[str] = field(default_factory=list[str])

    def agent(self, model: Any, *, capabilities: list[Any] | None = None) -> Agent[str, str]:
        """An agent with a tool of each kind: plain, async, from a toolset, dynamic and prepared."""
        world = self
        agent = Agent(model, deps_type=str, capabilities=capabilities, toolsets=[self._harbours(), self._quays()])

        @agent.tool
        def fleet(ctx: RunContext[str], city: str, boats: int = 3) -> str:
            """Name the fleet of a city."""
            world.calls.append("fleet")
            return f"{ctx.deps} fleet of {boats} in {city}"

        @agent.tool_plain
        async def weather(city: str) -> dict[str, Any]:
            """Read the weather in a city."""
            world.calls.append("weather")
            return {"city": city, "wind": 4}

        @agent.toolset
        def tides(ctx: RunContext[str]) -> AbstractToolset[str]:
            def tide(city: str) -> str:
                """Read the tide in a city."""
                world.calls.append("tide")
                return f"high tide in {city}"

            return FunctionToolset([tide])

        return agent

    def _harbours(self) -> FunctionToolset[str]:
        world = self

        def harbours(city: str) -> list[str]:
            """List the harbours of a city."""
            world.calls.append("harbours")
            return [f"{city} north", f"{city} south"]

        return FunctionToolset([harbours])

    def _quays(self) -> AbstractToolset[str]:
        world = self

        def quays(city: str) -> int:
            """Count the quays of a city."""
            world.calls.append("quays")
            return 7

        async def described(ctx: RunContext[str], defs: list[ToolDefinition]) -> list[ToolDefinition]:
            return [ToolDefinition(**{**d.__dict__, "description": "Count quays."}) for d in defs]

        return FunctionToolset([quays]).prepared(described)


TOOLS = ["fleet", "harbours", "quays", "tide", "weather"]


def replay_of(store: SQLiteEventStore, types: EventTypeRegistry) -> ReplayPins:
    return ReplayPins.from_events(store.read(), types)


def record(store: SQLiteEventStore, types: EventTypeRegistry, *, streamed: bool = False) -> tuple[str, Scripted]:
    scripted, world = Scripted("scripted-uk"), World()
    ledger = PinLedger(store, types)
    agent = world.agent(scripted.model, capabilities=[Pinning(ledger)])
    if streamed:
        with agent.run_stream_sync(PROMPT, deps="Breton") as run:
            output = run.get_output()
    else:
        output = agent.run_sync(PROMPT, deps="Breton").output
    ledger.commit()
    assert sorted(world.calls) == TOOLS
    assert scripted.calls == 2
    return output, scripted


def test_a_run_recorded_through_the_capability_replays_strictly_without_model_or_tools(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    output, _ = record(store, types)
    assert "Breton fleet of 3 in Paris" in output and "high tide in Paris" in output

    scripted, world = Scripted("scripted-uk"), World()
    replay = ReplayPins.from_events(store.read(), types)
    agent = world.agent(scripted.model, capabilities=[Pinning(replay)])
    assert agent.run_sync(PROMPT, deps="Breton").output == output
    assert (scripted.calls, world.calls) == (0, [])
    # Two model requests and five tool calls, the unit's caller salt, and the run's clock: its id, its place (under
    # its inputs) and the stamps before each request.
    assert replay.hits == 2 + len(TOOLS) + 1 + 4


def test_a_streamed_run_replays_through_a_plain_one_and_per_run_capabilities_work(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    output, _ = record(store, types, streamed=True)

    scripted, world = Scripted("scripted-uk"), World()
    replay = ReplayPins.from_events(store.read(), types)
    agent = world.agent(scripted.model)
    result = agent.run_sync(PROMPT, deps="Breton", capabilities=[Pinning(replay)])
    assert result.output == output
    assert (scripted.calls, world.calls) == (0, [])


def test_a_new_question_misses_strictly_before_the_model_is_reached(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    record(store, types)
    scripted, world = Scripted("scripted-uk"), World()
    agent = world.agent(scripted.model, capabilities=[Pinning(ReplayPins.from_events(store.read(), types))])
    with pytest.raises(PinMiss):
        agent.run_sync("Where do the fleets sail?", deps="Breton")
    assert (scripted.calls, world.calls) == (0, [])


def test_tool_keys_hold_the_caller_so_other_deps_miss_rather_than_read_another_callers_answers(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    record(store, types)
    scripted, world = Scripted("scripted-uk"), World()
    agent = world.agent(scripted.model, capabilities=[Pinning(ReplayPins.from_events(store.read(), types))])
    # Other deps, same questions: the Breton fleet's answers are not the Basque caller's (issue #34).
    with pytest.raises(PinMiss) as missed:
        agent.run_sync(PROMPT, deps="Basque")
    assert world.calls == []
    assert missed.value.divergence.moved == ("caller",)


def test_caller_none_keys_no_caller(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    scripted, world = Scripted("scripted-uk"), World()
    ledger = PinLedger(store, types)
    output = world.agent(scripted.model, capabilities=[Pinning(ledger, caller=None)]).run_sync(PROMPT, deps="Breton")
    ledger.commit()
    recorded = {e.payload_json()["key"] for e in store.read() if e.type == "pin_promoted"}
    assert tool_pin("fleet", {"city": "Paris", "boats": 3}).key in recorded

    # Keyed with no caller, the recording answers any deps (the application said callers share the answers).
    replay = ReplayPins.from_events(store.read(), types)
    again = World().agent(Scripted("scripted-uk").model, capabilities=[Pinning(replay, caller=None)])
    assert again.run_sync(PROMPT, deps="Basque").output == output.output


def test_a_caller_rule_keys_the_identity_it_draws_from_the_deps(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def fleet_of(deps: str) -> str:
        return deps.split("/")[0]

    ledger = PinLedger(store, types)
    agent = World().agent(Scripted("scripted-uk").model, capabilities=[Pinning(ledger, caller=fleet_of)])
    output = agent.run_sync(PROMPT, deps="Breton/session-1").output
    ledger.commit()

    # The same caller in another session: the same keys. Another caller: a miss, never the Breton answers.
    world = World()
    replayed = world.agent(
        Scripted("scripted-uk").model, capabilities=[Pinning(replay_of(store, types), caller=fleet_of)]
    )
    assert replayed.run_sync(PROMPT, deps="Breton/session-2").output == output
    with pytest.raises(PinMiss):
        world.agent(
            Scripted("scripted-uk").model, capabilities=[Pinning(replay_of(store, types), caller=fleet_of)]
        ).run_sync(PROMPT, deps="Basque/session-1")
    assert world.calls == []


def test_the_capability_keys_as_pinned_model_and_pinned_tool_do(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Recorded with the lower-level parts, replayed through the capability: the keys are the same ones.
    scripted, calls = Scripted("scripted-uk"), list[str]()

    def fleet(ctx: RunContext[str], city: str, boats: int = 3) -> str:
        """Name the fleet of a city."""
        calls.append("fleet")
        return f"{ctx.deps} fleet of {boats} in {city}"

    ledger = PinLedger(store, types)
    live = Agent(PinnedModel(scripted.model, ledger), deps_type=str, tools=[pinned_tool(ledger, fleet)])
    output = live.run_sync(PROMPT, deps="Breton").output
    caller = caller_of("Breton", WHOLE_DEPS, salt=unit_salt(ledger))
    keyed = tool_pin("fleet", {"city": "Paris", "boats": 3}, caller=caller)
    assert keyed.key in [pin.key for pin in ledger.pins()]
    ledger.commit()

    replay = ReplayPins.from_events(store.read(), types)
    again = Agent(scripted.model, deps_type=str, tools=[fleet], capabilities=[Pinning(replay)])
    assert again.run_sync(PROMPT, deps="Breton").output == output
    assert (scripted.calls, calls) == (2, ["fleet"])  # both from the recording


def test_a_pinned_tool_or_pinned_model_under_the_capability_is_pinned_once(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    scripted, calls = Scripted("scripted-uk"), list[str]()

    def fleet(city: str) -> str:
        """Name the fleet of a city."""
        calls.append("fleet")
        return f"fleet in {city}"

    ledger = PinLedger(store, types)
    agent = Agent(
        PinnedModel(scripted.model, ledger), tools=[pinned_tool(ledger, fleet)], capabilities=[Pinning(ledger)]
    )
    agent.run_sync(PROMPT)
    assert [pin.kind for pin in ledger.pins()] == [
        "run_id",
        "run_place",
        "run_clock",
        "model_call",
        "tool_call",
        "run_clock",
        "model_call",
    ]
    assert all(pin.attempts == 1 for pin in ledger.pins())


def test_part_of_the_deps_can_join_a_tool_key_when_it_decides_what_the_tool_reads(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def agent(pinning: Pinning, world: World) -> Agent[str, str]:
        return world.agent(Scripted("scripted-uk").model, capabilities=[pinning])

    ledger = PinLedger(store, types)
    fleet_by_region = {"fleet": lambda deps: {"region": deps}}
    agent(Pinning(ledger, tool_deps=fleet_by_region), World()).run_sync(PROMPT, deps="Breton")
    ledger.commit()

    world = World()
    replay = ReplayPins.from_events(store.read(), types)
    with pytest.raises(PinMiss) as miss:
        agent(Pinning(replay, tool_deps=fleet_by_region), world).run_sync(PROMPT, deps="Basque")
    assert miss.value.divergence.kind == "tool_call"
    assert "deps" in miss.value.divergence.describe()
    world = World()
    replay = ReplayPins.from_events(store.read(), types)
    result = agent(Pinning(replay, tool_deps=fleet_by_region), world).run_sync(PROMPT, deps="Breton")
    assert "Breton fleet of 3 in Paris" in result.output
    assert world.calls == []


def test_the_capability_keys_model_requests_with_the_policy_it_is_given(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def fingerprints(policy: SemanticCallPolicy | None) -> list[dict[str, str]]:
        ledger = PinLedger(store, types, unit_id=f"policy-{policy is not None}")
        Agent(Scripted("scripted-uk").model, capabilities=[Pinning(ledger, policy=policy)]).run_sync(PROMPT)
        return [json.loads(pin.fingerprint or "{}") for pin in ledger.pins() if pin.kind == "model_call"]

    # keep_values keeps the start of each field's value beside its digest; the default policy keeps digests only.
    (kept,) = fingerprints(SemanticCallPolicy(keep_values=True))
    (default,) = fingerprints(None)
    assert any(name.startswith("=") for name in kept)
    assert not any(name.startswith("=") for name in default)
    assert {name for name in kept if not name.startswith("=")} == default.keys()
