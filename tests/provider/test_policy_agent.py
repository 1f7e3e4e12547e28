"""The call policy on what a pydantic-ai agent really sends: captured requests, streamed and not."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from anagrapheus.provider import PinnedModel, SemanticCallPolicy, call_pin
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from anagrapheus.timeline.canonical import pin_key
from anagrapheus.timeline.fingerprint import fingerprint_of

pytestmark = pytest.mark.anyio


class Catch(BaseModel):
    species: str
    tonnes: int


@dataclass
class Seen:
    """One request as the wrapper received it, keyed at once (before anything downstream can touch it)."""

    key: str
    material: dict[str, Any]
    streamed: bool
    args: list[Any]
    """The tool-call args in the history as pydantic-ai holds them (a JSON string after a stream)."""


class Spy(WrapperModel):
    """Keys every request the agent sends, streamed or not, exactly as PinnedModel would."""

    def __init__(self, wrapped: Model) -> None:
        super().__init__(wrapped)
        self.seen: list[Seen] = []

    def _key(
        self, messages: Sequence[ModelMessage], settings: ModelSettings | None, parameters: Any, *, streamed: bool
    ) -> None:
        policy = SemanticCallPolicy()
        pin = call_pin(policy, messages, settings, parameters, model_id=self.wrapped.model_id)
        material = policy.material(messages, settings, parameters, model_id=self.wrapped.model_id)
        assert pin.key == pin_key("model_call", material)
        assert pin.fingerprint == fingerprint_of(material)
        args = [
            p.args for m in messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)
        ]
        self.seen.append(Seen(pin.key, material, streamed, args))

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        self._key(messages, model_settings, model_request_parameters, streamed=False)
        return await super().request(messages, model_settings, model_request_parameters)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        self._key(messages, model_settings, model_request_parameters, streamed=True)
        async with super().request_stream(messages, model_settings, model_request_parameters, run_context) as stream:
            yield stream


def decide(messages: list[ModelMessage], info: AgentInfo) -> list[ToolCallPart]:
    last = messages[-1]
    answered = isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)
    if not answered:
        return [ToolCallPart("quota", {"species": "cod"})]
    return [ToolCallPart(info.output_tools[0].name, {"species": "cod", "tonnes": 12000})]


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=list(decide(messages, info)))


async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[DeltaToolCalls]:
    for index, call in enumerate(decide(messages, info)):
        args = json.dumps(call.args)
        yield {index: DeltaToolCall(name=call.tool_name, json_args=args[:7])}
        yield {index: DeltaToolCall(json_args=args[7:])}


def agent_for(spy: Spy) -> Agent[None, Catch]:
    agent = Agent(spy, output_type=Catch, instructions="Answer for the UK.", model_settings={"max_tokens": 300})

    @agent.tool_plain
    def quota(species: str) -> str:
        """Look up this year's quota."""
        return f"{species}: 12,000 tonnes"

    return agent


def spy() -> Spy:
    return Spy(FunctionModel(answer, stream_function=stream, model_name="uk", settings={"temperature": 0.2}))


async def test_two_runs_of_one_conversation_key_every_request_alike() -> None:
    first, second = spy(), spy()
    await agent_for(first).run("Round 1: cod.", model_settings={"timeout": 5})
    await agent_for(second).run("Round 1: cod.", model_settings={"timeout": 9})
    assert len(first.seen) == 2
    assert [s.key for s in first.seen] == [s.key for s in second.seen]


async def test_a_streamed_run_keys_its_requests_like_the_plain_run() -> None:
    plain, streamed = spy(), spy()
    await agent_for(plain).run("Round 1: cod.")
    async with agent_for(streamed).run_stream("Round 1: cod.") as result:
        await result.get_output()
    assert [s.streamed for s in streamed.seen] == [True, True]
    assert [type(a) for a in streamed.seen[1].args] == [str], "the stream leaves the args as JSON text"
    assert [type(a) for a in plain.seen[1].args] == [dict]
    assert [s.key for s in streamed.seen] == [s.key for s in plain.seen]


async def test_a_run_continuing_a_history_keys_like_the_run_that_made_it() -> None:
    original = spy()
    first = await agent_for(original).run("Round 1: cod.")
    again = spy()
    await agent_for(again).run("Round 2: haddock.", message_history=first.all_messages())
    replayed = spy()
    loaded = first.all_messages_json()
    await agent_for(replayed).run("Round 2: haddock.", message_history=ModelMessagesTypeAdapter.validate_json(loaded))
    assert [s.key for s in replayed.seen] == [s.key for s in again.seen]


async def test_a_different_question_is_a_different_key() -> None:
    uk, eu = spy(), spy()
    await agent_for(uk).run("Round 1: cod.")
    await agent_for(eu).run("Round 1: hake.")
    assert uk.seen[0].key != eu.seen[0].key


async def test_the_material_holds_the_effective_settings_and_the_request_parameters() -> None:
    seen = spy()
    await agent_for(seen).run("Round 1: cod.", model_settings={"seed": 3, "timeout": 5})
    material = seen.seen[1].material
    assert material["model"] == "function:uk"
    assert material["settings"] == {"temperature": 0.2, "max_tokens": 300, "seed": 3}
    assert list(material["tools"]) == ["quota"]
    assert material["output"]["object"]["json_schema"]["title"] == "Catch"
    assert list(material["output"]["tools"]) == ["final_result"]
    assert material["instructions"][0]["content"] == "Answer for the UK."
    call, answer = material["messages"][1]["parts"][0], material["messages"][2]["parts"][0]
    assert call["tool_call_id"] == answer["tool_call_id"] == 1
    assert call["args"] == {"species": "cod"}


async def test_a_live_draw_stores_the_fingerprint_of_its_material(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    seen = spy()
    ledger = PinLedger(store, types)
    await agent_for(seen).run("Round 1: cod.", model=PinnedModel(seen, ledger))
    ledger.commit()
    stored = {event["key"]: event["fingerprint"] for event in (e.payload_json() for e in store.read())}
    assert len(seen.seen) == len(stored) == 2
    for request in seen.seen:
        assert list(stored[request.key].items()) == list(fingerprint_of(request.material).items())
