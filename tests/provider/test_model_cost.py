"""A pinned response carries the cost estimate the recorded run was given, so a replay reports the same cost."""

from __future__ import annotations

import json

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from anagrapheus.provider import PinnedModel
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.ordered import read_ordered


def priced(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(
        parts=[TextPart("The UK holds firm on fisheries.")],
        usage=RequestUsage(input_tokens=1_000_000, output_tokens=1_000_000),
        provider_name="openai",
    )


def test_replay_reports_the_recorded_cost_without_a_price_lookup(
    store: SQLiteEventStore, types: EventTypeRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FunctionModel names its responses after itself, so a priced name makes the estimate real.
    model = FunctionModel(priced, model_name="gpt-4o-mini")
    ledger = PinLedger(store, types)
    live = Agent(PinnedModel(model, ledger)).run_sync("Round 1")
    (event,) = ledger.commit()
    recorded_cost = read_ordered(json.loads(event.payload)["raw"])["usage"]["cost"]
    assert recorded_cost is not None and float(recorded_cost) > 0
    assert live.usage.cost == live.response.usage.cost

    def no_price_table(*args: object, **kwargs: object) -> None:
        raise AssertionError("a replayed response must not be priced again")

    monkeypatch.setattr("pydantic_ai._genai_prices.best_effort_price", no_price_table)
    replayed = Agent(PinnedModel(model, ReplayPins.from_events(store.read(), types))).run_sync("Round 1")
    assert replayed.response.usage.cost == live.response.usage.cost
    assert replayed.output == live.output


def test_an_unpriced_model_pins_no_cost(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    model = FunctionModel(priced, model_name="scripted-uk")
    ledger = PinLedger(store, types)
    Agent(PinnedModel(model, ledger)).run_sync("Round 1")
    (event,) = ledger.commit()
    assert read_ordered(json.loads(event.payload)["raw"])["usage"].get("cost") is None
