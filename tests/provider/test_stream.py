"""A run that stops reading a stream early is pinned as far as it got, and replays to that point, debounced or not."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, AgentRunResultEvent, ToolOutput
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from anagrapheus import Pinning
from anagrapheus.errors import PartialPin, PinResultError
from anagrapheus.provider.every_run import refuse_model_requests
from anagrapheus.provider.stream import CHUNKS, chunks_in, chunks_of, replayed_events
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

pytestmark = pytest.mark.anyio

DEFAULT = "default"  # stream_text()'s own debounce: pydantic-ai groups deltas for 0.1 s


class Slow:
    """A provider that streams a word every 0.3 s, slower than a debounce groups them; counts its streams."""

    calls = 0

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(stream_function=self._stream, model_name="slow-uk")

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.calls += 1
        for word in ("The ", "UK ", "holds ", "firm."):
            yield word
            await anyio.sleep(0.3)


async def first_delta(agent: Agent[None, str], debounce: float | str | None) -> tuple[str, bytes]:
    """Read one delta of `stream_text(delta=True)` and stop, holding the iterator as application code does."""
    options: dict[str, Any] = {} if debounce == DEFAULT else {"debounce_by": debounce}
    async with agent.run_stream("Round 1: the UK position?") as streamed:
        deltas = streamed.stream_text(delta=True, **options)
        delta = await anext(deltas)
    return delta, ModelMessagesTypeAdapter.dump_json(streamed.all_messages())


async def test_an_early_stop_under_the_default_debounce_is_pinned_every_time(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # The consumer's stop cancels the run; the stream is pinned on the way out, and that write is not cancelled.
    for _ in range(3):
        ledger = PinLedger(store, types)
        await first_delta(Agent(Slow().model, capabilities=[Pinning(ledger)]), DEFAULT)
        assert "model_call" in [pin.kind for pin in ledger.pins()]
        ledger.abandon(reason="checked")


@pytest.mark.parametrize("recorded_with", [DEFAULT, None])
async def test_an_early_stop_replays_to_the_same_point_whatever_the_debounce(
    recorded_with: float | str | None, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = await first_delta(Agent(Slow().model, capabilities=[Pinning(ledger)]), recorded_with)
    ledger.commit()
    assert live[0].startswith("The ")

    for debounce in (DEFAULT, None, 0.3):
        slow = Slow()
        replay = ReplayPins.from_events(store.read(), types)
        assert await first_delta(Agent(slow.model, capabilities=[Pinning(replay)]), debounce) == live
        assert slow.calls == 0


async def test_reading_on_past_an_early_stop_still_says_where_the_recording_stopped(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    await first_delta(Agent(Slow().model, capabilities=[Pinning(ledger)]), None)
    ledger.commit()

    replay = ReplayPins.from_events(store.read(), types)
    with pytest.raises(PartialPin):
        async with Agent(Slow().model, capabilities=[Pinning(replay)]).run_stream("Round 1: the UK position?") as run:
            await run.get_output()


# Chunk boundaries (#45): a replayed stream yields the live stream's deltas and events, in their order; a consumer
# that stopped after N deltas, N events or at a chosen part stops there again, with no `PartialPin`.

WORDS = ("Storm ", "warning ", "for ", "the ", "coast.")
PROMPT = "Any warnings for the fleet?"


class Quick:
    """A provider that streams a text word by word, then (with `call`) a tool call's arguments in pieces."""

    def __init__(self, *, call: bool = False) -> None:
        self.calls = 0
        self.call = call

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(stream_function=self._stream, model_name="quick-uk")

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        self.calls += 1
        for word in WORDS:
            yield word
        if self.call:
            yield {1: DeltaToolCall(name="berth", json_args='{"port": ')}
            yield {1: DeltaToolCall(json_args='"Brest"}')}


def seen(event: object) -> str:
    """An event as a consumer sees it: its kind, part and what it carries."""
    if isinstance(event, PartStartEvent):
        return f"start {event.index} {event.part!r} after {event.previous_part_kind}"
    if isinstance(event, PartDeltaEvent):
        return f"delta {event.index} {event.delta!r}"
    if isinstance(event, PartEndEvent):
        return f"end {event.index} {event.part!r} before {event.next_part_kind}"
    return type(event).__name__


