"""Failures are pinned and replayed as what they were: same class, status, body and message, at the same point."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import cast

import anyio
import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import ModelHTTPError, ModelUnavailableError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.errors import PinMiss, PinnedFailure, PinResultError
from anagrapheus.provider.capability import ATTEMPT_TIMES
from anagrapheus.provider.every_run import refuse_model_requests
from anagrapheus.provider.model import response_raw
from anagrapheus.provider.retries import RUN_RETRY
from anagrapheus.provider.run_clock import RUN_POSITIONS
from anagrapheus.provider.timing import untimed
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinResolver, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import JSONValue, pin_key
from tests.conftest import Scripted
from tests.provider.test_capability_clock import Damaged

PROMPT = "State the UK position on cod."


@dataclass
class Flaky:
    """A model that fails its first `failures` requests with `error`, then answers; counts every request."""

    name: str
    error: Exception
    failures: int = 1
    calls: int = 0

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self._answer, stream_function=self._stream, model_name=self.name)

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return ModelResponse(parts=[TextPart(f"{self.name} holds firm.")])

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.calls += 1
        yield "The UK "
        if self.calls <= self.failures:
            raise self.error
        yield "holds firm."


def replaying(store: SQLiteEventStore, types: EventTypeRegistry) -> Pinning:
    return Pinning(ReplayPins.from_events(store.read(), types))


def calls_pinned(ledger: PinLedger) -> list[str]:
    """The kinds of the ledger's pins in order, without the runs' clocks (ids and timestamps) and retries taken up."""
    return [pin.kind for pin in ledger.pins() if pin.kind not in RUN_POSITIONS and pin.kind != RUN_RETRY]


def messages_json(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


def test_a_model_http_error_replays_as_itself_with_status_body_and_retry_advice(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    # The retry advice is state the constructor's positional arguments do not carry: it comes back only because
    # the error's pickle state is pinned and applied.
    error = ModelHTTPError(
        500, "scripted-uk", {"error": "overloaded"}, headers={"retry-after": "7"}, retry_after=7.0, hint="wait"
    )
    flaky = Flaky("scripted-uk", error)
    ledger = PinLedger(store, types)
    with pytest.raises(ModelHTTPError) as live:
        Agent(flaky.model, capabilities=[Pinning(ledger)]).run_sync(PROMPT)
    ledger.commit()

    again = Flaky("scripted-uk", ValueError("never raised"))
    with pytest.raises(ModelHTTPError) as replayed:
        Agent(again.model, capabilities=[replaying(store, types)]).run_sync(PROMPT)
    assert again.calls == 0
    assert type(replayed.value) is type(live.value)
    assert (replayed.value.status_code, replayed.value.body, str(replayed.value)) == (
        500,
        {"error": "overloaded"},
        str(live.value),
    )
    assert (replayed.value.retry_after, replayed.value.headers, replayed.value.hint) == (
        7.0,
        {"retry-after": "7"},
        "wait",
    )


def test_a_retry_after_a_failure_draws_anew_and_replay_reproduces_the_sequence(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def run(agent: Agent[None, str]) -> tuple[list[str], str]:
        # An application's own retry loop: it catches the failure and asks the same question again.
        seen: list[str] = []
        for _ in range(3):
            try:
                return seen, agent.run_sync(PROMPT).output
            except ModelHTTPError as e:
                seen.append(f"{type(e).__name__} {e.status_code}")
        raise AssertionError("never succeeded")

    flaky = Flaky("scripted-uk", ModelHTTPError(503, "scripted-uk", "busy"), failures=2)
    ledger = PinLedger(store, types)
    live = run(Agent(flaky.model, capabilities=[Pinning(ledger)]))
    assert flaky.calls == 3
    # Each failure is pinned as its own draw, in order; scratch marks a failed draw's kind.
    assert calls_pinned(ledger) == ["model_call!failed", "model_call!failed", "model_call"]
    ledger.commit()

    again = Flaky("scripted-uk", ValueError("never raised"), failures=0)
    assert run(Agent(again.model, capabilities=[replaying(store, types)])) == live
    assert live[0] == ["ModelHTTPError 503", "ModelHTTPError 503"]
    assert again.calls == 0


def test_a_fallback_model_recovers_on_replay_as_it_did_live(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    def agent(a: Flaky, b: Flaky, pinning: Pinning) -> Agent[None, str]:
        return Agent(FallbackModel(a.model, b.model), capabilities=[pinning])

    down = ModelHTTPError.for_category(ModelUnavailableError, status_code=503, model_name="primary", body="down")
    primary, secondary = Flaky("primary", down), Flaky("secondary", ValueError("unused"), failures=0)
    ledger = PinLedger(store, types)
    live = agent(primary, secondary, Pinning(ledger)).run_sync(PROMPT)
    assert (primary.calls, secondary.calls, live.output) == (1, 1, "secondary holds firm.")
    # The fallback times its failed attempt by the wall clock: those times are pinned with it.
    assert calls_pinned(ledger) == ["model_call!failed", "model_call", "model_attempt_times"]
    # Keyed on what the attempts were and on the response that answered; holding the times the run saw.
    answered = live.all_messages()[-1]
    assert isinstance(answered, ModelResponse)
    (attempt,) = answered.failed_attempts or []
    (times,) = [pin for pin in ledger.pins() if pin.kind == ATTEMPT_TIMES]
    # The response as the fallback returned it: before the agent gave it the run's ids.
    # Its timing (pydantic-ai 2.78's request_timestamp, duration) is left out: the wall clock's, never asked.
    returned = replace(answered, failed_attempts=None, run_id=None, conversation_id=None, model_id=None)
    material = {
        "response": response_raw(untimed(returned)),
        "attempts": [[attempt.model_name, attempt.provider_name, attempt.outcome, attempt.error]],
    }
    assert times.key == pin_key(ATTEMPT_TIMES, material)
    assert json.loads(times.raw_text) == [[attempt.timestamp.isoformat(), attempt.duration.total_seconds()]]
    ledger.commit()

    primary, secondary = Flaky("primary", ValueError("unused")), Flaky("secondary", ValueError("unused"))
    replayed = agent(primary, secondary, replaying(store, types)).run_sync(PROMPT)
    assert replayed.output == live.output
    assert (primary.calls, secondary.calls) == (0, 0)
    (live_attempt,) = live.all_messages()[-1].failed_attempts or []  # type: ignore[union-attr]
    (replayed_attempt,) = replayed.all_messages()[-1].failed_attempts or []  # type: ignore[union-attr]
    assert replayed_attempt == live_attempt


def asks_until_answered(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call the quota tool until it returns without asking for a retry, then repeat what it said."""
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if not returns or returns[0].outcome == "retried":
        return ModelResponse(parts=[ToolCallPart("quota", {"city": "Paris"})])
    return ModelResponse(parts=[TextPart(str(returns[0].content))])


