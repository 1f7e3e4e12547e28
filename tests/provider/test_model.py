"""PinnedModel: every way an agent reaches a model is pinned live and answered from the log under strict replay."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import pytest
from pydantic import TypeAdapter
from pydantic_ai import Agent, RunContext
from pydantic_ai.direct import model_request, model_request_batch
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartStartEvent,
    TextPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.batch import BatchRequest
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.run import AgentRunResultEvent
from pydantic_ai.usage import RequestUsage

from anagrapheus.errors import PartialPin, UsageError
from anagrapheus.provider import PinnedModel, PinnedStreamedResponse
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinMiss, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.ordered import read_ordered
from tests.conftest import Scripted, Verdict

PROMPT = "Round 1: state the UK position on fisheries."
MODES = ["run", "run_stream", "run_stream_events", "iter", "event_stream_handler"]


async def drive(
    agent: Agent[Any, Any], mode: str, prompt: str = PROMPT, *, run_id: str | None = None
) -> tuple[Any, list[ModelMessage]]:
    """Run `agent` once the way `mode` names (as the run `run_id`, if given); return its output and messages."""
    if mode == "run":
        result = await agent.run(prompt, run_id=run_id)
        return result.output, result.all_messages()
    if mode == "run_stream":
        async with agent.run_stream(prompt, run_id=run_id) as streamed:
            output = await streamed.get_output()
            return output, streamed.all_messages()
    if mode == "run_stream_events":
        seen: list[Any] = []
        async with agent.run_stream_events(prompt) as events:
            async for event in events:
                seen.append(event)
        final = seen[-1]
        assert isinstance(final, AgentRunResultEvent)
        assert any(isinstance(e, PartStartEvent) for e in seen)
        return final.result.output, final.result.all_messages()
    if mode == "iter":
        streamed_events: list[Any] = []
        async with agent.iter(prompt) as run:
            async for node in run:
                if Agent.is_model_request_node(node):
                    async with node.stream(run.ctx) as request_stream:
                        streamed_events.extend([event async for event in request_stream])
            assert any(isinstance(e, PartStartEvent) for e in streamed_events)
            assert run.result is not None
            return run.result.output, run.result.all_messages()
    if mode == "event_stream_handler":
        handled: list[AgentStreamEvent] = []

        async def handler(_ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
            async for event in events:
                handled.append(event)

        result = await agent.run(prompt, event_stream_handler=handler)
        assert any(isinstance(e, PartStartEvent) for e in handled)
        return result.output, result.all_messages()
    raise AssertionError(mode)


def responses(messages: list[ModelMessage]) -> list[list[Any]]:
    """The content of each model response: what a replay must reproduce exactly."""
    return [[part.__dict__ | {"timestamp": None} for part in m.parts] for m in messages if isinstance(m, ModelResponse)]


def agent_for(model: PinnedModel, kind: str) -> Agent[Any, Any]:
    """An agent exercising one shape of run: plain text, tool calls (sync and async), or structured output."""
    if kind == "text":
        return Agent(model)
    if kind == "structured":
        return Agent(model, output_type=Verdict)
    agent = Agent(model)

    @agent.tool_plain
    def harbour_count(city: str) -> str:
        return f"{city} has 3 harbours"

    @agent.tool
    async def quota(ctx: RunContext[None], city: str) -> str:
        return f"{city} quota 120t"

    return agent


def replay_of(store: SQLiteEventStore, types: EventTypeRegistry) -> ReplayPins:
    return ReplayPins.from_events(store.read(), types)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["text", "tools", "structured"])
@pytest.mark.parametrize("mode", MODES)
async def test_strict_replay_never_reaches_the_model(
    mode: str, kind: str, store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    live = Scripted("scripted-uk")
    recorded_output, recorded = await drive(agent_for(PinnedModel(live.model, ledger), kind), mode)
    ledger.commit()
    requests = sum(isinstance(m, ModelResponse) for m in recorded)
    assert live.calls == requests == (2 if kind == "tools" else 1)

    replayed = Scripted("scripted-uk")
    output, messages = await drive(agent_for(PinnedModel(replayed.model, replay_of(store, types)), kind), mode)
    assert replayed.calls == 0
    assert output == recorded_output
    assert responses(messages) == responses(recorded)


def test_run_sync_replays(store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger) -> None:
    live = Scripted("scripted-uk")
    recorded = agent_for(PinnedModel(live.model, ledger), "tools").run_sync(PROMPT)
    ledger.commit()
    replayed = Scripted("scripted-uk")
    result = agent_for(PinnedModel(replayed.model, replay_of(store, types)), "tools").run_sync(PROMPT)
    assert (live.calls, replayed.calls) == (2, 0)
    assert result.output == recorded.output == "The UK holds firm on fisheries. Paris has 3 harbours; Paris quota 120t"


@pytest.mark.anyio
@pytest.mark.parametrize(("recorded_with", "replayed_with"), [("run", "run_stream"), ("run_stream", "run")])
async def test_streamed_and_plain_requests_share_pins(
    recorded_with: str, replayed_with: str, store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    live = Scripted("scripted-uk")
    recorded_output, _ = await drive(agent_for(PinnedModel(live.model, ledger), "structured"), recorded_with)
    ledger.commit()
    replayed = Scripted("scripted-uk")
    output, _ = await drive(
        agent_for(PinnedModel(replayed.model, replay_of(store, types)), "structured"), replayed_with
    )
    assert (live.calls, replayed.calls) == (1, 0)
    assert output == recorded_output == Verdict(city="Paris", tonnes=0)


@pytest.mark.anyio
async def test_each_answer_from_one_pin_is_a_response_of_its_own(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    # Asked outside a run, one request is answered from its one pin every time: no answer may share state with the next.
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt(PROMPT)]
    params = ModelRequestParameters()
    recorded = await PinnedModel(Scripted("scripted-uk").model, ledger).request(messages, None, params)
    ledger.commit()
    model = PinnedModel(Scripted("scripted-uk").model, replay_of(store, types))
    first = await model.request(messages, None, params)
    expected = first.parts[0].__dict__.copy()
    assert isinstance(first.parts[0], TextPart)
    first.parts[0].content = "changed by the run that received it"
    first.parts.append(TextPart("added"))
    first.usage.input_tokens += 1000
    second = await model.request(messages, None, params)
    assert second is not first and second.parts is not first.parts and second.usage is not first.usage
    assert second.parts[0].__dict__ == expected == recorded.parts[0].__dict__
    assert len(second.parts) == len(recorded.parts) and second.usage == recorded.usage


@pytest.mark.anyio
async def test_a_replayed_usage_holds_only_what_was_set_and_reads_as_recorded(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    # Validation sets every count on the instance; the agent then adds each name either usage holds to the run's.
    # A replayed usage keeps on itself only what is not its class's very default: every read is the recorded one's.
    usage = RequestUsage(input_tokens=12, cache_read_tokens=0, audio_seconds=0.0, details={"reasoning": 3})

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("done")], usage=usage)

    live = await Agent(PinnedModel(FunctionModel(answer), ledger)).run(PROMPT)
    ledger.commit()
    replayed = await Agent(PinnedModel(FunctionModel(answer), replay_of(store, types))).run(PROMPT)
    recorded, response = live.all_messages()[-1], replayed.all_messages()[-1]
    assert isinstance(recorded, ModelResponse) and isinstance(response, ModelResponse)
    assert [name for name, value in vars(response.usage).items() if value is 0 or value is None] == []  # noqa: F632
    for field in dataclasses.fields(RequestUsage):
        want, got = getattr(recorded.usage, field.name), getattr(response.usage, field.name)
        assert (type(got), got) == (type(want), want), field.name
    assert type(response.usage.audio_seconds) is float  # 0.0 given, where the class's default is the int 0
    assert response.usage == recorded.usage and repr(response.usage) == repr(recorded.usage)
    assert replayed.usage == live.usage and repr(replayed.usage) == repr(live.usage)
    dumped = TypeAdapter(RequestUsage).dump_json
    assert dumped(response.usage) == dumped(recorded.usage)
    response.usage.output_tokens += 5  # written on the instance, never on the class
    assert RequestUsage().output_tokens == 0


@pytest.mark.anyio
async def test_multi_request_run_pins_each_request(store: SQLiteEventStore, ledger: PinLedger) -> None:
    live = Scripted("scripted-uk")
    await agent_for(PinnedModel(live.model, ledger), "tools").run(PROMPT)
    pins = ledger.pins()
    assert [pin.kind for pin in pins] == ["model_call", "model_call"]
    assert len({pin.key for pin in pins}) == 2


@pytest.mark.anyio
async def test_a_retry_in_the_same_unit_resumes_its_run_by_id_and_a_new_run_draws_its_own(ledger: PinLedger) -> None:
    live = Scripted("scripted-uk")
    agent = agent_for(PinnedModel(live.model, ledger), "tools")
    first = await agent.run(PROMPT)
    assert live.calls == 2

    # The same run again (its id given back): answered from its pins, as a retry after a failure is.
    second = await agent.run(PROMPT, run_id=first.run_id)
    assert live.calls == 2
    assert second.output == first.output
    assert [pin.attempts for pin in ledger.pins()] == [2, 2]

    # A new run asking the same reaches the model, as it does unpinned (issue #34), under keys of its own.
    third = await agent.run(PROMPT)
    assert live.calls == 4
    assert third.output == first.output
    assert [pin.attempts for pin in ledger.pins()] == [2, 2, 1, 1]


@pytest.mark.anyio
async def test_an_early_stopped_stream_is_pinned_as_far_as_it_got(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    live = Scripted("scripted-uk")
    async with Agent(PinnedModel(live.model, ledger)).run_stream(PROMPT) as streamed:
        async for _delta in streamed.stream_text(delta=True, debounce_by=None):
            break
    (pin,) = ledger.pins()
    raw = read_ordered(json.loads(pin.raw_text))
    assert isinstance(raw, dict)
    assert raw["state"] != "complete"
    assert raw["parts"][0]["content"] == "The "
    ledger.commit()

    # Replaying the same consumption answers from the partial pin; the model is not reached.
    replayed = Scripted("scripted-uk")
    async with Agent(PinnedModel(replayed.model, replay_of(store, types))).run_stream(PROMPT) as streamed:
        async for delta in streamed.stream_text(delta=True, debounce_by=None):
            assert delta == "The "
            break
    assert replayed.calls == 0

    # Reading past where the recorded stream stopped is not a replay of it, and says so.
    for read_on in ("run_stream", "run"):
        with pytest.raises(PartialPin) as partial:
            await drive(Agent(PinnedModel(replayed.model, replay_of(store, types))), read_on)
        assert (partial.value.key, partial.value.state) == (pin.key, raw["state"])
        assert pin.key in str(partial.value)
    assert replayed.calls == 0


@pytest.mark.anyio
async def test_a_stream_that_fails_midway_is_pinned_with_what_arrived(ledger: PinLedger) -> None:
    live = Scripted("scripted-uk", fail_after_chunks=2)
    run_id = "019b8d62-0000-7000-8000-00000000f41d"
    with pytest.raises(ConnectionError):
        async with Agent(PinnedModel(live.model, ledger)).run_stream(PROMPT, run_id=run_id) as streamed:
            await streamed.get_output()
    (pin,) = ledger.pins()
    assert pin.kind == "model_call!failed"
    raw = json.loads(pin.raw_text)
    assert raw["error"]["type"] == "builtins:ConnectionError"
    captured = read_ordered(raw["captured"])
    assert isinstance(captured, dict)
    assert captured["state"] == "incomplete"
    assert captured["parts"][0]["content"] == "The UK "

    # Asked again in the unit by the same run resumed, the call fails as it did, never answering "The UK " as the whole.
    live.fail_after_chunks = None
    for again in ("run_stream", "run"):
        with pytest.raises(ConnectionError, match="dropped the stream"):
            await drive(Agent(PinnedModel(live.model, ledger)), again, run_id=run_id)
    assert live.calls == 1
    # A retry by the same model after the failure is a draw of its own.
    pinned = PinnedModel(live.model, ledger)
    with pytest.raises(ConnectionError):
        await drive(Agent(pinned), "run", run_id=run_id)
    assert (await drive(Agent(pinned), "run", run_id=run_id))[0] == "The UK holds firm on fisheries."
    assert live.calls == 2
    # A new run reaches the model: no other run's failure is its answer.
    assert (await drive(Agent(PinnedModel(live.model, ledger)), "run"))[0] == "The UK holds firm on fisheries."
    assert live.calls == 3


@pytest.mark.anyio
async def test_a_replayed_stream_is_a_pinned_streamed_response(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    model = PinnedModel(Scripted("scripted-uk").model, ledger)
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt(PROMPT)]
    params = ModelRequestParameters()
    async with model.request_stream(messages, None, params) as live:
        assert not isinstance(live, PinnedStreamedResponse)
        events = [event async for event in live]
    assert len(events) > 2
    ledger.commit()

    replay = PinnedModel(Scripted("scripted-uk").model, replay_of(store, types))
    async with replay.request_stream(messages, None, params) as pinned:
        assert isinstance(pinned, PinnedStreamedResponse)
        replayed_events = [event async for event in pinned]
        assert pinned.get().parts == [TextPart("The UK holds firm on fisheries. ")]
    # The recorded chunk boundaries (#45): the same events, in the same order, as the live stream's.
    assert replayed_events == events
    assert [type(e).__name__ for e in replayed_events][:3] == ["PartStartEvent", "FinalResultEvent", "PartDeltaEvent"]


@pytest.mark.anyio
async def test_pins_hold_no_run_stamps_and_replay_gets_the_new_runs(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    recorded = await Agent(PinnedModel(Scripted("scripted-uk").model, ledger)).run(PROMPT)
    (pin,) = ledger.pins()
    raw = read_ordered(json.loads(pin.raw_text))
    assert isinstance(raw, dict)
    assert raw["run_id"] is None and raw["conversation_id"] is None
    recorded_response = recorded.all_messages()[-1]
    assert isinstance(recorded_response, ModelResponse) and recorded_response.run_id == recorded.run_id
    ledger.commit()

    replayed = await Agent(PinnedModel(Scripted("scripted-uk").model, replay_of(store, types))).run(PROMPT)
    response = replayed.all_messages()[-1]
    assert isinstance(response, ModelResponse)
    assert response.run_id == replayed.run_id != recorded.run_id
    assert response.conversation_id == replayed.conversation_id != recorded.conversation_id


@pytest.mark.anyio
async def test_the_wrapped_models_own_settings_are_part_of_the_key(ledger: PinLedger) -> None:
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt(PROMPT)]
    params = ModelRequestParameters()
    warm = Scripted("scripted-uk").model
    warm._settings = {"temperature": 0.9}  # pyright: ignore[reportPrivateUsage]
    pinned_warm = PinnedModel(warm, ledger)
    pinned_plain = PinnedModel(Scripted("scripted-uk").model, ledger)
    # A direct request passes settings without the model's own; an agent run passes them merged in.
    assert pinned_warm.pin_for(messages, None, params) == pinned_warm.pin_for(messages, {"temperature": 0.9}, params)
    assert pinned_warm.pin_for(messages, None, params) == pinned_plain.pin_for(messages, {"temperature": 0.9}, params)
    assert pinned_warm.pin_for(messages, None, params).key != pinned_plain.pin_for(messages, None, params).key

    # And through pydantic-ai's own entry points: a direct request and an agent run share the pin.
    await model_request(pinned_warm, messages)
    await Agent(pinned_plain, model_settings={"temperature": 0.9}).run(PROMPT)
    (pin,) = ledger.pins()
    assert pin.attempts == 2


@pytest.mark.anyio
async def test_strict_replay_refuses_a_request_it_has_no_pin_for(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    await Agent(PinnedModel(Scripted("scripted-uk").model, ledger)).run(PROMPT)
    ledger.commit()
    model = Scripted("scripted-uk")
    agent = Agent(PinnedModel(model.model, replay_of(store, types)))
    with pytest.raises(PinMiss) as miss:
        await agent.run("Round 1: state the EU position on fisheries.")
    assert miss.value.divergence.kind == "model_call"
    assert model.calls == 0
    with pytest.raises(PinMiss):
        async with agent.run_stream("Round 1: state the EU position on fisheries.") as streamed:
            await streamed.get_output()
    assert model.calls == 0


@pytest.mark.anyio
async def test_token_counts_are_pinned_too(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt(PROMPT)]
    params = ModelRequestParameters()
    counted: list[int] = []

    inner = Scripted("scripted-uk").model

    async def count_tokens(*_args: Any) -> Any:
        from pydantic_ai.usage import RequestUsage

        counted.append(1)
        return RequestUsage(input_tokens=42)

    inner.count_tokens = count_tokens  # type: ignore[method-assign]
    live = await PinnedModel(inner, ledger).count_tokens(messages, None, params)
    assert [pin.kind for pin in ledger.pins()] == ["model_token_count"]
    ledger.commit()
    replayed = await PinnedModel(inner, replay_of(store, types)).count_tokens(messages, None, params)
    assert replayed == live and replayed.input_tokens == 42
    assert counted == [1]
    with pytest.raises(PinMiss):
        await PinnedModel(inner, replay_of(store, types)).count_tokens(messages, {"temperature": 0.1}, params)
    assert counted == [1]


@pytest.mark.anyio
async def test_batches_are_refused_before_anything_is_sent(ledger: PinLedger) -> None:
    live = Scripted("scripted-uk")
    model = PinnedModel(live.model, ledger)
    assert live.model.batch_max_requests is not None  # FunctionModel has a batch API of its own
    assert model.batch_max_requests is None
    request = BatchRequest(custom_id="r1", messages=[ModelRequest.user_text_prompt(PROMPT)])
    with pytest.raises(UserError, match="no batch API"):
        await model_request_batch(model, [request])
    with pytest.raises(UsageError, match="cannot pin batch_encode"):
        await model.batch_encode(request)
    assert live.calls == 0 and ledger.pins() == []


@pytest.mark.anyio
async def test_a_live_stream_passes_events_through_as_they_arrive(ledger: PinLedger) -> None:
    produced: list[str] = []

    async def stream(_messages: list[ModelMessage], _info: AgentInfo) -> AsyncIterator[str]:
        for word in ("The ", "UK ", "holds ", "firm."):
            produced.append(word)
            yield word

    model = PinnedModel(FunctionModel(stream_function=stream, model_name="scripted-uk"), ledger)
    async with model.request_stream([ModelRequest.user_text_prompt(PROMPT)], None, ModelRequestParameters()) as live:
        async for _event in live:
            # The consumer sees the first event before the provider has produced the rest.
            assert produced == ["The "]
            break
    (pin,) = ledger.pins()
    assert read_ordered(json.loads(pin.raw_text))["parts"][0]["content"] == "The "  # pyright: ignore[reportIndexIssue, reportCallIssue, reportArgumentType, reportOptionalSubscript]


@pytest.mark.anyio
async def test_a_suspended_pinned_response_is_continued_at_once(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    requests: list[int] = []
    delays: list[str | None] = []

    def background_job(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        requests.append(len(messages))
        last = messages[-1]
        if isinstance(last, ModelResponse) and last.state == "suspended":
            return ModelResponse(parts=[TextPart("The UK holds firm.")], provider_response_id="job-1")
        return ModelResponse(parts=[], state="suspended", provider_response_id="job-1")

    def continuation_delay(response: ModelResponse) -> float:
        delays.append(response.provider_response_id)
        return 0.01

    inner = FunctionModel(background_job, model_name="scripted-uk")
    inner.continuation_delay = continuation_delay  # type: ignore[method-assign]
    recorded = await Agent(PinnedModel(inner, ledger)).run(PROMPT)
    ledger.commit()
    assert (recorded.output, requests, delays) == ("The UK holds firm.", [1, 2], ["job-1"])

    requests.clear()
    delays.clear()
    replayed = await Agent(PinnedModel(inner, replay_of(store, types))).run(PROMPT)
    assert (replayed.output, requests, delays) == ("The UK holds firm.", [], [])


@pytest.mark.anyio
async def test_compaction_is_pinned_on_the_history_and_its_instructions(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    compacted: list[str | None] = []
    inner = Scripted("scripted-uk").model

    async def compact_messages(_context: ModelRequestContext, *, instructions: str | None = None) -> ModelResponse:
        compacted.append(instructions)
        return ModelResponse(parts=[TextPart("Summary: the UK holds firm.")])

    inner.compact_messages = compact_messages  # type: ignore[method-assign]

    def context(model: PinnedModel) -> ModelRequestContext:
        return ModelRequestContext(
            model=model,
            messages=[ModelRequest.user_text_prompt(PROMPT)],
            model_settings=None,
            model_request_parameters=ModelRequestParameters(),
        )

    live = PinnedModel(inner, ledger)
    first = await live.compact_messages(context(live), instructions="Keep the quotas.")
    assert [pin.kind for pin in ledger.pins()] == ["model_compaction"]
    ledger.commit()

    replay = PinnedModel(inner, replay_of(store, types))
    again = await replay.compact_messages(context(replay), instructions="Keep the quotas.")
    assert again.parts == first.parts and compacted == ["Keep the quotas."]
    with pytest.raises(PinMiss) as miss:
        await replay.compact_messages(context(replay), instructions="Keep the prices.")
    assert miss.value.divergence.moved == ("compaction_instructions",)
    assert compacted == ["Keep the quotas."]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["run", "run_stream"])
async def test_stamps_on_a_live_response_never_reach_its_pin(mode: str, ledger: PinLedger) -> None:
    _output, messages = await drive(Agent(PinnedModel(Scripted("scripted-uk").model, ledger)), mode)
    response = messages[-1]
    assert isinstance(response, ModelResponse) and response.run_id is not None
    (pin,) = ledger.pins()
    raw = read_ordered(json.loads(pin.raw_text))
    assert isinstance(raw, dict)
    assert (raw["run_id"], raw["conversation_id"]) == (None, None)
