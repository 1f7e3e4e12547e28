"""Delegation replays whole (#45): pydantic-ai's three multi-agent patterns, each run unpinned, pinned, replayed.

Delegation in a tool, hand-off by an output function, and programmatic hand-off by the app: live, pinning changes
nothing; replayed strictly with model requests refused, the delegate's run happens again, answered from its pins,
so the app sees its messages as live, and the run's output, usage and messages are live's, byte for byte.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import RequestUsage, RunUsage

from anagrapheus import Pinning
from anagrapheus.errors import PinResultError
from anagrapheus.provider import PinnedModel, pinned_tool
from anagrapheus.provider.delegation import delegated
from anagrapheus.provider.every_run import refuse_model_requests
from anagrapheus.provider.failures import FAILURES, did_before_failing, failed_having_done
from anagrapheus.provider.outputs import DELEGATED, Delegated, delegated_of, delegated_raw
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.resolving.resolver import Resolver

PROMPT = "Which stock is most at risk?"
ANSWER = "Hake: spawning biomass below the limit."
PATTERNS = ["tool", "output", "app"]


@dataclass
class World:
    """What the app's models and tools were asked, and the delegate's messages as the app's code saw them."""

    router: int = 0
    scientist: int = 0
    assessed: int = 0
    """How many times the delegate's own tool ran: a body that did not delegate is answered from its pin."""
    delegates: list[bytes] = field(default_factory=list[bytes])


@dataclass(frozen=True)
class Seen:
    """What the app got from one run of a pattern."""

    output: object
    usage: RunUsage
    messages: bytes
    delegates: list[bytes]


class Refusal(BaseModel):
    """The router's other output: it will not route the question."""

    reason: str


