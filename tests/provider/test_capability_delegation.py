"""Delegation under `Pinning` (#45): an output function that hands the question to another agent replays whole."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RunUsage

from anagrapheus import Pinning
from anagrapheus.errors import PinResultError
from anagrapheus.provider.every_run import refuse_model_requests
from anagrapheus.provider.outputs import DELEGATED, Delegated, delegated_of, delegated_raw
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

PROMPT = "Which stock is most at risk?"


class Calls:
    """Counts the requests each scripted model was asked."""

    def __init__(self) -> None:
        self.router = 0
        self.scientist = 0


def hand_off(calls: Calls, pinning: Pinning | None) -> Agent[None, str]:
    """pydantic-ai's hand-off by output function: the router's output function asks the scientist, sharing usage."""

    def router(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.router += 1
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"question": "cod or hake?"})])

    def scientist(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.scientist += 1
        return ModelResponse(parts=[TextPart("Hake: spawning biomass below the limit.")])

    capabilities: list[Any] = [] if pinning is None else [pinning]
    expert = Agent(FunctionModel(scientist, model_name="scripted-scientist"), capabilities=capabilities)

    async def ask_the_scientist(ctx: RunContext[None], question: str) -> str:
        """Hand the question to the fisheries scientist."""
        return (await expert.run(question, usage=ctx.usage)).output

    return Agent(
        FunctionModel(router, model_name="scripted-router"), output_type=ask_the_scientist, capabilities=capabilities
    )


@pytest.mark.anyio
async def test_a_hand_off_by_output_function_replays_with_the_usage_of_the_delegate(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    async def asked(calls: Calls, pinning: Pinning | None) -> tuple[str, RunUsage, bytes]:
        result = await hand_off(calls, pinning).run(PROMPT)
        return result.output, result.usage, ModelMessagesTypeAdapter.dump_json(result.all_messages())

    unpinned_calls = Calls()
    unpinned = await asked(unpinned_calls, None)
    ledger = PinLedger(store, types)
    live = await asked(Calls(), Pinning(ledger))
    ledger.commit()
    replay_calls = Calls()
    with refuse_model_requests():
        replayed = await asked(replay_calls, Pinning(ReplayPins.from_store(store, types)))

    assert (replay_calls.router, replay_calls.scientist) == (0, 0)
    assert unpinned[0] == live[0] == replayed[0] == "Hake: spawning biomass below the limit."
    assert unpinned[1].requests == live[1].requests == 2
    assert replayed[1] == live[1]  # the delegate's requests and tokens, as live
    assert replayed[2] == live[2]


def test_what_a_body_did_to_its_run_is_kept_only_when_it_did_something() -> None:
    assert delegated_raw(Delegated()) is None
    assert delegated_raw(Delegated(RunUsage())) is None
    kept = delegated_raw(Delegated(RunUsage(requests=1, input_tokens=57), runs=1, within=["p1:model_call:x"]))
    assert delegated_of({DELEGATED: kept}) == Delegated(RunUsage(requests=1, input_tokens=57), 1, ["p1:model_call:x"])
    assert delegated_of({"ordered_json": "1"}) == Delegated()


@pytest.mark.parametrize("kept", [[1], {"runs": -1}, {"within": [3]}, {"usage": {"requests": "many"}}])
def test_a_damaged_record_of_what_a_body_did_is_refused(kept: Any) -> None:
    with pytest.raises(PinResultError, match="as what its body did"):
        delegated_of({DELEGATED: kept})


def delegating(calls: Calls, pinning: Pinning | None, *, by: str) -> Any:
    """pydantic-ai's two other multi-agent patterns: delegation in a tool, and programmatic hand-off by the app."""
    capabilities: list[Any] = [] if pinning is None else [pinning]

    def scientist(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.scientist += 1
        return ModelResponse(parts=[TextPart("Hake: spawning biomass below the limit.")])

    expert = Agent(FunctionModel(scientist, model_name="scripted-scientist"), capabilities=capabilities)

    def router(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.router += 1
        last = messages[-1].parts[-1]
        if by == "tool" and len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("ask_the_scientist", {"question": "cod or hake?"})])
        return ModelResponse(parts=[TextPart(f"Relayed: {getattr(last, 'content', '')}")])

    front = Agent(FunctionModel(router, model_name="scripted-router"), capabilities=capabilities)

    @front.tool
    async def ask_the_scientist(ctx: RunContext[None], question: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Ask the fisheries scientist."""
        return (await expert.run(question, usage=ctx.usage)).output

    async def run() -> tuple[str, RunUsage, bytes]:
        if by == "tool":
            result = await front.run(PROMPT)
            return result.output, result.usage, ModelMessagesTypeAdapter.dump_json(result.all_messages())
        # Programmatic hand-off: the app runs one agent, then the next with the same usage.
        usage = RunUsage()
        first = await front.run(PROMPT, usage=usage)
        second = await expert.run(first.output, usage=usage)
        messages = first.all_messages() + second.all_messages()
        return second.output, usage, ModelMessagesTypeAdapter.dump_json(messages)

    return run


@pytest.mark.anyio
@pytest.mark.parametrize("by", ["tool", "app"])
async def test_delegation_in_a_tool_and_a_programmatic_hand_off_replay_with_live_usage_and_messages(
    by: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned = await delegating(Calls(), None, by=by)()
    ledger = PinLedger(store, types)
    live = await delegating(Calls(), Pinning(ledger), by=by)()
    ledger.commit()
    replay_calls = Calls()
    with refuse_model_requests():
        replayed = await delegating(replay_calls, Pinning(ReplayPins.from_store(store, types)), by=by)()

    assert (replay_calls.router, replay_calls.scientist) == (0, 0)
    assert unpinned[0] == live[0] == replayed[0]
    assert unpinned[1] == live[1] == replayed[1]
    assert replayed[2] == live[2]
