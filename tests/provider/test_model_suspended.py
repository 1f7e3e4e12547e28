"""A suspended response answered from a pin names the recorded run's server-side job: never poll, cancel or release it.

pydantic-ai asks the model how long to wait before continuing a suspended response, cancels the
job when a run abandons it, and releases it when a run ends with it still suspended. For a live
response these reach the wrapped model; for a pinned one (plain or streamed replay) they must not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from copy import copy
from dataclasses import dataclass, field

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.provider import PinnedModel
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore

MESSAGES: list[ModelMessage] = [ModelRequest.user_text_prompt("Round 1: state the UK position on fisheries.")]


@dataclass
class BackgroundJobs:
    """A wrapped model whose every answer is a suspended background job; it logs what reaches it."""

    reached: list[str] = field(default_factory=list[str])

    @property
    def model(self) -> FunctionModel:
        inner = FunctionModel(self._answer, stream_function=self._stream, model_name="scripted-uk")
        inner.continuation_delay = self._delay  # type: ignore[method-assign]
        inner.cancel_suspended_response = self._cancel  # type: ignore[method-assign]
        inner._release_suspended_response = self._release  # type: ignore[method-assign]
        return inner

    def _answer(self, _messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        self.reached.append("request")
        return ModelResponse(parts=[], state="suspended", provider_response_id="job-1")

    async def _stream(self, _messages: list[ModelMessage], _info: AgentInfo) -> AsyncIterator[str]:
        self.reached.append("stream")
        yield "The UK "

    def _delay(self, response: ModelResponse) -> float:
        self.reached.append(f"delay {response.provider_response_id}")
        return 0.01

    async def _cancel(self, response: ModelResponse) -> None:
        self.reached.append(f"cancel {response.provider_response_id}")

    def _release(self, response: ModelResponse) -> None:
        self.reached.append(f"release {response.provider_response_id}")


async def settle(model: PinnedModel, response: ModelResponse) -> None:
    """Ask everything pydantic-ai asks of a suspended response: the delay, a cancel and a release."""
    model.continuation_delay(response)
    await model.cancel_suspended_response(response)
    model._release_suspended_response(response)  # pyright: ignore[reportPrivateUsage]


@pytest.fixture
async def recorded(store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger) -> ReplayPins:
    jobs = BackgroundJobs()
    await PinnedModel(jobs.model, ledger).request(MESSAGES, None, ModelRequestParameters())
    ledger.commit()
    return ReplayPins.from_events(store.read(), types)


@pytest.mark.anyio
async def test_a_live_suspended_response_is_polled_cancelled_and_released_by_the_wrapped_model(
    ledger: PinLedger,
) -> None:
    jobs = BackgroundJobs()
    model = PinnedModel(jobs.model, ledger)
    response = await model.request(MESSAGES, None, ModelRequestParameters())
    assert response.state == "suspended"
    await settle(model, response)
    assert jobs.reached == ["request", "delay job-1", "cancel job-1", "release job-1"]


@pytest.mark.anyio
async def test_a_replayed_suspended_response_is_never_polled_cancelled_or_released(recorded: ReplayPins) -> None:
    jobs = BackgroundJobs()
    model = PinnedModel(jobs.model, recorded)
    response = await model.request(MESSAGES, None, ModelRequestParameters())
    assert (response.state, response.provider_response_id) == ("suspended", "job-1")
    assert model.continuation_delay(response) is None  # continue at once: the next segment is pinned too
    await settle(model, response)
    assert jobs.reached == []


@pytest.mark.anyio
async def test_a_streamed_replay_of_a_suspended_response_is_never_polled_cancelled_or_released(
    recorded: ReplayPins,
) -> None:
    jobs = BackgroundJobs()
    model = PinnedModel(jobs.model, recorded)
    async with model.request_stream(MESSAGES, None, ModelRequestParameters()) as stream:
        async for _event in stream:
            pass
    response = stream.get()
    assert (response.state, response.provider_response_id) == ("suspended", "job-1")
    assert model.continuation_delay(response) is None
    await settle(model, response)
    assert jobs.reached == []


@pytest.mark.anyio
async def test_a_copy_of_a_replayed_response_is_not_taken_for_it(recorded: ReplayPins) -> None:
    # What marks a response as answered from a pin is the object itself, not an equal one a live run produced.
    jobs = BackgroundJobs()
    model = PinnedModel(jobs.model, recorded)
    replayed = await model.request(MESSAGES, None, ModelRequestParameters())
    lookalike = copy(replayed)
    assert lookalike == replayed and lookalike is not replayed
    await settle(model, lookalike)
    assert jobs.reached == ["delay job-1", "cancel job-1", "release job-1"]
