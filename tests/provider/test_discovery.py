"""MCP discovery under `Pinning`, in this process: an MCP toolset whose server is a stand-in in memory.

tests/integration/test_capability_mcp.py runs a real stdio server; these tests cannot start processes (the mutation runs
refuse them), so `Harbour` answers as that server does and logs every entry into it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date
from typing import Any

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import RunContext
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    InstructionId,
    InstructionPart,
    RunInstructionSource,
)
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

from anagrapheus import Pinning
from anagrapheus.errors import PinResultError
from anagrapheus.provider.discovery import TOOLSET_INSTRUCTIONS, TOOLSET_TOOLS, PinnedDiscovery
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinResolver, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import JSONValue, pin_key
from anagrapheus.timeline.ordered import read_ordered
from tests.integration.test_capability_mcp import agent
from tests.provider.test_capability_clock import Damaged

PROMPT = "Where can the fleet berth?"
BERTHS = ToolDefinition(
    name="berths",
    description="Count the free berths in a port.",
    parameters_json_schema={"type": "object", "properties": {"port": {"type": "string"}}, "required": ["port"]},
)

TOLD = InstructionPart(content="Ask the harbour master.")


class Harbour(MCPToolset[None]):
    """An MCP toolset answered in memory: one tool, instructions, and a log of entries, exits and listings."""

    def __init__(
        self,
        log: list[str],
        *,
        id: str | None = None,
        instructions: Any = TOLD,
        definition: ToolDefinition = BERTHS,
        down: Exception | None = None,
        mute: Exception | None = None,
    ) -> None:
        # The transport is never started: every method that would reach the server is answered here.
        super().__init__(StdioTransport("python", ["no-server.py"]), include_instructions=True, id=id)
        self.log = log
        self.given = instructions
        self.definition = definition
        self.down = down
        self.mute = mute

    async def __aenter__(self) -> Harbour:
        self.log.append(f"enter {self.id}")
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        self.log.append(f"exit {self.id}")
        return None

    async def get_tools(self, ctx: RunContext[None]) -> dict[str, ToolsetTool[None]]:
        self.log.append(f"list {self.id}")
        if self.down is not None:
            raise self.down
        return {self.definition.name: self.tool_for_tool_def(self.definition, ctx=ctx)}

    async def get_instructions(self, ctx: RunContext[None]) -> Any:
        # As a toolset may, it reads the run's context.
        self.log.append(f"instructions {self.id} at step {ctx.run_step}")
        if self.mute is not None:
            raise self.mute
        return self.given

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[None], tool: Any) -> Any:
        self.log.append(f"call {self.id}")
        return f"{tool_args['port']}: 4 free berths ({self.id})"


def harbours(log: list[str]) -> list[AbstractToolset[None]]:
    # Three servers serving one tool name, so each is prefixed; one has an id, two are told apart by place.
    return [
        Harbour(log).prefixed("west"),
        Harbour(log, id="north-harbour").prefixed("north"),
        Harbour(log).prefixed("south"),
    ]


def test_a_replay_answers_discovery_and_calls_without_entering_the_server(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    log: list[str] = []
    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger), Harbour(log)).run_sync(PROMPT)
    assert live.output == "Brest: 4 free berths (None) (told: Ask the harbour master.)"
    assert {TOOLSET_TOOLS, TOOLSET_INSTRUCTIONS, "tool_call"} <= {pin.kind for pin in ledger.pins()}
    assert log[0] == "enter None" and log[-1] == "exit None"
    ledger.commit()

    log.clear()
    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types)), Harbour(log)).run_sync(PROMPT)
    assert replayed.all_messages_json() == live.all_messages_json()
    assert log == []


def test_servers_are_keyed_by_id_or_by_their_place_among_those_without(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    log: list[str] = []
    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger), *harbours(log)).run_sync(PROMPT)
    listed = [pin.key for pin in ledger.pins() if pin.kind == TOOLSET_TOOLS]
    told = [pin.key for pin in ledger.pins() if pin.kind == TOOLSET_INSTRUCTIONS]
    ledger.commit()
    for kind, keys in ((TOOLSET_TOOLS, listed), (TOOLSET_INSTRUCTIONS, told)):
        assert sorted(keys) == sorted(pin_key(kind, {"toolset": name}) for name in ("#0", "north-harbour", "#1"))
    assert live.output.count("4 free berths") == 3

    log.clear()
    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types)), *harbours(log)).run_sync(PROMPT)
    assert replayed.all_messages_json() == live.all_messages_json()
    assert log == []


@pytest.mark.parametrize(
    "instructions",
    [
        "Ask the harbour master.",
        InstructionPart(content="Ask the harbour master."),
        ["Ask the harbour master.", InstructionPart(content="Moor at the north quay.")],
        # An addressed part's id is an object that only its JSON form turns into text.
        InstructionPart(content="Ask the harbour master.", id=InstructionId(RunInstructionSource(), name="berth")),
        [InstructionPart(content="Ask the harbour master.", id=InstructionId(RunInstructionSource(), name="berth"))],
        None,
    ],
    ids=["text", "part", "several", "addressed-part", "several-addressed", "none"],
)
def test_the_instructions_replay_as_they_were_given(
    instructions: Any, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    log: list[str] = []
    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger), Harbour(log, id="north", instructions=instructions)).run_sync(PROMPT)
    (told,) = [json.loads(pin.raw_text) for pin in ledger.pins() if pin.kind == TOOLSET_INSTRUCTIONS]
    ledger.commit()
    if instructions is not None:
        assert "Ask the harbour master." in live.output
    # Pinned as JSON: an addressed part's id as the text that names its source (`run:`), not a bare object.
    ids = [part.get("id") for part in (told if isinstance(told, list) else [told]) if isinstance(part, dict)]
    assert all(found is None or found == "run:berth" for found in ids)
    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types)), Harbour(log, id="north")).run_sync(PROMPT)
    assert replayed.all_messages_json() == live.all_messages_json()
    assert replayed.output == live.output


def test_a_pinned_discovery_is_known_by_its_servers_id_and_is_a_leaf(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    discovery = PinnedDiscovery(Harbour([], id="north-harbour"), resolver=PinLedger(store, types), name="#0")
    assert discovery.id == "north-harbour"
    seen: list[AbstractToolset[None]] = []

    def visitor(toolset: AbstractToolset[None]) -> AbstractToolset[None]:
        seen.append(toolset)
        return toolset

    assert discovery.visit_and_replace(visitor) is discovery
    assert seen == [discovery]


@pytest.mark.parametrize(
    ("kind", "raw", "says"),
    [
        (TOOLSET_TOOLS, {"name": "berths"}, "a toolset_tools pin does not hold tool definitions ("),
        (TOOLSET_TOOLS, [{"description": "no name"}], "a toolset_tools pin does not hold tool definitions ("),
        (TOOLSET_INSTRUCTIONS, 7, "a toolset_instructions pin does not hold instructions ("),
    ],
    ids=["tools-not-a-list", "tool-without-name", "instructions-a-number"],
)
def test_a_damaged_discovery_pin_is_refused_saying_what_it_should_hold(
    kind: str, raw: JSONValue, says: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    damaged = Damaged(PinLedger(store, types), kind, raw)
    with pytest.raises(PinResultError) as refused:
        agent(Pinning(cast_resolver(damaged)), Harbour([])).run_sync(PROMPT)
    assert str(refused.value).startswith(says)


def cast_resolver(resolver: object) -> PinResolver:
    assert isinstance(resolver, Damaged)
    return resolver  # pyright: ignore[reportReturnType]


def test_a_listing_is_pinned_in_its_json_form(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    # A definition's metadata may hold what only its JSON form makes text (a date, here).
    dated = replace(BERTHS, metadata={"surveyed": date(2026, 1, 5)})
    log: list[str] = []
    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger), Harbour(log, id="north", definition=dated)).run_sync(PROMPT)
    (listing,) = [pin for pin in ledger.pins() if pin.kind == TOOLSET_TOOLS]
    assert read_ordered(json.loads(listing.raw_text))[0]["metadata"] == {"surveyed": "2026-01-05"}  # pyright: ignore[reportIndexIssue, reportOptionalSubscript, reportArgumentType, reportCallIssue]
    ledger.commit()
    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types)), Harbour(log, id="north")).run_sync(PROMPT)
    assert replayed.all_messages_json() == live.all_messages_json()


@pytest.mark.parametrize("failing", ["down", "mute"], ids=["listing", "instructions"])
def test_a_server_that_failed_to_answer_fails_again_on_replay_without_being_entered(
    failing: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    log: list[str] = []
    ledger = PinLedger(store, types)
    failed = Harbour(log, id="north", **{failing: ConnectionError("the harbour server is down")})
    with pytest.raises(ConnectionError, match="the harbour server is down"):
        agent(Pinning(ledger), failed).run_sync(PROMPT)
    ledger.commit()

    log.clear()
    with pytest.raises(ConnectionError, match="the harbour server is down"):
        agent(Pinning(ReplayPins.from_events(store.read(), types)), Harbour(log, id="north")).run_sync(PROMPT)
    assert log == []
