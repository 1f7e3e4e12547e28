"""assert_same_run: two runs compared field by field, wall-clock instants and run ids left out."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.provider import PinnedModel
from anagrapheus.testing import assert_same_run, first_difference
from anagrapheus.timeline import EventTypeRegistry, PinLedger, PinResolver, ReplayPins, SQLiteEventStore


def weather_agent(
    answer: str, city: str = "Paris", *, call_id: str = "call-1", resolver: PinResolver | None = None
) -> Agent[None, str]:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("forecast", {"city": city}, tool_call_id=call_id)])
        return ModelResponse(parts=[TextPart(answer)])

    model = FunctionModel(reply, model_name="weather")
    agent = Agent(model if resolver is None else PinnedModel(model, resolver))

    @agent.tool_plain
    def forecast(city: str) -> str:
        return f"rain in {city}"

    return agent


def test_two_runs_of_the_same_conversation_are_the_same_though_their_times_and_ids_differ() -> None:
    first = weather_agent("Take an umbrella.").run_sync("Weather in Paris?")
    second = weather_agent("Take an umbrella.").run_sync("Weather in Paris?")
    assert first.all_messages()[0].timestamp != second.all_messages()[0].timestamp  # pyright: ignore[reportAttributeAccessIssue]
    assert first.run_id != second.run_id

    assert_same_run(first, second)
    assert_same_run(first.all_messages(), second.all_messages())


def test_a_changed_answer_names_the_message_part_and_field() -> None:
    first = weather_agent("Take an umbrella.").run_sync("Weather in Paris?")
    second = weather_agent("Leave the umbrella.").run_sync("Weather in Paris?")

    with pytest.raises(AssertionError) as raised:
        assert_same_run(first, second)

    assert str(raised.value) == snapshot(
        "the runs differ at messages[3].parts[0].content: 'Take an umbrella.' != 'Leave the umbrella.'"
    )


def test_a_tool_called_with_other_arguments_names_the_argument() -> None:
    first = weather_agent("ok").run_sync("Weather?")
    second = weather_agent("ok", city="Lyon").run_sync("Weather?")

    with pytest.raises(AssertionError, match=r"messages\[1\]\.parts\[0\]\.args\.city: 'Paris' != 'Lyon'"):
        assert_same_run(first, second)


def test_a_run_with_more_messages_names_the_first_index_present_on_one_side_only() -> None:
    short = weather_agent("ok").run_sync("Weather?")
    longer = weather_agent("ok").run_sync("Weather again?", message_history=short.all_messages())

    with pytest.raises(AssertionError, match=r"messages\[0\]\.parts\[0\]\.content: 'Weather\?' != 'Weather again\?'"):
        assert_same_run(short.all_messages(), longer.new_messages())
    with pytest.raises(AssertionError, match=r"^the runs differ at messages\[4\]: only in the second"):
        assert_same_run(short.all_messages(), longer.all_messages())


def test_fields_named_in_ignore_are_left_out_too() -> None:
    first = weather_agent("ok", call_id="call-1").run_sync("Weather?")
    second = weather_agent("ok", call_id="call-2").run_sync("Weather?")

    with pytest.raises(AssertionError, match="tool_call_id: 'call-1' != 'call-2'"):
        assert_same_run(first, second)
    assert_same_run(first, second, ignore={"tool_call_id"})


def test_a_replayed_run_is_the_same_run_as_the_one_recorded(tmp_path: Path, types: EventTypeRegistry) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        ledger = PinLedger(store, types)
        recorded = weather_agent("Take an umbrella.", resolver=ledger).run_sync("Weather?")
        ledger.commit()
        replay = ReplayPins.from_events(store.read(), types)
        replayed = weather_agent("Something else.", resolver=replay).run_sync("Weather?")

    assert_same_run(recorded, replayed)


def test_first_difference_tells_true_from_one_and_one_from_one_point_oh() -> None:
    assert first_difference({"a": [1, True]}, {"a": [1.0, True]}) is None
    assert first_difference({"a": [1, True]}, {"a": [1, 1]}) == "$.a[1]: True != 1"
    assert first_difference({"a": 1}, {"b": 1}) == "$.a: only in the first (1)"