def test_a_tool_that_asked_for_a_retry_replays_the_retry(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    def agent(pinning: Pinning, calls: list[str]) -> Agent[None, str]:
        def quota(city: str) -> str:
            """Look up the quota landed in a city."""
            calls.append(city)
            if len(calls) == 1:
                raise ModelRetry("the registry is busy, ask again")
            return f"12000t landed in {city}"

        model = FunctionModel(asks_until_answered, model_name="scripted-uk")
        return Agent(model, tools=[quota], capabilities=[pinning], retries=2)

    calls: list[str] = []
    ledger = PinLedger(store, types)
    live = agent(Pinning(ledger), calls).run_sync(PROMPT)
    assert calls == ["Paris", "Paris"]
    assert live.output == "12000t landed in Paris"
    ledger.commit()

    calls = []
    replayed = agent(replaying(store, types), calls).run_sync(PROMPT)
    assert calls == []
    assert messages_json(replayed.all_messages()).count(b"the registry is busy") == 1
    assert replayed.output == live.output


class SurveyLost(Exception):
    """An application's own exception class: replay cannot know how to rebuild it."""


def test_an_exception_that_cannot_be_rebuilt_replays_as_a_typed_pinned_failure(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    def agent(scripted: Scripted, pinning: Pinning) -> Agent[None, str]:
        def survey(city: str) -> str:
            """Read the stock survey of a city."""
            raise SurveyLost(f"no survey for {city}")

        return Agent(scripted.model, tools=[survey], capabilities=[pinning])

    ledger = PinLedger(store, types)
    with pytest.raises(SurveyLost):
        agent(Scripted("scripted-uk"), Pinning(ledger)).run_sync(PROMPT)
    ledger.commit()

    with pytest.raises(PinnedFailure) as replayed:
        agent(Scripted("scripted-uk"), replaying(store, types)).run_sync(PROMPT)
    assert replayed.value.type_name == f"{__name__}:SurveyLost"
    assert replayed.value.original_message == "no survey for Paris"


def test_a_stream_that_failed_midway_replays_its_start_then_the_same_failure(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    async def consume(agent: Agent[None, str]) -> tuple[list[str], BaseException]:
        seen: list[str] = []
        try:
            async with agent.run_stream(PROMPT) as run:
                async for text in run.stream_text(delta=True, debounce_by=None):
                    seen.append(text)
        except Exception as e:
            return seen, e
        raise AssertionError("the stream did not fail")

    flaky = Flaky("scripted-uk", ConnectionError("the provider dropped the stream"))
    ledger = PinLedger(store, types)
    live_seen, live_error = anyio.run(consume, Agent(flaky.model, capabilities=[Pinning(ledger)]))
    ledger.commit()

    again = Flaky("scripted-uk", ValueError("unused"))
    seen, error = anyio.run(consume, Agent(again.model, capabilities=[replaying(store, types)]))
    assert again.calls == 0
    assert (
        (type(error), str(error))
        == (type(live_error), str(live_error))
        == (
            ConnectionError,
            "the provider dropped the stream",
        )
    )
    assert "".join(seen) == "".join(live_seen) == "The UK "


def test_replay_asked_for_more_retries_than_were_recorded_misses(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    flaky = Flaky("scripted-uk", ModelHTTPError(500, "scripted-uk", "boom"))
    ledger = PinLedger(store, types)
    with pytest.raises(ModelHTTPError):
        Agent(flaky.model, capabilities=[Pinning(ledger)]).run_sync(PROMPT)
    ledger.commit()

    agent = Agent(Flaky("scripted-uk", ValueError("unused")).model, capabilities=[replaying(store, types)])
    with pytest.raises(ModelHTTPError):
        agent.run_sync(PROMPT)
    # The recorded run gave up after one failure: a second try is a draw the recording never made.
    with pytest.raises(PinMiss):
        agent.run_sync(PROMPT)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"at": "noon"}, "an model_attempt_times pin holds dict, not a list of [timestamp, seconds]"),
        (
            [["2026-01-05T09:00:00+00:00", 1.5, 3]],
            "an model_attempt_times pin holds ['2026-01-05T09:00:00+00:00', 1.5, 3], not",
        ),
        ([[7, 1.5]], "an model_attempt_times pin holds [7, 1.5], not [timestamp, seconds]"),
        (
            [["2026-01-05T09:00:00+00:00", True]],
            "an model_attempt_times pin holds ['2026-01-05T09:00:00+00:00', True], not",
        ),
        (
            [["2026-01-05T09:00:00+00:00", "1.5"]],
            "an model_attempt_times pin holds ['2026-01-05T09:00:00+00:00', '1.5'], not",
        ),
    ],
    ids=["not-a-list", "three-items", "time-not-text", "seconds-a-bool", "seconds-text"],
)
def test_a_damaged_attempt_times_pin_is_refused_saying_what_it_holds(
    raw: JSONValue, says: str, store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    down = ModelHTTPError.for_category(ModelUnavailableError, status_code=503, model_name="primary", body="down")
    primary, secondary = Flaky("primary", down), Flaky("secondary", ValueError("unused"), failures=0)
    damaged = Damaged(PinLedger(store, types), ATTEMPT_TIMES, raw)
    agent = Agent(FallbackModel(primary.model, secondary.model), capabilities=[Pinning(cast(PinResolver, damaged))])
    with pytest.raises(PinResultError) as refused:
        agent.run_sync(PROMPT)
    assert str(refused.value).startswith(says)


@dataclass
class Refusing:
    """A model whose stream fails before its first event with `status` (a fallback moves on), or answers in words."""

    name: str
    status: int | None = None
    calls: int = 0

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(stream_function=self._stream, model_name=self.name)

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.calls += 1
        if self.status is not None:
            raise ModelHTTPError(self.status, self.name, {"error": {"code": self.status}})
        for word in ("Hold ", "the ", "line."):
            yield word


@pytest.mark.anyio
async def test_a_fallback_under_run_stream_replays_its_failed_attempts_once_as_live(
    store: SQLiteEventStore, types: EventTypeRegistry
) -> None:
    """Two members fail (500, 429), the third streams: a streamed replay lists each failure once (#45)."""

    def members() -> tuple[Refusing, Refusing, Refusing]:
        return Refusing("gemini", 500), Refusing("groq", 429), Refusing("mistral")

    async def streamed(models: tuple[Refusing, ...], *capabilities: Pinning) -> tuple[list[str], list[ModelMessage]]:
        agent = Agent(FallbackModel(*(m.model for m in models)), capabilities=list(capabilities))
        async with agent.run_stream(PROMPT) as run:
            deltas = [delta async for delta in run.stream_text(delta=True, debounce_by=None)]
        return deltas, run.all_messages()

    def attempts(messages: list[ModelMessage]) -> list[tuple[str, str | None]]:
        answered = messages[-1]
        assert isinstance(answered, ModelResponse)
        return [(a.model_name, a.error) for a in answered.failed_attempts or []]

    unpinned = await streamed(members())
    ledger = PinLedger(store, types)
    live_models = members()
    live = await streamed(live_models, Pinning(ledger))
    ledger.commit()
    assert [m.calls for m in live_models] == [1, 1, 1]
    replay_models = members()
    with refuse_model_requests():
        replayed = await streamed(replay_models, Pinning(ReplayPins.from_store(store, types)))
    assert [m.calls for m in replay_models] == [0, 0, 0]

    assert unpinned[0] == live[0] == replayed[0] == ["Hold ", "the ", "line."]
    assert [name for name, _ in attempts(unpinned[1])] == [name for name, _ in attempts(live[1])] == ["gemini", "groq"]
    assert attempts(replayed[1]) == attempts(live[1])
    assert messages_json(replayed[1]) == messages_json(live[1])
