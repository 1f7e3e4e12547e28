"""The run's ids and clock: `Pinning` pins `run_id`, `conversation_id` and message timestamps, by position."""

from __future__ import annotations

import asyncio
import gc
import json
import warnings
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from pydantic_ai import Agent, AgentRunResult
from pydantic_ai.capabilities import ProcessHistory, ReinjectSystemPrompt
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from typing_extensions import override

from anagrapheus import Pinning
from anagrapheus.errors import PinResultError
from anagrapheus.provider.run_clock import RUN_CLOCK, RUN_ID, RunClocks
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import JSONValue, pin_key
from anagrapheus.timeline.resolving.resolver import Resolver
from anagrapheus.timeline.seeded import EPOCH, SeededRun
from tests.conftest import SaysNothing, Scripted, Verdict

PROMPT = "Where do the fleets land?"


def fleet(city: str) -> str:
    """Name the fleet of a city."""
    return f"the fleet of {city}"


def agent(pinning: Pinning, name: str = "scripted-uk") -> Agent[None, str]:
    return Agent(Scripted(name).model, tools=[fleet], capabilities=[pinning])


def test_a_replay_gives_the_run_its_recorded_id_conversation_and_times(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger)).run_sync(PROMPT)
    ledger.commit()

    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types))).run_sync(PROMPT)

    assert (replayed.run_id, replayed.conversation_id) == (live.run_id, live.conversation_id)
    assert replayed.all_messages_json() == live.all_messages_json()


def test_several_pinnings_over_one_ledger_number_their_runs_together(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # One Pinning per agent, as an application writes it: the runs are counted per ledger, not per capability.
    ledger = PinLedger(store, types)
    first, second = agent(Pinning(ledger)).run_sync(PROMPT), agent(Pinning(ledger), "scripted-eu").run_sync(PROMPT)
    ledger.commit()
    assert first.run_id != second.run_id

    replay = ReplayPins.from_events(store.read(), types)
    again = agent(Pinning(replay)).run_sync(PROMPT), agent(Pinning(replay), "scripted-eu").run_sync(PROMPT)

    assert [r.all_messages_json() for r in again] == [first.all_messages_json(), second.all_messages_json()]
    assert replay.unused() == {}


def test_a_recording_made_before_clocks_were_pinned_replays_with_fresh_ids_and_never_misses(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger)).run_sync(PROMPT)
    ledger.commit()
    calls_only = [e for e in store.read() if e.payload_json().get("kind") not in (RUN_ID, RUN_CLOCK)]
    model = Scripted("scripted-uk")

    replay = ReplayPins.from_events(calls_only, types)
    replayed = Agent(model.model, tools=[fleet], capabilities=[Pinning(replay, new_id=lambda: "a-fresh-run")])
    result = replayed.run_sync(PROMPT)

    assert (result.output, model.calls) == (live.output, 0)
    assert result.run_id == "a-fresh-run"