async def three_ways(
    store: SQLiteEventStore, types: EventTypeRegistry, consume: Any, *, call: bool = False
) -> tuple[Any, Any, Any]:
    """What `consume(agent)` saw unpinned, pinned live and replayed strictly (the model refused and never called)."""
    unpinned = await consume(Agent(Quick(call=call).model))
    ledger = PinLedger(store, types)
    live = await consume(Agent(Quick(call=call).model, capabilities=[Pinning(ledger)]))
    ledger.commit()
    quick = Quick(call=call)
    with refuse_model_requests():
        replay = ReplayPins.from_store(store, types, unit_id=ledger.unit_id)
        replayed = await consume(Agent(quick.model, capabilities=[Pinning(replay)]))
    assert quick.calls == 0
    return unpinned, live, replayed


async def two_deltas(agent: Agent[None, str]) -> tuple[list[str], bytes, str]:
    deltas: list[str] = []
    async with agent.run_stream(PROMPT) as streamed:
        async for delta in streamed.stream_text(delta=True, debounce_by=None):
            deltas.append(delta)
            if len(deltas) == 2:
                break
    messages = streamed.all_messages()
    text = "".join(
        p.content for m in messages if isinstance(m, ModelResponse) for p in m.parts if hasattr(p, "content")
    )
    return deltas, ModelMessagesTypeAdapter.dump_json(messages), text


async def test_a_consumer_stopping_after_two_deltas_replays_them_as_they_arrived(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned, live, replayed = await three_ways(store, types, two_deltas)
    assert unpinned[0] == live[0] == replayed[0] == ["Storm ", "warning "]
    assert unpinned[2] == live[2]  # live unchanged by pinning
    assert replayed[1] == live[1]  # all_messages byte for byte

    # Reading past where the recording stopped still says so, naming the key.
    async def three_deltas(agent: Agent[None, str]) -> list[str]:
        async with agent.run_stream(PROMPT) as streamed:
            return [delta async for delta in streamed.stream_text(delta=True, debounce_by=None)][:3]

    replay = ReplayPins.from_store(store, types)
    with refuse_model_requests(), pytest.raises(PartialPin, match="p1:model_call:") as stopped:
        await three_deltas(Agent(Quick().model, capabilities=[Pinning(replay)]))
    assert stopped.value.key.startswith("p1:model_call:")


async def test_a_whole_stream_replays_its_deltas_and_events_in_their_order(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    async def every_event(agent: Agent[None, str]) -> tuple[list[str], bytes | None]:
        events: list[str] = []
        messages: bytes | None = None
        async with agent.run_stream_events(PROMPT) as stream:
            async for event in stream:
                events.append(seen(event))
                if isinstance(event, AgentRunResultEvent):
                    messages = ModelMessagesTypeAdapter.dump_json(event.result.all_messages())
        return events, messages

    unpinned, live, replayed = await three_ways(store, types, every_event)
    assert unpinned[0] == live[0] == replayed[0]
    assert [e.split(" ")[0] for e in live[0]].count("delta") == len(WORDS) - 1
    assert replayed[1] == live[1]

    # The plain-request twin: the stream's pin answers a plain run, with the very response.
    with refuse_model_requests():
        plain = await Agent(Quick().model).run(PROMPT, capabilities=[Pinning(ReplayPins.from_store(store, types))])
    assert plain.output == "".join(WORDS)


async def test_a_consumer_stopping_after_n_events_or_at_a_chosen_part_stops_there_again(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def stopping(at: Any) -> Any:
        async def consume(agent: Agent[None, str]) -> list[str]:
            events: list[str] = []
            async with agent.run_stream_events(PROMPT) as stream:
                async for event in stream:
                    events.append(seen(event))
                    if at(event, events):
                        break
            return events

        return consume

    def unstamped(events: list[str]) -> list[str]:
        # An unpinned run's tool-call ids are fresh uuids; a pinned one's are its recording's.
        return [re.sub("pyd_ai_[0-9a-f]+", "pyd_ai_", event) for event in events]

    after_four = stopping(lambda event, events: len(events) == 4)
    unpinned, live, replayed = await three_ways(store, types, after_four, call=True)
    assert unpinned == live == replayed and len(live) == 4

    at_the_call = stopping(lambda event, events: isinstance(event, PartEndEvent) and event.index == 1)
    unpinned, live, replayed = await three_ways(store, types, at_the_call, call=True)
    assert unstamped(unpinned) == unstamped(live) and replayed == live
    assert live[-1].startswith("end 1 ToolCallPart(tool_name='berth'") and any(e.startswith("delta 1") for e in live)


class Verdict(BaseModel):
    species: str
    tonnes: int


def verdict(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"species": "cod", "tonnes": 12})])


