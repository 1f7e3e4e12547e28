"""MCP under `Pinning`: the server's tool list, instructions and tool calls are pinned; a replay never starts it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import AbstractToolset

from anagrapheus import Pinning
from anagrapheus.provider.discovery import TOOLSET_INSTRUCTIONS, TOOLSET_TOOLS
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import pin_key
from tests.fidelity_runs import HARBOUR

PROMPT = "Where can the fleet berth?"


def servers_running() -> list[str]:
    """The command lines of this process's children that run the test server (read from Linux's /proc)."""
    running = []
    for entry in Path("/proc").iterdir():
        try:
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):  # not a process, or one gone meanwhile
            continue
        if parent == str(os.getpid()) and HARBOUR.name in command:
            running.append(command)
    return running


@pytest.fixture(autouse=True)
def no_server_outlives_its_test() -> Iterator[None]:
    yield
    if Path("/proc/self/stat").exists():
        assert servers_running() == [], "an MCP test server is still running after its test"


def harbour(starts: Path, *, script: Path = HARBOUR, id: str | None = None) -> MCPToolset[None]:
    """The test server over stdio; each start appends a line to `starts`."""
    # keep_alive=False: the server ends with the session that started it, not with the test run; a loaded machine
    # may take more than the default 5 s to import the MCP SDK in a fresh interpreter.
    transport = StdioTransport(
        sys.executable, [str(script)], env={"ANAGRAPHEUS_MCP_STARTS": str(starts)}, keep_alive=False
    )
    return MCPToolset(transport, include_instructions=True, id=id, init_timeout=60)


def started(starts: Path) -> int:
    return len(starts.read_text().splitlines()) if starts.exists() else 0


def berthing(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask every tool offered for Brest once, then repeat what they said and what the instructions told."""
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart(tool.name, {"port": "Brest"}) for tool in info.function_tools])
    said = "; ".join(str(part.content) for part in messages[-1].parts)
    return ModelResponse(parts=[TextPart(f"{said} (told: {info.instructions})")])


def agent(pinning: Pinning, *toolsets: AbstractToolset[None]) -> Agent[None, str]:
    return Agent(FunctionModel(berthing, model_name="scripted-uk"), toolsets=list(toolsets), capabilities=[pinning])


def test_a_replay_answers_discovery_and_calls_with_the_server_absent(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    starts = tmp_path / "starts.log"
    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger), harbour(starts)).run_sync(PROMPT)
    assert {TOOLSET_TOOLS, TOOLSET_INSTRUCTIONS, "tool_call"} <= {pin.kind for pin in ledger.pins()}
    ledger.commit()
    assert started(starts) == 1
    assert live.output == "Brest: 4 free berths (told: Ask the harbour master before you berth.)"

    # The script named is not there: only a replay that never starts the server can pass.
    gone = harbour(starts, script=tmp_path / "no-such-server.py")
    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types)), gone).run_sync(PROMPT)

    assert replayed.all_messages_json() == live.all_messages_json()
    assert started(starts) == 1


def test_servers_are_keyed_by_id_or_by_their_place_among_those_without(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    starts = tmp_path / "starts.log"

    def harbours(script: Path = HARBOUR) -> list[AbstractToolset[None]]:
        # Both serve `berths`, so each is prefixed; the leaves are still MCP toolsets, and pinned as such.
        north = harbour(starts, script=script, id="north-harbour").prefixed("north")
        return [north, harbour(starts, script=script).prefixed("south")]

    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger), *harbours()).run_sync(PROMPT)
    listings = [pin.key for pin in ledger.pins() if pin.kind == TOOLSET_TOOLS]
    ledger.commit()
    assert started(starts) == 2
    assert live.output.count("Brest: 4 free berths") == 2
    assert sorted(listings) == sorted(
        [pin_key(TOOLSET_TOOLS, {"toolset": "north-harbour"}), pin_key(TOOLSET_TOOLS, {"toolset": "#0"})]
    )

    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types)), *harbours(tmp_path / "gone.py"))
    assert replayed.run_sync(PROMPT).all_messages_json() == live.all_messages_json()
    assert started(starts) == 2


def test_entering_the_agent_starts_the_server_even_under_replay(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    # `async with agent:` enters the agent's own toolsets, outside any capability: documented, and held here.
    starts = tmp_path / "starts.log"
    ledger = PinLedger(store, types)
    agent(Pinning(ledger), harbour(starts)).run_sync(PROMPT)
    ledger.commit()

    async def entered() -> None:
        replaying = agent(Pinning(ReplayPins.from_events(store.read(), types)), harbour(starts))
        async with replaying:
            await replaying.run(PROMPT)

    anyio.run(entered)
    assert started(starts) == 2


def test_pinning_tells_the_model_what_an_unpinned_run_tells_it(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    # The server's instructions keep their key (`toolset:<id>`) through the pin, so the request is the same.
    starts = tmp_path / "starts.log"
    unpinned = Agent(FunctionModel(berthing), toolsets=[harbour(starts, id="harbour")]).run_sync(PROMPT)
    pinned = agent(Pinning(PinLedger(store, types)), harbour(starts, id="harbour")).run_sync(PROMPT)

    assert pinned.output == unpinned.output
    assert 'id="toolset:harbour"' in pinned.output
