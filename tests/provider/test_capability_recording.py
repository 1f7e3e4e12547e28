"""Recording under `Pinning` (issue #43): a run's id, place and times are written with the run's draws, never later.

They are held by the ledger when drawn on the event loop's thread and written by the unit's next store step, in a
worker thread: these tests read the unit's scratch from another connection to the file, as a resumed process would.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore


def scratch_kinds(path: Path, unit_id: str) -> list[str]:
    """The kinds of the unit's pins in scratch, as another process would read them (in draw order)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT kind FROM pin_scratch WHERE unit_id = ? ORDER BY draw_no", (unit_id,)).fetchall()
    finally:
        conn.close()
    return [kind for (kind,) in rows]


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"fact about {topic}"


def test_the_runs_id_place_and_times_are_in_scratch_with_its_first_model_request(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    seen: list[list[str]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(scratch_kinds(store.path, ledger.unit_id))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(part, ToolReturnPart) for part in last.parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("lookup", {"topic": "fleets"})])

    result = Agent(FunctionModel(model), tools=[lookup], capabilities=[Pinning(ledger)]).run_sync("Where?")

    # While the first request's effect runs, nothing is written yet: the run's id, its place and the request's
    # times are held, and written with the request's answer, in its one transaction (issue #43 item 2).
    assert seen[0] == []
    # Before the second: all that, the tool call; the times the tool's return brought are held with the request.
    assert seen[1] == ["run_id", "run_place", "run_clock", "model_call", "tool_call"]
    # When the run returns, before any commit, its last times are durable too: nothing is held in memory only.
    assert scratch_kinds(store.path, ledger.unit_id) == [*seen[1], "run_clock", "model_call"]
    assert not ledger.holding
    ledger.commit()

    replayed = Agent(
        FunctionModel(model), tools=[lookup], capabilities=[Pinning(ReplayPins.from_events(store.read(), types))]
    )
    assert replayed.run_sync("Where?").all_messages_json() == result.all_messages_json()


def test_a_run_writes_no_pin_on_the_event_loops_thread(tmp_path: Path, types: EventTypeRegistry) -> None:
    store = SQLiteEventStore(tmp_path / "pins.db")
    loop_threads: set[int] = set()
    writers: set[int] = set()
    conn = store._conn  # pyright: ignore[reportPrivateUsage]  # the store's one connection: who writes through it

    def traced(statement: str) -> None:
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            writers.add(threading.get_ident())

    conn.set_trace_callback(traced)
    ledger = PinLedger(store, types)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        loop_threads.add(threading.get_ident())
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(part, ToolReturnPart) for part in last.parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("lookup", {"topic": "fleets"})])

    async def run() -> None:
        agent = Agent(FunctionModel(model), tools=[lookup], capabilities=[Pinning(ledger)])
        await agent.run("Where?")
        await ledger.acommit()

    asyncio.run(run())
    conn.set_trace_callback(None)
    assert writers, "the run wrote nothing"
    assert not writers & loop_threads, "a pin was written on the event loop's thread"
    assert [e.type for e in store.read()].count("pin_promoted") == 7
    store.close()


def test_a_unit_resumed_by_another_store_answers_the_runs_id_and_times_from_scratch(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    path = tmp_path / "pins.db"
    reached: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reached.append(len(messages))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(part, ToolReturnPart) for part in last.parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("lookup", {"topic": "fleets"})])

    first_store = SQLiteEventStore(path)
    crashed = PinLedger(first_store, types)
    first = Agent(FunctionModel(model), tools=[lookup], capabilities=[Pinning(crashed)]).run_sync("Where?")
    first_store.close()  # the process "dies" here: its pins are in scratch, nothing is committed

    store = SQLiteEventStore(path)
    resumed = PinLedger(store, types, unit_id=crashed.unit_id)
    again = Agent(FunctionModel(model), tools=[lookup], capabilities=[Pinning(resumed)]).run_sync("Where?")
    assert reached == [1, 3], "the resumed run reached the model again"
    assert again.run_id == first.run_id
    assert again.all_messages_json() == first.all_messages_json()
    resumed.commit()
    store.close()