async def verdict_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[DeltaToolCalls]:
    yield {0: DeltaToolCall(name=info.output_tools[0].name, json_args='{"species": "cod", ')}
    yield {0: DeltaToolCall(json_args='"tonnes": 12}')}


def output_call(messages: list[ModelMessage]) -> dict[str, Any]:
    """The output tool's call as the run's messages hold it, less the fields every run draws anew."""
    (response,) = [m for m in messages if isinstance(m, ModelResponse)]
    (call,) = ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]["parts"]
    return {name: value for name, value in call.items() if name not in ("tool_call_id", "timestamp")}


@pytest.mark.parametrize("recorded_by", ["run", "run_stream"])
async def test_a_stream_rebuilt_from_a_pin_carries_every_field_of_the_live_stream(
    recorded_by: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def agent(*capabilities: Pinning) -> Agent[None, Verdict]:
        model = FunctionModel(verdict, stream_function=verdict_stream, model_name="verdict-uk")
        return Agent(model, output_type=ToolOutput(Verdict), capabilities=list(capabilities))

    async def streamed(made: Agent[None, Verdict]) -> list[ModelMessage]:
        async with made.run_stream(PROMPT) as run:
            await run.get_output()
        return run.all_messages()

    unpinned = await streamed(agent())
    ledger = PinLedger(store, types)
    if recorded_by == "run":
        live = (await agent(Pinning(ledger)).run(PROMPT)).all_messages()
    else:
        live = await streamed(agent(Pinning(ledger)))
    ledger.commit()
    with refuse_model_requests():
        replayed = await streamed(agent(Pinning(ReplayPins.from_store(store, types))))

    # pydantic-ai 2.78 gives an output tool's call `tool_kind='output'` (a streamed one as it arrives); 2.68 nothing.
    # A plain request's arguments are what the scripted model returned (a dict), a stream's the text it sent.
    assert output_call(replayed) | {"args": None} == output_call(unpinned) | {"args": None}
    assert output_call(replayed).get("tool_kind") == output_call(unpinned).get("tool_kind")
    if recorded_by == "run_stream":
        assert ModelMessagesTypeAdapter.dump_json(replayed) == ModelMessagesTypeAdapter.dump_json(live)


# The boundaries themselves (anagrapheus.provider.stream): built from a parts manager's events as a provider yields
# them, kept as offsets where an offset says it all and whole where not, and refused when damaged.


def provider_events(*, signed: bool = False) -> tuple[ModelResponse, list[Any]]:
    """A thinking part, a text and a tool call, streamed in pieces through pydantic-ai's own parts manager."""
    from pydantic_ai._parts_manager import ModelResponsePartsManager  # pyright: ignore[reportPrivateUsage]
    from pydantic_ai.models import ModelRequestParameters

    parts = ModelResponsePartsManager(model_request_parameters=ModelRequestParameters())
    events: list[Any] = []
    for piece in ("weigh ", "the ", "quota"):
        events += parts.handle_thinking_delta(vendor_part_id="think", content=piece)
    if signed:
        events += parts.handle_thinking_delta(vendor_part_id="think", signature="sig-1")
    for piece in WORDS:
        events += parts.handle_text_delta(vendor_part_id="text", content=piece)
    for name, args in (("berth", '{"port": '), (None, '"Brest"}')):
        event = parts.handle_tool_call_delta(vendor_part_id="call", tool_name=name, args=args, tool_call_id="c1")
        events += [] if event is None else [event]
    return ModelResponse(parts=parts.get_parts()), events


@pytest.mark.parametrize("signed", [False, True], ids=["offsets only", "a signature kept whole"])
def test_boundaries_rebuild_every_event_a_provider_yielded(signed: bool) -> None:
    response, events = provider_events(signed=signed)
    chunks = chunks_of(response, events, ended=True)
    assert chunks is not None and chunks[-1] == "end"
    assert list(replayed_events(response, chunks)) == events
    whole = [entry for entry in chunks if isinstance(entry, dict)]
    if signed:
        # A start without the signature the part ends with, and the delta carrying it, are no offsets: kept whole.
        assert len(whole) == 2 and chunks[1:3] == [[0, 10], [0, 15]]
    else:
        assert not whole and chunks[:3] == [[0, 6], [0, 10], [0, 15]]
    # A call whose every piece repeats its id: `[index, end, 1]`.
    assert chunks[-3:] == [[2, 9], [2, 17, 1], "end"]


def test_events_that_do_not_build_the_response_keep_no_boundaries() -> None:
    response, events = provider_events()
    assert chunks_of(response, events[:-1], ended=False) is None  # the call's last piece was not seen
    assert chunks_of(response, events[1:], ended=False) is None  # a part that never started
    assert chunks_of(response, [*events, events[-1]], ended=True) is None  # the call's args overrun


@pytest.mark.parametrize(
    ("chunks", "says"),
    [
        ([[7, 1]], "not \\[part index, end\\]"),
        ([["0", 1]], "not \\[part index, end\\]"),
        (["start"], "not \\[part index, end\\]"),
        ([{"event": {"event_kind": "nonsense"}}], "as an event, which it is not"),
        ([[3, 0], [3, 0]], "a delta for part 3, which arrives whole"),
    ],
    ids=["index past the parts", "index not a number", "a word", "an event that is none", "a delta of a whole part"],
)
def test_damaged_boundaries_are_refused_saying_what_they_hold(chunks: list[Any], says: str) -> None:
    from pydantic_ai.messages import BinaryContent, FilePart

    response, _ = provider_events()
    response = ModelResponse(parts=[*response.parts, FilePart(BinaryContent(b"x", media_type="image/png"))])
    with pytest.raises(PinResultError, match=says):
        list(replayed_events(response, chunks))


def test_boundaries_that_are_not_a_list_are_refused() -> None:
    with pytest.raises(PinResultError, match="as its chunks, not a list"):
        chunks_in({CHUNKS: {"0": 1}})
    assert chunks_in({"ordered_json": "{}"}) is None


async def test_a_stream_read_before_it_reached_the_pin_replays_each_part_whole(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """A `FallbackModel` inside one `PinnedModel` reads its member's first event before handing the stream on."""
    from pydantic_ai.models.fallback import FallbackModel

    from anagrapheus.provider import PinnedModel

    def agent(resolver: Any, quick: Quick) -> Agent[None, str]:
        return Agent(PinnedModel(FallbackModel(quick.model, Quick().model), resolver))

    ledger = PinLedger(store, types)
    live = await every_delta(agent(ledger, Quick()))
    (pin,) = [pin for pin in ledger.pins() if pin.kind == "model_call"]
    ledger.commit()
    quick = Quick()
    with refuse_model_requests():
        replayed = await every_delta(agent(ReplayPins.from_store(store, types), quick))
    assert quick.calls == 0
    assert live == list(WORDS)
    assert CHUNKS not in pin.raw_text
    assert "".join(replayed) == "".join(WORDS) and len(replayed) < len(live)  # no boundaries: the text arrives whole


async def every_delta(agent: Agent[None, str]) -> list[str]:
    async with agent.run_stream(PROMPT) as streamed:
        return [delta async for delta in streamed.stream_text(delta=True, debounce_by=None)]
