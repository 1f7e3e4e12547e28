"""Tool-call assertions: called, called once, called with, in order, never called; from a result or a recording."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from inline_snapshot import snapshot
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from anagrapheus import Pinning
from anagrapheus.testing import (
    ToolCall,
    assert_called,
    assert_called_in_order,
    assert_called_once,
    assert_not_called,
    tool_calls,
)
from anagrapheus.timeline import PinLedger, RecordingHeader, SQLiteEventStore, write_recording

PROMPT = "Pay the fishing licence and tell the harbour master."


def bank(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Look up the fee, transfer it, then notify: three tool calls over three requests."""
    steps = [
        [ToolCallPart("fee", {"licence": "cod"})],
        [ToolCallPart("transfer", {"amount": 120, "to": "harbour", "memo": "licence"})],
        [ToolCallPart("notify", {"to": "harbour master"})],
    ]
    asked = sum(1 for message in messages if message.kind == "response")
    if asked < len(steps):
        return ModelResponse(parts=steps[asked])
    return ModelResponse(parts=[TextPart("Paid and notified.")])


def harbour_agent() -> Agent[None, str]:
    agent = Agent(FunctionModel(bank, model_name="bank"))

    @agent.tool_plain
    def fee(licence: str) -> int:
        return 120

    @agent.tool_plain
    def transfer(amount: int, to: str, memo: str) -> str:
        return "done"

    @agent.tool_plain
    def notify(to: str) -> str:
        return "sent"

    return agent


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("calls") / "harbour.jsonl"
    with SQLiteEventStore(path.with_suffix(".db")) as store:
        ledger = PinLedger(store, unit_id="licence")
        harbour_agent().run_sync(PROMPT, capabilities=[Pinning(ledger)])
        ledger.commit()
        header = RecordingHeader(description="A licence paid", recorded_with="scripted", rerecord="pytest")
        write_recording(path, store.read(), header=header)
    return path


def test_the_calls_read_from_a_result_its_messages_and_its_recording_are_the_same(recording: Path) -> None:
    result = harbour_agent().run_sync(PROMPT)

    expected = [
        ToolCall("fee", {"licence": "cod"}),
        ToolCall("transfer", {"amount": 120, "to": "harbour", "memo": "licence"}),
        ToolCall("notify", {"to": "harbour master"}),
    ]
    assert tool_calls(result) == expected
    assert tool_calls(result.all_messages()) == expected
    assert tool_calls(recording) == expected
    assert tool_calls(recording, unit="another") == []


@pytest.mark.parametrize("source", ["result", "recording"])
def test_each_assertion_passes_on_the_calls_the_run_made(source: str, recording: Path) -> None:
    run = harbour_agent().run_sync(PROMPT) if source == "result" else recording

    assert assert_called(run, "transfer") == ToolCall("transfer", {"amount": 120, "to": "harbour", "memo": "licence"})
    assert_called(run, "transfer", amount=120, to="harbour")
    assert_called_once(run, "transfer", amount=120)
    assert_called_in_order(run, "transfer", "notify")
    assert_called_in_order(run, "fee", "notify")
    assert_not_called(run, "refund")
    assert_not_called(run, "transfer", amount=1200)


def test_a_failed_assertion_lists_the_calls_that_were_made(recording: Path) -> None:
    with pytest.raises(AssertionError) as raised:
        assert_called(recording, "transfer", amount=1200)
    assert str(raised.value) == snapshot("""\
transfer(amount=1200) was not called; the run made 3 tool call(s):
  1. fee(licence='cod')
  2. transfer(amount=120, to='harbour', memo='licence')
  3. notify(to='harbour master')\
""")

    with pytest.raises(AssertionError) as raised:
        assert_called_in_order(recording, "notify", "transfer")
    assert str(raised.value).splitlines()[0] == snapshot(
        "the calls were not made in the order notify before transfer (transfer missing); the run made 3 tool call(s):"
    )

    with pytest.raises(AssertionError) as raised:
        assert_not_called(recording, "notify")
    assert str(raised.value).splitlines()[0] == snapshot("notify was called (#3); the run made 3 tool call(s):")

    twice = [*tool_calls(recording), ToolCall("notify", {"to": "coastguard"})]
    with pytest.raises(AssertionError) as raised:
        assert_called_once(twice, "notify")
    assert str(raised.value).splitlines()[0] == snapshot(
        "notify was called 2 times, not once; the run made 4 tool call(s):"
    )
    assert_called_once(twice, "notify", to="coastguard")

    with pytest.raises(AssertionError) as raised:
        assert_called_once([], "notify")
    assert str(raised.value) == snapshot("notify was not called, not once; the run made no tool call")


class Paid(BaseModel):
    paid: bool


def test_a_streamed_call_has_its_argument_text_read_and_the_output_tool_is_left_out() -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[DeltaToolCalls]:
        if len(messages) == 1:
            yield {0: DeltaToolCall(name="notify", json_args='{"to": "harbour')}
            yield {0: DeltaToolCall(json_args=' master"}')}
        else:
            yield {0: DeltaToolCall(name="final_result", json_args='{"paid": true}')}

    agent = Agent(FunctionModel(stream_function=stream, model_name="streamer"), output_type=Paid)

    @agent.tool_plain
    def notify(to: str) -> str:
        return "sent"

    async def run() -> list[ToolCall]:
        async with agent.run_stream(PROMPT) as result:
            await result.get_output()
            return tool_calls(result)

    assert asyncio.run(run()) == [ToolCall("notify", {"to": "harbour master"})]


def test_something_that_holds_no_calls_is_refused_by_type() -> None:
    with pytest.raises(TypeError, match="expected a run result, its messages, a recording's path or events"):
        tool_calls(42)
