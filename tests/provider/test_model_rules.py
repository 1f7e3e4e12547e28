"""PinnedModel's own rules, each by its own test: what reaches the wrapped model, how side calls are keyed, refusals."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.batch import Batch, BatchRequest, BatchResult
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from anagrapheus.errors import UsageError
from anagrapheus.provider import PinnedModel
from anagrapheus.provider.model import COMPACTION, TOKEN_COUNT, response_from_raw
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinMiss, ReplayPins, SQLiteEventStore, pin_key
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.ordered import read_ordered
from tests.conftest import Scripted

PROMPT = "Round 1: state the UK position on fisheries."
PARAMS = ModelRequestParameters()


def history() -> list[ModelMessage]:
    return [ModelRequest.user_text_prompt(PROMPT)]


def replay_of(store: SQLiteEventStore, types: EventTypeRegistry) -> ReplayPins:
    return ReplayPins.from_events(store.read(), types)


class LastPromptPolicy:
    """A call policy that keys a request on its model and last prompt only: settings never make another call."""

    def material(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        *,
        model_id: str,
    ) -> dict[str, JSONValue]:
        last = messages[-1]
        assert isinstance(last, ModelRequest) and isinstance(last.parts[-1], UserPromptPart)
        return {"model": model_id, "prompt": str(last.parts[-1].content)}


@pytest.mark.anyio
async def test_a_response_reaches_its_caller_without_the_stamps_of_the_run_that_drew_it(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    def stamped(_messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("The UK holds firm.")], run_id="run-1", conversation_id="talk-1")

    inner = FunctionModel(stamped, model_name="scripted-uk")
    live = await PinnedModel(inner, ledger).request(history(), None, PARAMS)
    (pin,) = ledger.pins()
    raw = json.loads(pin.raw_text)
    ledger.commit()
    replayed = await PinnedModel(inner, replay_of(store, types)).request(history(), None, PARAMS)
    for response in (
        live,
        replayed,
        response_from_raw(read_ordered(raw) | {"run_id": "run-2", "conversation_id": "talk-2"}),
    ):
        assert (response.run_id, response.conversation_id) == (None, None)
        assert response.parts == [TextPart("The UK holds firm.")]


@pytest.mark.anyio
async def test_the_request_settings_reach_the_wrapped_model(ledger: PinLedger) -> None:
    seen: list[ModelSettings | None] = []

    def answer(_messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.model_settings)
        return ModelResponse(parts=[TextPart("The UK holds firm.")])

    await PinnedModel(FunctionModel(answer, model_name="scripted-uk"), ledger).request(
        history(), {"temperature": 0.3}, PARAMS
    )
    assert seen == [{"temperature": 0.3}]


@pytest.mark.anyio
async def test_a_given_call_policy_keys_the_requests(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    live = Scripted("scripted-uk")
    policy = LastPromptPolicy()
    model = PinnedModel(live.model, ledger, policy=policy)
    assert model.policy is policy
    first = await model.request(history(), {"temperature": 0.1}, PARAMS)
    ledger.commit()
    # Settings are not in this policy's material: another temperature is the same call, answered from its pin.
    replayed = await PinnedModel(live.model, replay_of(store, types), policy=policy).request(
        history(), {"temperature": 0.9}, PARAMS
    )
    assert replayed.parts == first.parts and live.calls == 1


@pytest.mark.anyio
async def test_a_token_count_is_asked_with_the_request_and_keyed_on_it(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    asked: list[tuple[Any, ...]] = []
    inner = Scripted("scripted-uk").model

    async def count_tokens(*args: Any) -> RequestUsage:
        asked.append(args)
        # A cost is a Decimal: pinned as JSON, it comes back the same number.
        return RequestUsage(input_tokens=42, cost=Decimal("0.0042"))

    inner.count_tokens = count_tokens  # type: ignore[method-assign]
    live = PinnedModel(inner, ledger)
    settings: ModelSettings = {"temperature": 0.1}
    messages = history()
    counted = await live.count_tokens(messages, settings, PARAMS)
    assert asked == [(messages, settings, PARAMS)]
    assert all(a is b for a, b in zip(asked[0], (messages, settings, PARAMS), strict=True))
    assert (counted.input_tokens, counted.cost) == (42, Decimal("0.0042"))
    (pin,) = ledger.pins()
    assert pin.key == pin_key(TOKEN_COUNT, {"call": live.pin_for(history(), settings, PARAMS).key})
    assert json.loads(pin.raw_text)["cost"] == "0.0042"
    ledger.commit()

    replay = PinnedModel(inner, replay_of(store, types))
    assert await replay.count_tokens(history(), settings, PARAMS) == counted
    with pytest.raises(PinMiss) as miss:
        await replay.count_tokens(history(), {"temperature": 0.2}, PARAMS)
    assert miss.value.divergence.moved == ("settings.temperature",)
    assert len(asked) == 1


@pytest.mark.anyio
async def test_a_compaction_is_asked_with_its_context_and_keyed_on_the_request_and_instructions(
    store: SQLiteEventStore, types: EventTypeRegistry, ledger: PinLedger
) -> None:
    asked: list[ModelRequestContext] = []
    inner = Scripted("scripted-uk").model

    async def compact_messages(context: ModelRequestContext, *, instructions: str | None = None) -> ModelResponse:
        asked.append(context)
        return ModelResponse(parts=[TextPart(f"Summary ({instructions}): the UK holds firm.")])

    inner.compact_messages = compact_messages  # type: ignore[method-assign]

    def context(model: PinnedModel, temperature: float) -> ModelRequestContext:
        return ModelRequestContext(
            model=model,
            messages=history(),
            model_settings={"temperature": temperature},
            model_request_parameters=PARAMS,
        )

    live = PinnedModel(inner, ledger)
    given = context(live, 0.1)
    first = await live.compact_messages(given, instructions="Keep the quotas.")
    assert asked == [given] and asked[0] is given
    (pin,) = ledger.pins()
    call = live.pin_for(history(), {"temperature": 0.1}, PARAMS)
    assert pin.key == pin_key(COMPACTION, {"call": call.key, "instructions": "Keep the quotas."})
    ledger.commit()

    replay = PinnedModel(inner, replay_of(store, types))
    again = await replay.compact_messages(context(replay, 0.1), instructions="Keep the quotas.")
    assert again.parts == first.parts
    # The context's settings are part of the call the compaction is keyed on.
    with pytest.raises(PinMiss) as miss:
        await replay.compact_messages(context(replay, 0.2), instructions="Keep the quotas.")
    assert miss.value.divergence.moved == ("settings.temperature",)
    assert len(asked) == 1


BATCH = Batch(
    id="batch-1",
    model_name="scripted-uk",
    provider_name="function",
    group="g",
    status="in_progress",
    created_at=datetime(2026, 1, 1, tzinfo=UTC),
    request_count=1,
)


def refusal(method: str) -> str:
    return (
        f"PinnedModel cannot pin {method}: batch results arrive outside any request a pin can see."
        " Send the requests one by one through the pinned model (each is pinned), or batch the unwrapped model"
    )


@pytest.mark.anyio
async def test_every_batch_call_is_refused_naming_itself(ledger: PinLedger) -> None:
    live = Scripted("scripted-uk")
    model = PinnedModel(live.model, ledger)
    assert (model.batch_max_requests, model.batch_max_bytes) == (None, None)
    request = BatchRequest(custom_id="r1", messages=history())
    result = BatchResult(custom_id="r1", status="succeeded")
    calls: dict[str, Any] = {
        "batch_encode": lambda: model.batch_encode(request),
        "batch_create": lambda: model.batch_create([]),
        "batch_status": lambda: model.batch_status(BATCH),
        "batch_results": lambda: model.batch_results(BATCH),
        "batch_cancel": lambda: model.batch_cancel(BATCH),
    }
    for method, call in calls.items():
        with pytest.raises(UsageError) as caught:
            await call()
        assert str(caught.value) == refusal(method)
    with pytest.raises(UsageError) as caught:
        model.batch_decode(result, request)
    assert str(caught.value) == refusal("batch_decode")
    assert live.calls == 0 and ledger.pins() == []