def test_a_replay_of_several_units_at_once_draws_positions_fresh_without_ambiguity(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    recorded: list[str] = []
    for unit in ("round-1", "round-2"):
        ledger = PinLedger(store, types, unit_id=unit)
        recorded.append(agent(Pinning(ledger)).run_sync(f"{PROMPT} ({unit})").run_id)
        ledger.commit()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # positions are keyed per unit: no key is pinned twice
        replay = ReplayPins.from_events(store.read(), types)
    result = agent(Pinning(replay)).run_sync(f"{PROMPT} (round-2)")

    assert "the fleet of Paris" in result.output
    assert replay.divergence is None
    # Drawn fresh: neither unit's first run id is taken for this run's.
    assert result.run_id not in recorded


def test_record_mode_over_an_old_recording_gains_the_clock_pins_without_a_divergence(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    old = PinLedger(store, types, unit_id="round-1")
    agent(Pinning(old)).run_sync(PROMPT)
    old.commit()
    calls_only = [e for e in store.read() if e.payload_json().get("kind") not in (RUN_ID, RUN_CLOCK)]

    renewed = PinLedger(store, types, unit_id="round-1-again")
    replay = ReplayPins.from_events(calls_only, types, on_miss="record", into=renewed)
    recorded = agent(Pinning(replay)).run_sync(PROMPT)

    assert replay.divergence is None
    assert {pin.kind for pin in renewed.pins()} >= {RUN_ID, RUN_CLOCK}
    renewed.commit()
    strict = ReplayPins.from_events(store.read(), types, unit_id="round-1-again")
    assert agent(Pinning(strict)).run_sync(PROMPT).all_messages_json() == recorded.all_messages_json()


def test_a_seeded_clock_and_id_source_record_the_same_pins_every_time(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def record(unit: str) -> list[tuple[str, str]]:
        seeded = SeededRun("talks")
        ledger = PinLedger(store, types, unit_id=unit)
        result = agent(Pinning(ledger, clock=seeded.now, new_id=seeded.new_id)).run_sync(PROMPT)
        assert result.all_messages()[0].timestamp == EPOCH + timedelta(seconds=1)  # the clock's first reading
        pins = [(pin.kind, pin.raw_text) for pin in ledger.pins() if pin.kind in (RUN_ID, RUN_CLOCK)]
        ledger.abandon(reason=f"{unit}: compared, not kept")
        return pins

    assert record("first") == record("second")


def test_a_caller_given_run_id_gets_a_derived_conversation_and_pinned_times(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger)).run_sync(PROMPT, run_id="chat-7")
    ledger.commit()

    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types))).run_sync(PROMPT, run_id="chat-7")

    assert live.conversation_id == replayed.conversation_id != "chat-7"
    assert replayed.all_messages_json() == live.all_messages_json()


@dataclass(slots=True)
class Damaged(Resolver):
    """A resolver over a ledger that answers every pin of one kind with `raw`, as a damaged log would.

    Like any user's resolver it may be unhashable (an eq dataclass) and declare slots; it keeps its runs' clocks in
    the `attachments` every `Resolver` carries, so its positions are pinned through it.
    """

    ledger: PinLedger
    kind: str
    raw: JSONValue

    @override
    def resolve(self, key: str, *, kind: str, **options: Any) -> Any:
        if kind == self.kind:
            return options["interpret"](self.raw)
        return self.ledger.resolve(key, kind=kind, **options)

    @override
    async def aresolve(self, key: str, *, kind: str, **options: Any) -> Any:
        if kind == self.kind:
            return options["interpret"](self.raw)
        return await self.ledger.aresolve(key, kind=kind, **options)

    @override
    def resolve_stream(self, key: str, **options: Any) -> Any:
        return self.ledger.resolve_stream(key, **options)


