"""The repeat rule and the approval rule: a live run under `Pinning` reaches the world as often as it does unpinned.

Each test runs one agent unpinned and pinned, counting what reaches the world, then replays the pinned
run strictly: same output, same messages, and nothing reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    NativeOutput,
    PromptedOutput,
    RunContext,
    TextOutput,
    ToolOutput,
)
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from anagrapheus import Pinning
from anagrapheus.errors import CanonicalError, InexactReplay, PinMiss, PinResultError
from anagrapheus.provider import PinnedModel, pinned_tool
from anagrapheus.provider.occurrence import ask, occurrence_key
from anagrapheus.provider.outputs import (
    output_function_named,
    output_pin,
    output_result_from_raw,
    output_result_raw,
    output_returns,
)
from anagrapheus.provider.policy import MODEL_CALL
from anagrapheus.provider.tools import TOOL_CALL, tool_answer_from_raw, tool_pin, tool_result_from_raw, tool_result_raw
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore, canonical_json
from anagrapheus.timeline.events import PinText

PROMPT = "Settle the quota with the UK."
PNG = b"\x89PNG\r\n\x1a\n-a-survey-chart"


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1]
    return [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []


def scripted(*steps: ModelResponse) -> FunctionModel:
    """A model answering its nth request with the nth step, then with a closing text that counts the returns."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent = sum(1 for m in messages if isinstance(m, ModelResponse))
        if sent < len(steps):
            return steps[sent]
        returns = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts]
        return ModelResponse(parts=[TextPart(f"done after {len(returns)} parts")])

    return FunctionModel(answer, model_name="scripted-eu")


def replay_of(store: SQLiteEventStore, types: EventTypeRegistry) -> ReplayPins:
    return ReplayPins.from_store(store, types)