def dumped(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


def returned(messages: list[ModelMessage]) -> str | None:
    """What the last request returns from a tool, if it returns anything."""
    last = messages[-1]
    parts = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    return str(parts[0].content) if parts else None


def fishery(
    world: World, pins: Resolver | None, pattern: str, *, wrapped: bool = False
) -> Callable[[], Awaitable[Seen]]:
    """pydantic-ai's multi-agent patterns over two scripted agents, a router and the scientist it delegates to.

    Pinned by the `Pinning` capability, or, `wrapped`, by the other adapter: each model in a `PinnedModel` and
    each tool made with `pinned_tool`, no capability.
    """
    capabilities: list[Any] = [] if pins is None or wrapped else [Pinning(pins)]

    def model(function: Callable[[list[ModelMessage], AgentInfo], ModelResponse], name: str) -> Any:
        scripted = FunctionModel(function, model_name=name)
        return PinnedModel(scripted, pins) if wrapped and pins is not None else scripted

    def tool(function: Callable[..., Any]) -> Any:
        return pinned_tool(pins, function) if wrapped and pins is not None else function

    def scientist(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        world.scientist += 1
        assessment = returned(messages)
        if assessment is None:
            return ModelResponse(parts=[ToolCallPart("stock_assessment", {"species": "hake"})])
        return ModelResponse(
            parts=[TextPart(f"{ANSWER} ({assessment})")], usage=RequestUsage(input_tokens=300, output_tokens=40)
        )

    def stock_assessment(species: str) -> str:
        """The latest assessment of a stock."""
        world.assessed += 1
        return f"{species}: SSB 41kt"

    expert = Agent(model(scientist, "scripted-scientist"), tools=[tool(stock_assessment)], capabilities=capabilities)

    async def ask_the_scientist(ctx: RunContext[None], question: str) -> str:
        """Hand the question to the fisheries scientist."""
        result = await expert.run(question, usage=ctx.usage)
        world.delegates.append(dumped(result.all_messages()))
        return result.output

    def router(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        world.router += 1
        if pattern == "output":
            name = next(t.name for t in info.output_tools if "ask_the_scientist" in t.name)
            return ModelResponse(parts=[ToolCallPart(name, {"question": "cod or hake?"})])
        relayed = returned(messages)
        if pattern == "tool" and relayed is None:
            return ModelResponse(parts=[ToolCallPart("ask_the_scientist", {"question": "cod or hake?"})])
        return ModelResponse(parts=[TextPart(f"Relayed: {relayed}" if relayed else "Ask about cod or hake.")])

    routing = model(router, "scripted-router")
    if pattern == "output":
        front: Agent[None, Any] = Agent(routing, output_type=[ask_the_scientist, Refusal], capabilities=capabilities)
    else:
        tools = [tool(ask_the_scientist)] if pattern == "tool" else []
        front = Agent(routing, capabilities=capabilities, tools=tools)

    async def run() -> Seen:
        if pattern != "app":
            result = await front.run(PROMPT)
            return Seen(result.output, result.usage, dumped(result.all_messages()), world.delegates)
        # Programmatic hand-off: the app runs the router, then the scientist with the same usage.
        usage = RunUsage()
        first = await front.run(PROMPT, usage=usage)
        second = await expert.run(str(first.output), usage=usage)
        world.delegates.append(dumped(second.all_messages()))
        return Seen(second.output, usage, dumped(first.all_messages()), world.delegates)

    return run


def shape(messages: bytes) -> object:
    """Messages without what a live run draws afresh each time (times, ids): what pinning must leave unchanged."""
    drawn = {"timestamp", "request_timestamp", "duration", "run_id", "conversation_id", "tool_call_id"}

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in drawn}  # pyright: ignore[reportUnknownVariableType]
        if isinstance(value, list):
            return [strip(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
        return value

    return strip(json.loads(messages))


def assert_live_unchanged(unpinned: Seen, live: Seen) -> None:
    assert live.output == unpinned.output
    assert live.usage == unpinned.usage
    assert shape(live.messages) == shape(unpinned.messages)
    assert [shape(d) for d in live.delegates] == [shape(d) for d in unpinned.delegates]


@pytest.mark.anyio
@pytest.mark.parametrize("pattern", PATTERNS)
async def test_each_multi_agent_pattern_replays_the_delegates_run_and_messages_as_live(
    pattern: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned = await fishery(World(), None, pattern)()
    ledger = PinLedger(store, types)
    live = await fishery(World(), ledger, pattern)()
    ledger.commit()
    world = World()
    replay = ReplayPins.from_store(store, types)
    with refuse_model_requests():
        replayed = await fishery(world, replay, pattern)()

    assert_live_unchanged(unpinned, live)
    assert len(live.delegates) == 1
    assert live.usage.requests == (4 if pattern == "tool" else 3)  # the router's two (or one), the scientist's two
    # Replayed: no model and no tool reached, yet the delegate ran, and the app saw what it saw live.
    assert (world.router, world.scientist, world.assessed) == (0, 0, 0)
    assert replayed == live
    assert replay.unused() == {}


@pytest.mark.anyio
@pytest.mark.parametrize("pattern", PATTERNS)
async def test_a_delegation_recorded_anew_from_a_replay_replays_strictly(
    pattern: str, store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    ledger = PinLedger(store, types)
    live = await fishery(World(), ledger, pattern)()
    ledger.commit()
    with SQLiteEventStore(tmp_path / "again.db") as again_store:
        into = PinLedger(again_store, types)
        recorded = await fishery(World(), ReplayPins.from_store(store, types, on_miss="record", into=into), pattern)()
        into.commit()
        world = World()
        strict = ReplayPins.from_store(again_store, types)
        with refuse_model_requests():
            replayed = await fishery(world, strict, pattern)()

    assert (world.router, world.scientist, world.assessed) == (0, 0, 0)
    assert recorded.output == replayed.output == live.output
    assert recorded.usage == replayed.usage == live.usage
    assert replayed == recorded
    assert len(replayed.delegates) == 1
    # The new unit's runs draw their own ids and times (its positions are its own): all else is the recording's.
    assert shape(replayed.messages) == shape(live.messages)
    assert [shape(d) for d in replayed.delegates] == [shape(d) for d in live.delegates]
    assert strict.unused() == {}


@pytest.mark.anyio
@pytest.mark.parametrize("pattern", PATTERNS)
async def test_each_pattern_replays_the_delegates_run_under_pinned_models_and_pinned_tools(
    pattern: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """The other adapter: `PinnedModel` for each agent's model and `pinned_tool` for each tool, no capability."""
    unpinned = await fishery(World(), None, pattern, wrapped=True)()
    ledger = PinLedger(store, types)
    live = await fishery(World(), ledger, pattern, wrapped=True)()
    ledger.commit()
    world = World()
    replay = ReplayPins.from_store(store, types)
    with refuse_model_requests():
        replayed = await fishery(world, replay, pattern, wrapped=True)()

    assert_live_unchanged(unpinned, live)
    assert (world.router, world.scientist, world.assessed) == (0, 0, 0)
    # Without the capability the runs' times and ids are not pinned: all else is live's.
    assert replayed.output == live.output
    assert replayed.usage == live.usage
    assert shape(replayed.messages) == shape(live.messages)
    assert [shape(d) for d in replayed.delegates] == [shape(d) for d in live.delegates] != []
    assert replay.unused() == {}


def fails_once(world: World, pins: Resolver | None, by: str) -> Callable[[], Awaitable[Seen]]:
    """A tool or output function that asks the scientist, then asks the model to try again once (`ModelRetry`)."""
    capabilities: list[Any] = [] if pins is None else [Pinning(pins)]

    def scientist(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        world.scientist += 1
        return ModelResponse(parts=[TextPart(ANSWER)], usage=RequestUsage(input_tokens=300, output_tokens=40))

    expert = Agent(FunctionModel(scientist, model_name="scripted-scientist"), capabilities=capabilities)

    async def ask_the_scientist(ctx: RunContext[None], question: str) -> str:
        """Hand the question to the fisheries scientist."""
        result = await expert.run(question, usage=ctx.usage)
        world.delegates.append(dumped(result.all_messages()))
        if question == "cod?":
            raise ModelRetry("ask about hake")
        return result.output

    def router(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        world.router += 1
        asked = sum(isinstance(m, ModelResponse) for m in messages)
        if by == "tool" and returned(messages) not in (None, "ask about hake"):
            return ModelResponse(parts=[TextPart(f"Relayed: {returned(messages)}")])
        name = next(t.name for t in info.output_tools) if by == "output" else "ask_the_scientist"
        return ModelResponse(parts=[ToolCallPart(name, {"question": "cod?" if asked == 0 else "hake?"})])

    model = FunctionModel(router, model_name="scripted-router")
    if by == "output":
        front: Agent[None, Any] = Agent(model, output_type=ask_the_scientist, capabilities=capabilities)
    else:
        front = Agent(model, tools=[ask_the_scientist], capabilities=capabilities)

    async def run() -> Seen:
        result = await front.run(PROMPT)
        return Seen(result.output, result.usage, dumped(result.all_messages()), world.delegates)

    return run


@pytest.mark.anyio
@pytest.mark.parametrize("by", ["tool", "output"])
async def test_a_body_that_delegated_then_failed_keeps_the_delegates_usage_live_and_on_replay(
    by: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Before, a tool that raised after its delegate ran lost the delegate's usage live (it was added to a copy), and
    # a replay of either lost it.
    unpinned = await fails_once(World(), None, by)()
    ledger = PinLedger(store, types)
    live = await fails_once(World(), ledger, by)()
    ledger.commit()
    world = World()
    replay = ReplayPins.from_store(store, types)
    with refuse_model_requests():
        replayed = await fails_once(world, replay, by)()

    assert_live_unchanged(unpinned, live)
    assert len(live.delegates) == 2  # the failed call's delegate, and the retried one's
    assert (world.router, world.scientist) == (0, 0)
    assert replayed == live
    assert replay.unused() == {}


@pytest.mark.anyio
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream"])
async def test_two_delegations_at_once_replay_each_delegates_run(
    streamed: bool, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """The router asks about two stocks in one response: both tools delegate at once, each to its own run."""

    def app(world: World, pins: Resolver | None) -> Callable[[], Awaitable[Seen]]:
        capabilities: list[Any] = [] if pins is None else [Pinning(pins)]

        def scientist(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            world.scientist += 1
            asked = messages[-1].parts[-1]
            return ModelResponse(parts=[TextPart(f"{getattr(asked, 'content', '')}: below the limit")])

        expert = Agent(FunctionModel(scientist, model_name="scripted-scientist"), capabilities=capabilities)

        def router(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            world.router += 1
            if len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart("ask", {"stock": s}, tool_call_id=s) for s in ("cod", "hake")])
            return ModelResponse(parts=[TextPart("Both below the limit.")])

        async def streamed_router(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
            for index, part in enumerate(router(messages, info).parts):
                if isinstance(part, TextPart):
                    yield part.content
                elif isinstance(part, ToolCallPart):
                    yield {index: DeltaToolCall(part.tool_name, part.args_as_json_str())}

        model = FunctionModel(router, stream_function=streamed_router, model_name="scripted-router")
        front = Agent(model, capabilities=capabilities)

        @front.tool
        async def ask(ctx: RunContext[None], stock: str) -> str:  # pyright: ignore[reportUnusedFunction]
            """Ask the fisheries scientist about a stock."""
            result = await expert.run(stock, usage=ctx.usage)
            world.delegates.append(dumped(result.all_messages()))
            return result.output

        async def run() -> Seen:
            if streamed:
                async with front.run_stream(PROMPT) as result:
                    output = await result.get_output()
                return Seen(output, result.usage, dumped(result.all_messages()), sorted(world.delegates))
            done = await front.run(PROMPT)
            return Seen(done.output, done.usage, dumped(done.all_messages()), sorted(world.delegates))

        return run

    unpinned = await app(World(), None)()
    ledger = PinLedger(store, types)
    live = await app(World(), ledger)()
    ledger.commit()
    world = World()
    replay = ReplayPins.from_store(store, types)
    with refuse_model_requests():
        replayed = await app(world, replay)()

    assert_live_unchanged(unpinned, live)
    assert len(live.delegates) == 2
    assert (world.router, world.scientist) == (0, 0)
    assert replayed == live
    assert replay.unused() == {}


@pytest.mark.anyio
async def test_a_delegation_asked_again_under_dedupe_repeats_runs_its_delegate_once_as_live(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """With the repeat rule opted out, the second asking is answered from the first's pin live: no second run."""

    def app(world: World, pins: Resolver) -> Callable[[], Awaitable[Seen]]:
        capabilities: list[Any] = [Pinning(pins, dedupe_repeats=True)]

        def scientist(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            world.scientist += 1
            return ModelResponse(parts=[TextPart(ANSWER)])

        expert = Agent(FunctionModel(scientist, model_name="scripted-scientist"), capabilities=capabilities)

        def router(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            world.router += 1
            if sum(isinstance(m, ModelResponse) for m in messages) < 2:
                return ModelResponse(parts=[ToolCallPart("ask", {"stock": "hake"})])
            return ModelResponse(parts=[TextPart("Asked twice.")])

        front = Agent(FunctionModel(router, model_name="scripted-router"), capabilities=capabilities)

        @front.tool
        async def ask(ctx: RunContext[None], stock: str) -> str:  # pyright: ignore[reportUnusedFunction]
            """Ask the fisheries scientist about a stock."""
            result = await expert.run(stock, usage=ctx.usage)
            world.delegates.append(dumped(result.all_messages()))
            return result.output

        async def run() -> Seen:
            done = await front.run(PROMPT)
            return Seen(done.output, done.usage, dumped(done.all_messages()), world.delegates)

        return run

    ledger = PinLedger(store, types)
    live = await app(World(), ledger)()
    ledger.commit()
    world = World()
    with refuse_model_requests():
        replayed = await app(world, ReplayPins.from_store(store, types))()

    assert len(live.delegates) == 1
    assert (world.router, world.scientist) == (0, 0)
    assert replayed == live


def test_only_a_body_that_asked_model_requests_the_replay_holds_runs_again(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    asked = "p1:model_call:" + "0" * 64
    ledger.resolve(asked, kind="model_call", effect=lambda: "pinned", interpret=str)
    ledger.commit()
    replay = ReplayPins.from_store(store, types)
    position = "p1:run_id:" + "1" * 64
    assert delegated(replay, [position, asked])  # the positions are the unit's, whichever unit: not looked for
    assert not delegated(replay, [])  # it asked nothing
    assert not delegated(replay, ["p1:tool_call:" + "2" * 64])  # a pinned call, no model: its effects stay undone
    assert not delegated(replay, [asked, "p1:model_call:" + "3" * 64])  # its delegate pinned elsewhere
    assert not delegated(PinLedger(store, types), [asked])  # live: the body runs as it always does


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


def test_a_failure_pin_keeps_what_the_call_did_beside_its_recipe_and_only_when_it_did_something() -> None:
    plain = FAILURES.describe(ModelRetry("ask about hake"))
    assert isinstance(plain, dict) and "did" not in plain
    error = ModelRetry("ask about hake")
    failed_having_done(error, {"runs": 1})
    described = FAILURES.describe(error)
    assert described == {**plain, "did": {"runs": 1}}  # the recipe is the plain failure's
    rebuilt = FAILURES.rebuild(described)
    assert type(rebuilt) is ModelRetry and str(rebuilt) == "ask about hake"
    assert did_before_failing(rebuilt) == {"runs": 1}
    assert did_before_failing(FAILURES.rebuild(plain)) is None


@pytest.mark.parametrize(
    "usage",
    [
        RunUsage(),
        RunUsage(requests=2, tool_calls=1, input_tokens=50, output_tokens=7, details={"reasoning": 3}),
        RunUsage(requests=1, input_tokens=5, cost=Decimal("0.0125"), details={"a": 1, "b": 2}),
    ],
)
def test_a_tool_calls_usage_copies_are_deep_copies_made_cheaply(usage: RunUsage) -> None:
    # A drawn tool call watches two copies of its run's usage (#43: shallow, its details copied, where a deep copy
    # took seven times as long): each equal to a deep copy, and neither shares anything a delegate's usage changes.
    from anagrapheus.provider.tools import _usage_copy  # pyright: ignore[reportPrivateUsage]

    copied = _usage_copy(usage)
    assert copied == copy.deepcopy(usage) and copied is not usage
    before = copy.deepcopy(usage)
    copied.incr(RunUsage(requests=1, input_tokens=9, cost=Decimal("0.5"), details={"reasoning": 4, "new": 1}))
    assert usage == before
    assert copied.details is not usage.details
    usage.provider_counter = [1]  # anything but a count: deep-copied, as before
    odd = _usage_copy(usage)
    assert odd == copy.deepcopy(usage) and odd.provider_counter is not usage.provider_counter
