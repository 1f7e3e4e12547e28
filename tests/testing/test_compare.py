"""assert_same_run: two runs compared field by field, wall-clock instants and run ids left out."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from inline_snapshot import snapshot
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from anagrapheus.cli import main
from anagrapheus.provider import PinnedModel
from anagrapheus.testing import RecordingSession, assert_same_run, first_difference
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
    first = weather_agent("Take an umbrella.").run_sync("Weather?")
    second = weather_agent("Leave the umbrella.").run_sync("Weather?")

    with pytest.raises(AssertionError, match=r"content: 'Take an umbrella\.' != 'Leave the umbrella\.'"):
        assert_same_run(first.all_messages(), second.all_messages())
    assert_same_run(first.all_messages(), second.all_messages(), ignore={"content"})


def two_city_agent(model: Model | None = None) -> Agent[None, str]:
    """Calls its tool twice at once, under the ids pydantic-ai or the model gives the calls."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("forecast", {"city": city}) for city in ("Paris", "Lyon")])
        return ModelResponse(parts=[TextPart("Take an umbrella.")])

    agent = Agent(model or FunctionModel(reply, model_name="weather"))

    @agent.tool_plain
    async def forecast(city: str) -> str:
        return f"rain in {city}"

    return agent


@pytest.mark.parametrize("model", ["function", "test"])
def test_two_live_runs_of_an_unchanged_agent_are_the_same_though_their_call_ids_differ(model: str) -> None:
    agent = two_city_agent(TestModel() if model == "test" else None)
    first, second = agent.run_sync("Weather?"), agent.run_sync("Weather?")
    ids = [part.tool_call_id for run in (first, second) for part in run.all_messages()[1].parts]  # pyright: ignore[reportAttributeAccessIssue]
    if model == "function":
        assert len(set(ids)) == 4  # drawn afresh for each call of each run

    assert_same_run(first, second)


def test_calls_and_returns_paired_up_differently_are_a_difference() -> None:
    def run(ids: tuple[str, str], answered: tuple[str, str]) -> list[ModelMessage]:
        cities = ("Paris", "Lyon")
        calls = [ToolCallPart("forecast", {"city": c}, tool_call_id=i) for c, i in zip(cities, ids, strict=True)]
        returns = [
            ToolReturnPart("forecast", f"rain in {c}", tool_call_id=i) for c, i in zip(cities, answered, strict=True)
        ]
        return [ModelRequest.user_text_prompt("Weather?"), ModelResponse(parts=calls), ModelRequest(parts=returns)]

    assert_same_run(run(("a", "b"), ("a", "b")), run(("x", "y"), ("x", "y")))
    with pytest.raises(AssertionError) as raised:
        assert_same_run(run(("a", "b"), ("a", "b")), run(("x", "y"), ("y", "x")))
    assert str(raised.value) == "the runs differ at messages[2].parts[0].tool_call_id: '<call 1>' != '<call 2>'"


def recorded_twice(tmp_path: Path, runs: Callable[[], None]) -> list[Path]:
    """Record `runs` into two recordings, as two sessions of one test would: their paths."""
    recordings = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    for path in recordings:
        session = RecordingSession(path, name="test_weather", rerecord="pytest --anagrapheus=rewrite", mode="rewrite")
        try:
            with session.active():
                runs()
            session.finish()
        finally:
            session.close()
    return recordings


def test_diff_of_two_recordings_of_a_conversation_finds_them_the_same_though_its_runs_ids_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run's place is keyed on its inputs, its history's run ids among them: fresh ids in each recording.
    def conversation() -> None:
        first = two_city_agent().run_sync("Weather?")
        two_city_agent().run_sync("And tomorrow?", message_history=first.all_messages())

    recordings = recorded_twice(tmp_path, conversation)
    places = [
        [
            e["payload"]["key"]
            for e in map(json.loads, r.read_text().splitlines()[1:])
            if e["payload"].get("kind") == "run_place"
        ]
        for r in recordings
    ]
    assert len(places[0]) == 2 and places[0][1] != places[1][1]

    assert main(["diff", *map(str, recordings)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("same: 1 unit(s)")


def test_diff_of_two_recordings_of_an_unchanged_agent_finds_them_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def two_runs() -> None:
        two_city_agent().run_sync("Weather?")
        two_city_agent().run_sync("Weather in Paris?")

    recordings = recorded_twice(tmp_path, two_runs)
    assert recordings[0].read_bytes() != recordings[1].read_bytes()  # other run ids, clocks and tool call ids

    assert main(["diff", *map(str, recordings)]) == 0
    # The second run reads both cities again, as it does unpinned: its two tool calls are pins of its own (issue #34).
    # Each run's place among the unit's runs is pinned under its inputs, the same in both recordings.
    assert capsys.readouterr().out.splitlines()[-1] == "same: 1 unit(s), 16 pin(s)"

    # A run clock holding another number of instants still differs: only the values are volatile.
    lines = recordings[1].read_text().splitlines(keepends=True)
    at = next(n for n, line in enumerate(lines) if '"kind":"run_clock"' in line)
    event = json.loads(lines[at])
    event["payload"]["raw"] = event["payload"]["raw"][:1]
    lines[at] = json.dumps(event, separators=(",", ":")) + "\n"
    recordings[1].write_text("".join(lines))
    assert main(["diff", *map(str, recordings)]) == 1
    assert "      same request, another result: result[1]: only in the first ('str')" in capsys.readouterr().out


def test_a_replayed_run_is_the_same_run_as_the_one_recorded(tmp_path: Path, types: EventTypeRegistry) -> None:
    with SQLiteEventStore(tmp_path / "run.db") as store:
        ledger = PinLedger(store, types)
        recorded = weather_agent("Take an umbrella.", resolver=ledger).run_sync("Weather?")
        ledger.commit()
        replay = ReplayPins.from_events(store.read(), types)
        replayed = weather_agent("Something else.", resolver=replay).run_sync("Weather?")

    assert_same_run(recorded, replayed)


def test_first_difference_skips_the_names_in_ignore_at_any_depth() -> None:
    assert first_difference({"a": {"at": 1, "b": 2}}, {"a": {"at": 3, "b": 2}}, ignore={"at"}) is None
    assert first_difference({"a": {"at": 1, "b": 2}}, {"a": {"at": 1, "b": 4}}, ignore={"at"}) == "$.a.b: 2 != 4"


def test_first_difference_tells_true_from_one_and_one_from_one_point_oh() -> None:
    assert first_difference({"a": [1, True]}, {"a": [1.0, True]}) is None
    assert first_difference({"a": [1, True]}, {"a": [1, 1]}) == "$.a[1]: True != 1"
    assert first_difference({"a": 1}, {"b": 1}) == "$.a: only in the first (1)"


def provider_agent(response_id: str) -> Agent[None, str]:
    """An agent whose provider names each response, as OpenAI's `chatcmpl-...` ids do."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Take an umbrella.")], provider_response_id=response_id)

    return Agent(FunctionModel(reply, model_name="weather"))


def test_the_ids_a_provider_gives_its_responses_are_left_out_unless_asked_for() -> None:
    first = provider_agent("chatcmpl-A1").run_sync("Weather in Paris?")
    second = provider_agent("chatcmpl-B2").run_sync("Weather in Paris?")

    assert_same_run(first, second)
    with pytest.raises(AssertionError) as raised:
        assert_same_run(first, second, provider_ids=True)

    assert str(raised.value) == snapshot(
        "the runs differ at messages[1].provider_response_id: 'chatcmpl-A1' != 'chatcmpl-B2'"
    )