def dumped(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


# --- the repeat rule: a side effect called twice in one run runs twice ---------------------------------------------


@dataclass
class Outbox:
    """A tool with a side effect: each call sends one message."""

    sent: list[str] = field(default_factory=list[str])

    def send(self, to: str) -> str:
        """Send the position paper to a delegation."""
        self.sent.append(to)
        return f"sent #{len(self.sent)} to {to}"


def twice_to_brussels() -> FunctionModel:
    call = ModelResponse(parts=[ToolCallPart("send", {"to": "Brussels"})])
    return scripted(call, call)


def test_a_tool_called_twice_with_the_same_arguments_in_one_run_runs_twice_then_replays(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned = Outbox()
    plain = Agent(twice_to_brussels(), tools=[unpinned.send]).run_sync(PROMPT)

    pinned = Outbox()
    ledger = PinLedger(store, types)
    live = Agent(twice_to_brussels(), tools=[pinned.send], capabilities=[Pinning(ledger)]).run_sync(PROMPT)
    ledger.commit()
    assert pinned.sent == unpinned.sent == ["Brussels", "Brussels"]
    assert live.output == plain.output
    contents = [p.content for m in live.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert contents == ["sent #1 to Brussels", "sent #2 to Brussels"]

    replayed = Outbox()
    replay = replay_of(store, types)
    again = Agent(twice_to_brussels(), tools=[replayed.send], capabilities=[Pinning(replay)]).run_sync(PROMPT)
    assert replayed.sent == []
    assert dumped(again.all_messages()) == dumped(live.all_messages())
    assert replay.unused() == {}


def test_the_opt_out_answers_a_repeated_call_from_the_first_pin_as_before_the_rule(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    for dedupe in (True, ["send"]):
        outbox = Outbox()
        ledger = PinLedger(store, types)
        Agent(twice_to_brussels(), tools=[outbox.send], capabilities=[Pinning(ledger, dedupe_repeats=dedupe)]).run_sync(
            PROMPT
        )
        ledger.abandon(reason="a test of the opt-out")
        assert outbox.sent == ["Brussels"]

    outbox = Outbox()
    ledger = PinLedger(store, types)
    tool = pinned_tool(ledger, outbox.send, dedupe_repeats=True)
    Agent(twice_to_brussels(), tools=[tool]).run_sync(PROMPT)
    assert outbox.sent == ["Brussels"]


def test_a_pinned_tool_called_twice_in_one_run_runs_twice_and_a_retried_run_is_answered_from_its_pins(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    outbox = Outbox()
    ledger = PinLedger(store, types)
    agent = Agent(twice_to_brussels(), tools=[pinned_tool(ledger, outbox.send)])
    first = agent.run_sync(PROMPT)
    assert outbox.sent == ["Brussels", "Brussels"]
    # A retried run (the same run id) counts its occurrences from 1 again: both calls are answered from the pins.
    retried = agent.run_sync(PROMPT, run_id=first.run_id)
    assert outbox.sent == ["Brussels", "Brussels"]
    assert retried.output == first.output
    # A new run sends its own, as it does unpinned (issue #34).
    agent.run_sync(PROMPT)
    assert outbox.sent == ["Brussels"] * 4


# --- the repeat rule: three identical sampling requests draw three samples -----------------------------------------


def test_three_identical_sampling_requests_in_one_run_draw_three_samples(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    drawn: list[str] = []

    def sampler(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        drawn.append(f"sample {len(drawn) + 1}")
        return ModelResponse(parts=[TextPart(drawn[-1])])

    ask_three = ModelResponse(parts=[ToolCallPart("sample_three", {})])

    def agent_with(model: Any) -> Agent[None, str]:
        agent = Agent(scripted(ask_three), name="sampler")

        @agent.tool_plain
        async def sample_three() -> list[str]:
            """Sample the same question three times."""
            asked = [ModelRequest.user_text_prompt("Name a fish.")]
            return [str((await model.request(asked, None, ModelRequestParameters())).parts[0]) for _ in range(3)]

        return agent

    plain = agent_with(FunctionModel(sampler)).run_sync(PROMPT)
    assert len(drawn) == 3
    ledger = PinLedger(store, types)
    live = agent_with(PinnedModel(FunctionModel(sampler), ledger)).run_sync(PROMPT)
    ledger.commit()
    assert len(drawn) == 6
    assert live.output == plain.output
    samples = [p.content for m in live.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert samples == [["TextPart(content='sample 4')", "TextPart(content='sample 5')", "TextPart(content='sample 6')"]]

    replayed = agent_with(PinnedModel(FunctionModel(sampler), replay_of(store, types))).run_sync(PROMPT)
    assert len(drawn) == 6
    assert [p.content for p in replayed.all_messages()[-2].parts] == [p.content for p in live.all_messages()[-2].parts]


# --- the repeat rule: a polling loop polls until the job is done ------------------------------------------------------


@dataclass
class BackgroundJob:
    """A provider job answered `in progress` to the first polls, then done; it counts the requests reaching it."""

    polls_before_done: int = 3
    reached: int = 0

    def model(self) -> FunctionModel:
        inner = FunctionModel(self._answer, model_name="scripted-uk")
        inner.continuation_delay = lambda response: 0.0  # type: ignore[method-assign]
        return inner

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.reached += 1
        if self.reached > 10:
            raise RuntimeError("the job was polled past any reason: a poll is answered from a stale pin")
        if self.reached <= self.polls_before_done:
            return ModelResponse(parts=[], state="suspended", provider_response_id="job-7")
        return ModelResponse(parts=[TextPart("the quota is 410 t")], provider_response_id="job-7")


def test_a_background_job_is_polled_as_often_pinned_as_unpinned_and_replays(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned = BackgroundJob()
    plain = Agent(unpinned.model()).run_sync(PROMPT)

    pinned = BackgroundJob()
    ledger = PinLedger(store, types)
    live = Agent(pinned.model(), capabilities=[Pinning(ledger)]).run_sync(PROMPT)
    ledger.commit()
    assert pinned.reached == unpinned.reached == 4
    assert live.output == plain.output == "the quota is 410 t"

    replayed = BackgroundJob()
    again = Agent(replayed.model(), capabilities=[Pinning(replay_of(store, types))]).run_sync(PROMPT)
    assert replayed.reached == 0
    assert dumped(again.all_messages()) == dumped(live.all_messages())


# --- recordings made before the rule ---------------------------------------------------------------------------------


def test_a_recording_made_before_the_rule_answers_a_repeat_from_the_first_pin_as_often_as_it_was_asked() -> None:
    first = tool_pin("send", {"to": "Brussels"}).key
    # A pin of that time: the result's canonical JSON itself.
    raw = canonical_json("sent #1 to Brussels")
    # Before the rule the second call was answered from the first call's pin: one pin, asked twice.
    old = ReplayPins._collect(  # pyright: ignore[reportPrivateUsage]
        [PinText(unit_id="u", key=first, kind=TOOL_CALL, raw_text=raw, attempts=2, fingerprint=None)],
        unit_id=None,
        on_miss="strict",
        into=None,
    )
    outbox = Outbox()
    result = Agent(twice_to_brussels(), tools=[pinned_tool(old, outbox.send)]).run_sync(PROMPT)
    assert outbox.sent == []
    contents = [p.content for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert contents == ["sent #1 to Brussels", "sent #1 to Brussels"]

    # A third call is past what the recording asked: a miss, not a third answer from the first pin.
    thrice = scripted(*[ModelResponse(parts=[ToolCallPart("send", {"to": "Brussels"})])] * 3)
    old = ReplayPins._collect(  # pyright: ignore[reportPrivateUsage]
        [PinText(unit_id="u", key=first, kind=TOOL_CALL, raw_text=raw, attempts=2, fingerprint=None)],
        unit_id=None,
        on_miss="strict",
        into=None,
    )
    with pytest.raises(PinMiss):
        Agent(thrice, tools=[pinned_tool(old, outbox.send)]).run_sync(PROMPT)


def test_outside_an_agent_run_every_asking_is_the_first() -> None:
    ledger_free = ReplayPins({})
    assert ask("p1:model_call:ab", kind=MODEL_CALL, resolver=ledger_free).key == "p1:model_call:ab"
    assert occurrence_key("p1:model_call:ab", kind=MODEL_CALL, occurrence=1) == "p1:model_call:ab"
    assert occurrence_key("p1:model_call:ab", kind=MODEL_CALL, occurrence=2) != "p1:model_call:ab"


# --- the approval rule ---------------------------------------------------------------------------------------------


@dataclass
class Treasury:
    """A transfer that needs a human's approval before it moves any money."""

    moved: list[int] = field(default_factory=list[int])

    def transfer(self, ctx: RunContext[None], amount: int) -> str:
        """Transfer the quota fee."""
        if not ctx.tool_call_approved:
            raise ApprovalRequired
        self.moved.append(amount)
        return f"moved {amount}"


def approvals_model() -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if returns := tool_returns(messages):
            return ModelResponse(parts=[TextPart(f"told: {returns[0].content}")])
        return ModelResponse(parts=[ToolCallPart("transfer", {"amount": 900}, tool_call_id="pay-1")])

    return FunctionModel(answer, model_name="scripted-uk")


def approve(
    agent: Agent[None, str | DeferredToolRequests], treasury: Treasury
) -> tuple[Any, Any]:  # the two runs' results
    asked = agent.run_sync(PROMPT)
    assert isinstance(asked.output, DeferredToolRequests)
    approved = agent.run_sync(
        message_history=asked.all_messages(), deferred_tool_results=DeferredToolResults(approvals={"pay-1": True})
    )
    return asked, approved


def approvals_agent(treasury: Treasury, *capabilities: Any) -> Agent[None, str | DeferredToolRequests]:
    return Agent(
        approvals_model(),
        output_type=[str, DeferredToolRequests],
        tools=[treasury.transfer],
        capabilities=list(capabilities),
    )


def test_an_approved_tool_call_executes_pinned_as_unpinned_and_replays(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    unpinned = Treasury()
    _, plain = approve(approvals_agent(unpinned), unpinned)

    pinned = Treasury()
    ledger = PinLedger(store, types)
    _, live = approve(approvals_agent(pinned, Pinning(ledger)), pinned)
    ledger.commit()
    assert pinned.moved == unpinned.moved == [900]
    assert live.output == plain.output == "told: moved 900"

    replayed = Treasury()
    _, again = approve(approvals_agent(replayed, Pinning(replay_of(store, types))), replayed)
    assert replayed.moved == []
    assert again.output == live.output


def test_the_approval_joins_a_tool_key_only_when_given() -> None:
    plain = tool_pin("transfer", {"amount": 900}).key
    approved = RunContext.__new__(RunContext)
    approved.tool_call_approved = True
    approved.tool_call_metadata = {"by": "the minister"}
    assert tool_pin("transfer", {"amount": 900}, ctx=approved).key != plain
    unapproved = RunContext.__new__(RunContext)
    unapproved.tool_call_approved = False
    unapproved.tool_call_metadata = None
    assert tool_pin("transfer", {"amount": 900}, ctx=unapproved).key == plain
    assert tool_pin("transfer", {"amount": 900, "ctx": unapproved}).key == plain
    bad = RunContext.__new__(RunContext)
    bad.tool_call_metadata = {"at": object()}
    with pytest.raises(Exception, match="approval metadata of a call of tool 'transfer'"):
        tool_pin("transfer", {"amount": 900}, ctx=bad)


# --- images returned by tools reach the model as images ------------------------------------------------------------


def chart_tools() -> dict[str, Callable[..., Any]]:
    def chart(region: str) -> ToolReturn:
        """Draw the stock survey chart of a region."""
        return ToolReturn(
            return_value={"region": region, "chart": "attached"},
            content=["The survey chart:", BinaryContent(data=PNG, media_type="image/png")],
            metadata={"survey": 2022},
        )

    def picture(region: str) -> BinaryContent:
        """Photograph the harbour of a region."""
        return BinaryContent(data=PNG + region.encode(), media_type="image/png")

    def pictures(region: str) -> dict[str, Any]:
        """Photographs of the region's harbours, with their names."""
        return {"harbours": ["Brest", (BinaryContent(data=PNG, media_type="image/png"),)], "count": 1}

    return {"chart": chart, "picture": picture, "pictures": pictures}


def seen_by_model(tool: str, wrap: Callable[[Callable[..., Any]], Any] | None, *capabilities: Any) -> list[Any]:
    """The requests the model receives in a run calling `tool` once (under replay: the run's, as it would send)."""
    seen: list[ModelMessage] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen[:] = messages
        if len(messages) > 1:
            return ModelResponse(parts=[TextPart("seen")])
        return ModelResponse(parts=[ToolCallPart(tool, {"region": "Biscay"}, tool_call_id="c1")])

    func = chart_tools()[tool]
    agent = Agent(FunctionModel(answer), tools=[wrap(func) if wrap else func], capabilities=list(capabilities))
    result = agent.run_sync(PROMPT)
    sent = seen or result.all_messages()[:-1]
    return [(type(p).__name__, p.content) for m in sent if isinstance(m, ModelRequest) for p in m.parts]


@pytest.mark.parametrize("tool", ["chart", "picture", "pictures"])
def test_a_tool_returning_images_sends_the_model_images_pinned_and_replayed(
    tool: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    plain = seen_by_model(tool, None)
    assert "BinaryContent" in repr(plain)

    ledger = PinLedger(store, types)
    assert seen_by_model(tool, None, Pinning(ledger)) == plain
    ledger.commit()
    assert seen_by_model(tool, None, Pinning(replay_of(store, types))) == plain

    own = PinLedger(store, types, unit_id=f"pinned-{tool}")
    assert seen_by_model(tool, lambda f: pinned_tool(own, f)) == plain
    own.commit()
    replay = ReplayPins.from_store(store, types, unit_id=f"pinned-{tool}")
    assert seen_by_model(tool, lambda f: pinned_tool(replay, f)) == plain


def test_a_tagged_tool_result_is_rebuilt_only_from_what_it_could_have_written() -> None:
    raw = tool_result_raw("picture", [BinaryContent(data=PNG, media_type="image/png"), {"n": 1}])
    assert tool_result_from_raw(raw) == [BinaryContent(data=PNG, media_type="image/png"), {"n": 1}]
    for forged in (
        {"$anagrapheus.tool_result": 1, "value": "no node"},
        {"$anagrapheus.tool_result": 1, "value": {"$t": "content", "class": "ModelRequest", "v": {}}},
        {"$anagrapheus.tool_result": 1, "value": {"$t": "ToolReturn", "v": {"evil": {"$t": "json", "v": 1}}}},
    ):
        with pytest.raises(PinResultError):
            tool_result_from_raw(forged)
    with pytest.raises(PinResultError, match="returned object, which has no JSON form"):
        tool_result_raw("picture", [BinaryContent(data=PNG, media_type="image/png"), object()])


# --- what a tool enqueues into its run is enqueued again when its pin answers -----------------------------------


def noting_tool(ctx: RunContext[None], region: str) -> str:
    """Survey a region, and tell the model about the survey in the next request."""
    ctx.enqueue("The survey was late.", BinaryContent(data=PNG, media_type="image/png"))
    ctx.enqueue(SystemPromptPart("Quote the survey."), priority="when_idle")
    return f"{region}: 410 t"


def enqueuing_model() -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("noting_tool", {"region": "Biscay"}, tool_call_id="s1")])
        return ModelResponse(parts=[TextPart(f"seen {len(messages)} messages")])

    return FunctionModel(answer, model_name="scripted-eu")


@pytest.mark.parametrize("how", ["capability", "pinned_tool"])
def test_what_a_tool_enqueues_reaches_the_model_again_on_strict_replay(
    how: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def run(resolver: Any) -> Any:
        if how == "capability":
            return Agent(enqueuing_model(), tools=[noting_tool], capabilities=[Pinning(resolver)]).run_sync(PROMPT)
        return Agent(enqueuing_model(), tools=[pinned_tool(resolver, noting_tool)]).run_sync(PROMPT)

    plain = Agent(enqueuing_model(), tools=[noting_tool]).run_sync(PROMPT)
    ledger = PinLedger(store, types)
    live = run(ledger)
    ledger.commit()
    assert live.output == plain.output
    again = run(replay_of(store, types))
    if how == "capability":
        assert dumped(again.all_messages()) == dumped(live.all_messages())
    else:
        # Without the capability the run's own clock is not pinned: compare what the model was sent.
        def sent(result: Any) -> list[Any]:
            return [(type(p).__name__, getattr(p, "content", None)) for m in result.all_messages() for p in m.parts]

        assert sent(again) == sent(live)


def test_an_enqueued_record_is_rebuilt_only_from_what_it_could_have_written() -> None:
    for forged in (
        {"$anagrapheus.tool_result": 1, "value": {"$t": "json", "v": 1}, "enqueued": "no list"},
        {"$anagrapheus.tool_result": 1, "value": {"$t": "json", "v": 1}, "enqueued": [{"content": []}]},
    ):
        with pytest.raises(PinResultError):
            tool_result_from_raw(forged)


# --- an agent delegating inside a tool: its usage and the runs after it replay exactly --------------------------------


def delegating_agents(pinning: Pinning | None, reached: list[str]) -> Agent[None, str]:
    def lead(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reached.append("lead")
        usage = RequestUsage(input_tokens=5, output_tokens=5)
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("ask_the_scientist", {"species": "cod"})], usage=usage)
        return ModelResponse(parts=[TextPart(f"the scientist says: {tool_returns(messages)[0].content}")], usage=usage)

    def scientist(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reached.append("scientist")
        return ModelResponse(
            parts=[TextPart("cod is recovering")], usage=RequestUsage(input_tokens=300, output_tokens=200)
        )

    capabilities = [pinning] if pinning is not None else []
    agent = Agent(FunctionModel(lead, model_name="scripted-eu"), capabilities=capabilities)

    @agent.tool
    async def ask_the_scientist(ctx: RunContext[None], species: str) -> str:
        """Ask the fisheries scientist (a sub-agent) about a species."""
        sub = Agent(FunctionModel(scientist, model_name="scripted-scientist"), capabilities=capabilities)
        return (await sub.run(f"What is the state of {species}?", usage=ctx.usage)).output

    return agent


def test_a_tool_delegating_to_an_agent_replays_its_usage_and_the_run_ids_after_it(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    reached: list[str] = []
    plain = delegating_agents(None, reached).run_sync(PROMPT)
    assert (plain.usage.requests, plain.usage.total_tokens) == (3, 520)

    ledger = PinLedger(store, types)
    pinning = Pinning(ledger)
    live = [delegating_agents(pinning, reached).run_sync(PROMPT) for _ in range(2)]
    ledger.commit()
    assert live[0].usage == plain.usage

    reached.clear()
    replay = replay_of(store, types)
    replaying = Pinning(replay)
    again = [delegating_agents(replaying, reached).run_sync(PROMPT) for _ in range(2)]
    assert reached == []
    for recorded, replayed in zip(live, again, strict=True):
        assert replayed.usage == recorded.usage
        assert replayed.run_id == recorded.run_id
        assert dumped(replayed.all_messages()) == dumped(recorded.all_messages())
    # The scientist's own pins were asked for by the tool when it ran: none is left over as stale.
    assert replay.unused() == {}


def test_a_tool_pin_saying_what_its_call_did_is_read_back_only_when_well_formed() -> None:
    base = {"$anagrapheus.tool_result": 1, "value": {"$t": "json", "v": 1}}
    for field_name, value in (("usage", {"requests": "many"}), ("runs", -1), ("runs", True), ("within", [1])):
        with pytest.raises(PinResultError):
            tool_result_from_raw({**base, field_name: value})
    # Anything else beside a result is a plain JSON result that happens to look alike: returned as it is.
    odd = {**base, "other": 1}
    assert tool_result_from_raw(odd) == odd


# --- a FallbackModel over PinnedModel members: exact with Pinning or one PinnedModel around it; refused without -------


def overloaded(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise ModelHTTPError(503, "primary", {"error": {"message": "overloaded", "type": "server_error"}})


async def overloaded_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    raise ModelHTTPError(503, "primary", {"error": {"message": "overloaded", "type": "server_error"}})
    yield ""  # pragma: no cover - a stream function is a generator


def answering(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("the quota is 410 t")])


async def answering_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield "the quota is 410 t"


def members(resolver: Any) -> FallbackModel:
    primary = FunctionModel(overloaded, stream_function=overloaded_stream, model_name="primary")
    secondary = FunctionModel(answering, stream_function=answering_stream, model_name="secondary")
    return FallbackModel(PinnedModel(primary, resolver), PinnedModel(secondary, resolver))


def test_a_fallback_over_pinned_members_without_pinning_refuses_to_replay_its_failed_attempts_inexactly(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = Agent(members(ledger)).run_sync(PROMPT)
    ledger.commit()
    assert live.output == "the quota is 410 t"
    with pytest.raises(InexactReplay, match="FallbackModel over PinnedModel members"):
        Agent(members(replay_of(store, types))).run_sync(PROMPT)

    async def streamed(resolver: Any) -> str:
        async with Agent(members(resolver)).run_stream(PROMPT) as stream:
            return await stream.get_output()

    streaming = PinLedger(store, types, unit_id="streamed")
    assert asyncio.run(streamed(streaming)) == "the quota is 410 t"
    streaming.commit()
    with pytest.raises(InexactReplay):
        asyncio.run(streamed(ReplayPins.from_store(store, types, unit_id="streamed")))


@pytest.mark.parametrize("how", ["capability", "around"])
def test_a_fallback_replays_its_failed_attempts_exactly_under_pinning_or_one_pinned_model(
    how: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def run(resolver: Any) -> Any:
        if how == "capability":
            return Agent(members(resolver), capabilities=[Pinning(resolver)]).run_sync(PROMPT)
        primary = FunctionModel(overloaded, model_name="primary")
        secondary = FunctionModel(answering, model_name="secondary")
        return Agent(PinnedModel(FallbackModel(primary, secondary), resolver)).run_sync(PROMPT)

    ledger = PinLedger(store, types)
    live = run(ledger)
    ledger.commit()
    again = run(replay_of(store, types))
    attempts = [m.failed_attempts for m in live.all_messages() if isinstance(m, ModelResponse)]
    assert attempts[0] and len(attempts[0]) == 1
    assert [m.failed_attempts for m in again.all_messages() if isinstance(m, ModelResponse)] == attempts


# --- output functions are pinned like tools -----------------------------------------------------------------------


class Quota(BaseModel):
    species: str
    tonnes: int


@dataclass
class Registry:
    """An output function's world: each call files the quota and reads back its filing number."""

    filed: list[str] = field(default_factory=list[str])

    def file_quota(self, species: str, tonnes: int) -> Quota:
        """File the agreed quota."""
        self.filed.append(species)
        return Quota(species=species, tonnes=tonnes + len(self.filed))

    def split(self, text: str) -> list[str]:
        self.filed.append(text)
        return [*text.split(), str(len(self.filed))]

    def shapeless(self, text: str):  # type: ignore[no-untyped-def]
        return Registry()


def outputting(kind: str) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if kind == "tool":
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"species": "cod", "tonnes": 400})])
        return ModelResponse(parts=[TextPart("cod four hundred")])

    return FunctionModel(answer, model_name="scripted-eu")


@pytest.mark.parametrize("kind", ["tool", "text"])
def test_an_output_function_runs_once_per_run_pinned_and_never_on_replay(
    kind: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def agent(registry: Registry, *capabilities: Any) -> Agent[None, Any]:
        output: Any = ToolOutput(registry.file_quota) if kind == "tool" else TextOutput(registry.split)
        return Agent(outputting(kind), output_type=output, capabilities=list(capabilities))

    unpinned = Registry()
    plain = agent(unpinned).run_sync(PROMPT)
    pinned = Registry()
    ledger = PinLedger(store, types)
    live = agent(pinned, Pinning(ledger)).run_sync(PROMPT)
    ledger.commit()
    assert pinned.filed == unpinned.filed
    assert live.output == plain.output

    replayed = Registry()
    again = agent(replayed, Pinning(replay_of(store, types))).run_sync(PROMPT)
    assert replayed.filed == []
    assert again.output == live.output
    assert type(again.output) is type(live.output)
    assert dumped(again.all_messages()) == dumped(live.all_messages())


def test_an_output_function_whose_result_would_not_replay_equal_is_refused_while_recording(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    agent = Agent(
        outputting("text"),
        output_type=TextOutput(Registry().shapeless),
        capabilities=[Pinning(PinLedger(store, types))],
    )
    with pytest.raises(PinResultError, match="output function 'shapeless'"):
        agent.run_sync(PROMPT)


@dataclass(eq=False)
class Filing:
    """A result that is equal only to itself, so no rebuilt copy of it can stand in for it."""

    number: int


def filed(text: str) -> Filing:
    return Filing(len(text))


def unannotated(text):  # type: ignore[no-untyped-def]
    return text.split()


def mistyped(text: str) -> UnresolvableName:  # type: ignore[name-defined]  # noqa: F821
    return text


def test_output_functions_are_found_rebuilt_and_refused_by_their_annotations() -> None:
    spec = [NativeOutput([filed, str]), PromptedOutput(unannotated), Registry().split, TextOutput(mistyped)]
    assert output_function_named(spec, "filed") is filed
    assert output_function_named(spec, "unannotated") is unannotated
    assert output_function_named(spec, "split") is not None
    assert output_function_named(spec, "nowhere") is None
    assert output_returns(None) is None
    assert output_returns(unannotated) is None
    assert output_returns(mistyped) is None
    assert output_returns(filed) is Filing
    # Without an annotation a JSON result comes back as itself; with one, as that type.
    assert output_result_from_raw(None, output_result_raw("unannotated", None, ["cod", "haddock"])) == [
        "cod",
        "haddock",
    ]
    with pytest.raises(PinResultError, match="would not replay equal"):
        output_result_raw("filed", Filing, Filing(3))
    with pytest.raises(PinResultError, match="does not hold"):
        output_result_from_raw(int, "many")
    with pytest.raises(CanonicalError, match="output function 'filed'"):
        output_pin("filed", object(), partial=False)
    assert output_pin("filed", "cod", partial=True)[0] != output_pin("filed", "cod", partial=False)[0]


def test_whole_messages_enqueued_by_a_tool_are_rebuilt_and_unknown_nodes_refused() -> None:
    asked = ModelRequest(parts=[UserPromptPart("Quote the survey.")])
    raw = tool_result_raw("survey", "done", enqueued=[((asked,), "asap")])
    answer = tool_answer_from_raw(raw)
    assert answer.enqueued == [([asked], "asap")]
    with pytest.raises(PinResultError, match="cannot rebuild"):
        tool_result_from_raw({"$anagrapheus.tool_result": 1, "value": {"$t": "bogus", "v": 1}})


def test_a_delegating_tool_replayed_into_a_new_unit_keeps_the_delegated_agents_pins(
    store: SQLiteEventStore, types: EventTypeRegistry, tmp_path: Path
) -> None:
    reached: list[str] = []
    ledger = PinLedger(store, types)
    live = delegating_agents(Pinning(ledger), reached).run_sync(PROMPT)
    ledger.commit()

    with SQLiteEventStore(tmp_path / "again.db") as again_store:
        into = PinLedger(again_store, types)
        replay = ReplayPins.from_store(store, types, on_miss="record", into=into)
        reached.clear()
        delegating_agents(Pinning(replay), reached).run_sync(PROMPT)
        assert reached == []
        into.commit()
        strict = ReplayPins.from_store(again_store, types)
        again = delegating_agents(Pinning(strict), reached).run_sync(PROMPT)
        assert reached == []
        assert again.usage == live.usage
        assert strict.unused() == {}


def test_identical_calls_in_one_model_response_each_run_pinned_as_unpinned_then_replay(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Issue #34: parallel tool calls of one response, the same tool and arguments, ran once under Pinning.
    def three_at_once() -> FunctionModel:
        calls = [ToolCallPart("send", {"to": "Brussels"}, tool_call_id=f"c{n}") for n in range(3)]
        return scripted(ModelResponse(parts=[*calls, ToolCallPart("send", {"to": "Oslo"}, tool_call_id="c3")]))

    unpinned = Outbox()
    plain = Agent(three_at_once(), tools=[unpinned.send]).run_sync(PROMPT)

    pinned = Outbox()
    ledger = PinLedger(store, types)
    live = Agent(three_at_once(), tools=[pinned.send], capabilities=[Pinning(ledger)]).run_sync(PROMPT)
    ledger.commit()
    assert sorted(pinned.sent) == sorted(unpinned.sent) == ["Brussels", "Brussels", "Brussels", "Oslo"]
    assert live.output == plain.output
    returned = sorted(p.content for m in live.all_messages() for p in m.parts if isinstance(p, ToolReturnPart))
    assert len(set(returned)) == 4  # each call got its own answer

    replayed = Outbox()
    replay = replay_of(store, types)
    again = Agent(three_at_once(), tools=[replayed.send], capabilities=[Pinning(replay)]).run_sync(PROMPT)
    assert replayed.sent == []
    assert dumped(again.all_messages()) == dumped(live.all_messages())
    assert replay.unused() == {}


def test_a_recording_made_before_twins_were_keyed_apart_answers_them_from_the_first_pin(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    from anagrapheus.provider.occurrence import twin_key

    key = tool_pin("send", {"to": "Brussels"}).key
    ledger = PinLedger(store, types)
    for _ in range(3):  # three identical calls of one response, answered by one draw: attempts 3
        ledger.resolve(key, kind=TOOL_CALL, effect=lambda: "sent", interpret=str)
    ledger.commit()
    replay = replay_of(store, types)
    assert [twin_key(key, kind=TOOL_CALL, twin=twin, resolver=replay) for twin in range(3)] == [key, key, key]
    fourth = twin_key(key, kind=TOOL_CALL, twin=3, resolver=replay)
    assert fourth != key  # past what the recording says was asked: a call of its own, a miss under strict replay
    live = PinLedger(store, types)
    assert twin_key(key, kind=TOOL_CALL, twin=1, resolver=live) != key
    live.abandon(reason="only asked")