@pytest.mark.parametrize(
    ("kind", "raw", "says"),
    [
        (RUN_ID, 7, "not a run id"),
        (RUN_CLOCK, {"at": "noon"}, "holds dict, not a list of timestamps"),
        (RUN_CLOCK, ["noon", "midnight"], "not a list of timestamps"),
        (RUN_CLOCK, ["2026-01-05T09:00:00+00:00"], "1 timestamps for 2 stamps"),
    ],
)
def test_a_damaged_clock_pin_is_refused_saying_what_it_holds(
    kind: str, raw: JSONValue, says: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    damaged = Damaged(PinLedger(store, types), kind, raw)
    with pytest.raises(PinResultError, match=says):
        agent(Pinning(damaged)).run_sync(PROMPT)


def test_the_return_of_an_output_tool_after_the_last_request_gets_a_pinned_time(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # The run ends on an output tool: its return is a request no model request follows, stamped as the run ends.
    def verdict_agent(pinning: Pinning) -> Agent[None, Verdict]:
        return Agent(Scripted("scripted-uk").model, tools=[fleet], output_type=Verdict, capabilities=[pinning])

    seeded = SeededRun("talks")
    ledger = PinLedger(store, types)
    live = verdict_agent(Pinning(ledger, clock=seeded.now, new_id=seeded.new_id)).run_sync(PROMPT)
    ledger.commit()
    last = live.all_messages()[-1]
    assert isinstance(last, ModelRequest)
    assert [type(part) for part in last.parts] == [ToolReturnPart]
    # Every time in the run is the seeded clock's, the output tool's return too.
    assert EPOCH <= last.timestamp < EPOCH + timedelta(hours=1)
    assert all(EPOCH <= part.timestamp < EPOCH + timedelta(hours=1) for part in last.parts)

    replayed = verdict_agent(Pinning(ReplayPins.from_events(store.read(), types))).run_sync(PROMPT)
    assert replayed.all_messages_json() == live.all_messages_json()


def test_positions_are_keyed_on_the_unit_the_run_and_the_stamp_point(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # Literal key material: a recording written today is keyed so, and must replay under later versions.
    ledger = PinLedger(store, types, unit_id="talks")
    pinning = Pinning(ledger)
    for run_id in (None, None, "chat-7"):  # the third is named by the caller: placed by its id
        agent(pinning).run_sync(PROMPT, run_id=run_id)
    # The fourth ends on an output tool: a third stamp point, at the end of the run.
    Agent(Scripted("scripted-uk").model, tools=[fleet], output_type=Verdict, capabilities=[pinning]).run_sync(PROMPT)
    positions = [pin for pin in ledger.pins() if pin.kind in (RUN_ID, RUN_CLOCK)]
    # A stamp point before each model request.
    clock = [(run, stamp) for run in (0, 1, "chat-7") for stamp in (0, 1)] + [(3, 0), (3, 1), (3, 2)]
    expected = [
        *[(RUN_ID, {"unit": "talks", "run": run}) for run in (0, 1, 3)],
        *[(RUN_CLOCK, {"unit": "talks", "run": run, "stamp": stamp}) for run, stamp in clock],
    ]
    got = sorted(positions, key=lambda pin: (pin.kind != RUN_ID, pin.draw_no))
    assert [pin.kind for pin in got] == [kind for kind, _ in expected]
    assert len(got) == len(expected)
    for pin, (kind, material) in zip(got, expected, strict=True):
        slots = {} if kind == RUN_ID else {"slots": len(json.loads(pin.raw_text))}
        assert (pin.kind, pin.key) == (kind, pin_key(kind, {**material, **slots}))
    # Each run is forgotten when it ends: a ledger that serves many runs does not keep them.
    assert RunClocks.of(ledger).by_id == {}


@pytest.mark.parametrize("unit", ["talks", "cafe\u0301", "\uf900 talks"])
def test_a_position_key_is_the_canonical_key_of_its_material_whatever_the_text(
    store: SQLiteEventStore, types: EventTypeRegistry, unit: str
) -> None:
    # Issue #43: a position's key is written without the walk when the walk would leave it unchanged. A unit id or
    # run id that is not ASCII (not NFC, or NFC changes it) is walked: the key stays the canonical one, NFC applied.
    ledger = PinLedger(store, types, unit_id=unit)
    pinning = Pinning(ledger)
    for run_id in (None, "chat-e\u0301"):
        agent(pinning).run_sync(PROMPT, run_id=run_id)
    positions = [pin for pin in ledger.pins() if pin.kind in (RUN_ID, RUN_CLOCK)]
    expected = {pin_key(RUN_ID, {"unit": unit, "run": 0})} | {
        pin_key(RUN_CLOCK, {"unit": unit, "run": run, "stamp": stamp, "slots": slots})
        for run in (0, "chat-e\u0301")
        for stamp, slots in ((0, 2), (1, 2))
    }
    assert {pin.key for pin in positions} == expected
    ledger.commit()
    replayed = agent(Pinning(ReplayPins.from_events(store.read(), types))).run_sync(PROMPT)
    assert replayed.run_id == next(json.loads(pin.raw_text) for pin in positions if pin.kind == RUN_ID)


def test_a_resolver_keeps_its_clocks_and_they_go_with_it(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    # The resolver holds its clocks (no registry outside it): the same clocks whoever asks, gone when it is.
    def clocks_of_a_ledger_that_ran() -> weakref.ref[RunClocks]:
        # In a frame of its own: pydantic-ai reads its caller's locals to name an agent, and that snapshot holds them.
        ledger = PinLedger(store, types)
        agent(Pinning(ledger)).run_sync(PROMPT)
        agent(Pinning(ledger)).run_sync(PROMPT)
        clocks = RunClocks.of(ledger)
        assert clocks is not None and clocks is RunClocks.of(ledger)
        assert clocks.runs == 2  # one numbering for both capabilities
        return weakref.ref(clocks)

    gone = clocks_of_a_ledger_that_ran()
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("hashable", [True, False])
def test_an_old_protocol_resolver_that_keeps_no_clocks_draws_its_runs_ids_and_times_fresh_and_unpinned(
    store: SQLiteEventStore, types: EventTypeRegistry, hashable: bool
) -> None:
    # Two capabilities over one such resolver would each number their runs from 0: pinned, the second run would be
    # answered with the first one's id and times. So nothing is pinned at a position, and no run takes another's.
    # (Until 0.2 a hashable one was numbered in a table kept for it, with a warning; that table is gone.)
    ledger = PinLedger(store, types)
    quiet = cast(Resolver, SaysNothing(ledger) if hashable else _Unhashable(ledger))
    seeded = SeededRun("talks")
    with pytest.warns(DeprecationWarning, match="subclass Resolver"):
        pinnings = [Pinning(quiet, clock=seeded.now, new_id=seeded.new_id) for _ in range(2)]
    assert RunClocks.of(pinnings[0].resolver) is None
    runs = [agent(pinning).run_sync(PROMPT) for pinning in pinnings]

    assert runs[0].run_id != runs[1].run_id
    assert not [pin for pin in ledger.pins() if pin.kind in (RUN_ID, RUN_CLOCK)]
    assert all(_seeded(_stamps(run.all_messages())) for run in runs)  # the capability's clock still stamps them
    assert {pin.kind for pin in ledger.pins()} == {"model_call", "tool_call"}


class _Unhashable(SaysNothing):
    """A resolver that cannot be a key: equal to any other of its class, so hashing it is refused."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Unhashable)

    __hash__ = None  # type: ignore[assignment]


def test_a_run_that_continues_a_conversation_pins_the_times_of_its_own_requests_only(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    ledger = PinLedger(store, types)
    first = agent(Pinning(ledger)).run_sync(PROMPT)
    seeded = SeededRun("talks")
    second = agent(Pinning(ledger, clock=seeded.now)).run_sync(
        "And the Basque fleet?", message_history=first.all_messages()
    )
    ledger.commit()
    own = [m for m in second.new_messages() if isinstance(m, ModelRequest)]
    assert own and all(EPOCH <= m.timestamp < EPOCH + timedelta(hours=1) for m in own)
    history = [m for m in second.all_messages()[: len(first.all_messages())] if isinstance(m, ModelRequest)]
    assert [m.timestamp for m in history] == [m.timestamp for m in first.all_messages() if isinstance(m, ModelRequest)]

    replay = ReplayPins.from_events(store.read(), types)
    again = agent(Pinning(replay)).run_sync(PROMPT)
    continued = agent(Pinning(replay)).run_sync("And the Basque fleet?", message_history=again.all_messages())
    assert continued.all_messages_json() == second.all_messages_json()


def _stamps(messages: list[ModelMessage]) -> list[datetime]:
    """Every time pydantic-ai stamps on a run's requests: each request's and each of its parts'."""
    stamps: list[datetime] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            stamps.append(message.timestamp)
            stamps.extend(p.timestamp for p in message.parts if isinstance(getattr(p, "timestamp", None), datetime))
    return stamps


def _seeded(stamps: list[datetime]) -> bool:
    return bool(stamps) and all(EPOCH <= at < EPOCH + timedelta(hours=1) for at in stamps)


CITIES = ("Paris", "Lyon", "Rome")


def _three_fleets(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask for one fleet after another, reading which from the last return only (a history may be cut)."""
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    city = str(returns[0].content).rsplit(" ", 1)[-1] if returns else None
    at = -1 if city is None else CITIES.index(city)
    if at + 1 < len(CITIES):
        return ModelResponse(parts=[ToolCallPart("fleet", {"city": CITIES[at + 1]})])
    return ModelResponse(parts=[TextPart("Three fleets land.")])


def _keep_recent(messages: list[ModelMessage]) -> list[ModelMessage]:
    return messages[2:] if len(messages) > 3 else messages


HISTORY_AT = datetime(2025, 12, 1, 8, tzinfo=UTC)


def _history() -> list[ModelMessage]:
    """A conversation from before the run, as an app keeps it: no system prompt, its own fixed times."""
    return [
        ModelRequest(parts=[UserPromptPart("Which fleets?", timestamp=HISTORY_AT)], timestamp=HISTORY_AT),
        ModelResponse(parts=[TextPart("Ask me.")], timestamp=HISTORY_AT),
    ]


@pytest.mark.parametrize(
    "shape",
    ["history processor first", "history processor last", "reinjected prompt first", "reinjected prompt last"],
)
def test_stamps_a_capability_adds_or_a_history_processor_leaves_are_pinned(
    shape: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # A processor that drops early messages left the clock's index past the end of the history, and a system prompt
    # put back into an earlier request sat before it: both kept the wall clock's times, and replayed with others.
    def run(pinning: Pinning) -> Any:
        other: Any = ProcessHistory(_keep_recent) if shape.startswith("history") else ReinjectSystemPrompt(True)
        capabilities = [pinning, other] if shape.endswith("last") else [other, pinning]
        model = FunctionModel(_three_fleets, model_name="scripted-uk")
        fleet_agent = Agent(model, tools=[fleet], system_prompt="Be brief.", capabilities=capabilities)
        history = None if shape.startswith("history") else _history()
        return fleet_agent.run_sync(PROMPT, message_history=history)

    seeded = SeededRun("talks")
    ledger = PinLedger(store, types)
    live = run(Pinning(ledger, clock=seeded.now, new_id=seeded.new_id))
    ledger.commit()
    replayed = run(Pinning(ReplayPins.from_events(store.read(), types)))

    stamps = _stamps(live.all_messages())
    if shape.startswith("reinjected"):
        # The history keeps its own times; the system prompt put back at its head is the run's, and seeded.
        first = live.all_messages()[0]
        assert isinstance(first, ModelRequest) and isinstance(first.parts[0], SystemPromptPart)
        assert (first.timestamp, first.parts[1].timestamp) == (HISTORY_AT, HISTORY_AT)
        stamps = [at for at in stamps if at != HISTORY_AT]
    assert _seeded(stamps), stamps
    assert replayed.all_messages_json() == live.all_messages_json()


async def _text_then_a_call(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    yield "The fleets land at dawn. "
    yield {1: DeltaToolCall(name="fleet", json_args='{"city": "Paris"}')}


@pytest.mark.parametrize("ending", ["output tool", "text then a tool call"])
def test_the_request_run_stream_appends_after_the_run_gets_pinned_times(
    ending: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # `run_stream` appends the returns of the streamed response's tool calls after the run's last hook.
    def run(pinning: Pinning) -> list[ModelMessage]:
        if ending == "output tool":
            streaming: Agent[None, Any] = Agent(Scripted("scripted-uk").model, output_type=Verdict)
        else:
            streaming = Agent(FunctionModel(stream_function=_text_then_a_call, model_name="scripted-uk"))
            streaming.tool_plain(lambda city: f"the fleet of {city}", name="fleet")

        async def go() -> list[ModelMessage]:
            async with streaming.run_stream(PROMPT, capabilities=[pinning]) as result:
                await result.get_output()
            return result.all_messages()

        return asyncio.run(go())

    seeded = SeededRun("talks")
    ledger = PinLedger(store, types)
    live = run(Pinning(ledger, clock=seeded.now, new_id=seeded.new_id))
    ledger.commit()
    replayed = run(Pinning(ReplayPins.from_events(store.read(), types)))

    last = live[-1]
    assert isinstance(last, ModelRequest) and [type(p) for p in last.parts] == [ToolReturnPart]
    assert _seeded(_stamps(live)), _stamps(live)
    assert ModelMessagesTypeAdapter.dump_json(replayed) == ModelMessagesTypeAdapter.dump_json(live)


# A run that ends in an exception (issue #34): its last request's times are pinned too, for every usage limit.

LIMITS = {
    "request_limit": {"request_limit": 1},
    "tool_calls_limit": {"tool_calls_limit": 1},
    "input_tokens_limit": {"input_tokens_limit": 60},
    "output_tokens_limit": {"output_tokens_limit": 3},
    "total_tokens_limit": {"total_tokens_limit": 60},
}


@pytest.mark.parametrize("limit", LIMITS)
def test_a_run_refused_by_a_usage_limit_replays_byte_for_byte(
    limit: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    from pydantic_ai import capture_run_messages
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import UsageLimits

    def survey_again(messages: list[Any], info: AgentInfo) -> ModelResponse:
        calls = [ToolCallPart("survey", {"stock": stock}, tool_call_id=f"c{stock}") for stock in ("cod", "hake")]
        return ModelResponse(parts=calls)

    def refused(pinning: Pinning) -> bytes:
        agent = Agent(FunctionModel(survey_again, model_name="scripted"))

        @agent.tool_plain
        def survey(stock: str) -> str:  # pyright: ignore[reportUnusedFunction]
            """Read a stock's survey."""
            return f"{stock}: 81 kt"

        with capture_run_messages() as messages, pytest.raises(UsageLimitExceeded):
            agent.run_sync("Survey the stocks.", capabilities=[pinning], usage_limits=UsageLimits(**LIMITS[limit]))
        return ModelMessagesTypeAdapter.dump_json(messages)

    ledger = PinLedger(store, types, unit_id="u")
    live = refused(Pinning(ledger))
    ledger.commit()
    replayed = refused(Pinning(ReplayPins.from_store(store, types)))
    assert replayed == live


def test_a_continued_conversation_refused_by_a_usage_limit_replays_its_refused_request_as_recorded(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """A second turn under `request_limit=1` (#45): the request the limit refused keeps its recorded times."""
    from pydantic_ai import capture_run_messages
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai.usage import UsageLimits

    if not hasattr(AgentRunResult, "conversation"):
        pytest.skip("pydantic-ai before `conversation=` (2.78) has no usage carried from turn to turn")

    def turns(pinning: Pinning) -> tuple[bytes, bytes]:
        first = agent(pinning).run_sync(PROMPT)
        # The conversation carries its usage: the first turn's requests already spend the limit of the second.
        with capture_run_messages() as messages, pytest.raises(UsageLimitExceeded):
            agent(pinning).run_sync(
                "And the Basque fleet?",
                conversation=first.conversation,  # pyright: ignore[reportCallIssue]
                usage_limits=UsageLimits(request_limit=1),
            )
        return first.all_messages_json(), ModelMessagesTypeAdapter.dump_json(messages)

    ledger = PinLedger(store, types, unit_id="u")
    live = turns(Pinning(ledger))
    ledger.commit()
    replayed = turns(Pinning(ReplayPins.from_store(store, types)))
    assert replayed[0] == live[0]
    assert replayed[1] == live[1]
