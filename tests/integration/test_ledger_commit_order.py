"""A unit's pins are committed in the order their keys were asked for, whatever order concurrent draws finished in."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.provider.tools import tool_result_from_raw
from anagrapheus.testing import RecordingSession
from anagrapheus.timeline import EventTypeRegistry, PinLedger, ReplayPins, SQLiteEventStore, pin_key
from tests.testing.test_plugin import PYPROJECT

pytest_plugins = ["pytester"]

KEYS = [pin_key("tool_call", {"city": city}) for city in ("Paris", "Lyon", "Oslo", "Rome", "Kyiv", "Lima")]


def identity(raw: Any) -> Any:
    return raw


def committed_keys(events: list[Any]) -> list[str]:
    return [json.loads(event.payload)["key"] for event in events if event.type == "pin_promoted"]


async def gathered(resolver: PinLedger | ReplayPins, delays: list[float]) -> None:
    """Ask for every key at once; each draw sleeps its delay, so they finish in the order the delays give."""

    def effect(index: int) -> Any:
        async def draw() -> str:
            await asyncio.sleep(delays[index])
            return f"answer {index}"

        return draw

    await asyncio.gather(
        *(resolver.aresolve(key, kind="tool_call", effect=effect(i), interpret=identity) for i, key in enumerate(KEYS))
    )


def test_concurrent_draws_finishing_in_any_order_commit_in_the_order_asked(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    rng = random.Random(7)
    orders: list[list[str]] = []
    for run in range(4):
        # The last asked finishes first, then random orders: the scratch table's draw order differs every time.
        delays = [0.04 * (len(KEYS) - i) for i in range(len(KEYS))] if run == 0 else [rng.random() / 50 for _ in KEYS]
        with SQLiteEventStore(tmp_path / f"run-{run}.db") as store:
            ledger = PinLedger(store, types, unit_id="concurrent")
            asyncio.run(gathered(ledger, delays))
            if run == 0:
                assert [pin.key for pin in ledger.pins()] == KEYS[::-1]
            orders.append(committed_keys(ledger.commit()))
    assert orders == [KEYS] * 4


def test_re_recording_concurrent_draws_answered_from_the_recording_commits_the_same_order(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    with SQLiteEventStore(tmp_path / "first.db") as store:
        ledger = PinLedger(store, types, unit_id="concurrent")
        asyncio.run(gathered(ledger, [0.04 * (len(KEYS) - i) for i in range(len(KEYS))]))
        first = ledger.commit()
    with SQLiteEventStore(tmp_path / "again.db") as store:
        ledger = PinLedger(store, types, unit_id="concurrent")
        replay = ReplayPins.from_events(first, types, on_miss="record", into=ledger)
        asyncio.run(gathered(replay, [0.0] * len(KEYS)))
        assert replay.hits == len(KEYS)
        assert committed_keys(ledger.commit()) == committed_keys(first) == KEYS


def test_pins_an_earlier_ledger_drew_and_nobody_asked_again_come_first_in_draw_order(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    with SQLiteEventStore(tmp_path / "log.db") as store:
        crashed = PinLedger(store, types, unit_id="resumed")
        for key in (KEYS[1], KEYS[0]):
            crashed.resolve(key, kind="tool_call", effect=lambda: "drawn before", interpret=identity)
        del crashed  # its process gone: nothing remembers what it asked
        resumed = PinLedger(store, types, unit_id="resumed")
        for key in (KEYS[3], KEYS[0], KEYS[2]):
            resumed.resolve(key, kind="tool_call", effect=lambda: "drawn now", interpret=identity)
        assert committed_keys(resumed.commit()) == [KEYS[1], KEYS[3], KEYS[0], KEYS[2]]


CITIES = ("Paris", "Lyon", "Oslo")


def weather_agent(delays: dict[str, float]) -> Agent[None, str]:
    """Asks for three forecasts in one response; pydantic-ai runs the three tool calls at once."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            calls = [ToolCallPart("forecast", {"city": c}, tool_call_id=f"call-{c}") for c in CITIES]
            return ModelResponse(parts=calls)
        return ModelResponse(parts=[TextPart("Take an umbrella.")])

    agent = Agent(FunctionModel(reply, model_name="weather"))

    @agent.tool_plain
    async def forecast(city: str) -> str:
        await asyncio.sleep(delays[city])
        return f"rain in {city}"

    return agent


def test_an_agents_parallel_tool_calls_are_recorded_in_the_order_the_model_asked(tmp_path: Path) -> None:
    path = tmp_path / "weather.jsonl"
    written: list[bytes] = []
    # Drawn with the first city slowest, then re-recorded (every call answered from the file) with no delay.
    for mode, delays in (("record", {"Paris": 0.06, "Lyon": 0.03, "Oslo": 0.0}), ("record", dict.fromkeys(CITIES, 0))):
        session = RecordingSession(path, name="test_weather", rerecord="pytest --anagrapheus=record", mode=mode)
        try:
            with session.active():
                weather_agent(delays).run_sync("Weather?")
            session.finish()
        finally:
            session.close()
        written.append(path.read_bytes())
    assert written[0] == written[1]
    tools = [
        tool_result_from_raw(json.loads(line)["payload"]["raw"])
        for line in written[0].splitlines()
        if b'"kind":"tool_call"' in line
    ]
    assert tools == [f"rain in {city}" for city in CITIES]


PARALLEL_APP = """
import asyncio

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

DELAYS = {"Paris": 0.3, "Lyon": 0.1, "Oslo": 0.0}  # the first asked finishes last


async def forecast(city: str) -> str:
    await asyncio.sleep(DELAYS[city])
    return f"rain in {city}"


def _answer(messages, info):
    if not any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
        return ModelResponse(parts=[ToolCallPart("forecast", {"city": c}, tool_call_id=c) for c in DELAYS])
    return ModelResponse(parts=[TextPart("Take an umbrella.")])


def advise(question: str) -> str:
    return Agent(FunctionModel(_answer, model_name="weather"), tools=[forecast]).run_sync(question).output
"""


def test_re_recording_under_xdist_writes_the_same_bytes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CI", "ANAGRAPHEUS_MODE", "ANAGRAPHEUS_FORCE"):
        monkeypatch.delenv(name, raising=False)
    pytester.makefile(".toml", pyproject=PYPROJECT)
    pytester.makepyfile(parallel_app=PARALLEL_APP)
    for module in ("test_north", "test_south"):
        pytester.makepyfile(
            **{
                module: """
                import pytest

                import parallel_app


                @pytest.mark.anagrapheus
                @pytest.mark.parametrize("when", ["today", "tomorrow"])
                def test_advice(when):
                    assert "umbrella" in parallel_app.advise(f"Rain {when}?")
                """
            }
        )
    written: list[dict[str, bytes]] = []
    for _ in range(2):  # drawn, then every call answered from the files
        pytester.runpytest_subprocess("-n", "2", "--anagrapheus=record").assert_outcomes(passed=4)
        written.append(
            {str(p.relative_to(pytester.path)): p.read_bytes() for p in pytester.path.glob("recordings/*/*")}
        )
    assert len(written[0]) == 4
    assert written[0] == written[1]
    for recording in written[0].values():
        tools = [
            tool_result_from_raw(json.loads(line)["payload"]["raw"])
            for line in recording.splitlines()
            if b'"kind":"tool_call"' in line
        ]
        assert tools == ["rain in Paris", "rain in Lyon", "rain in Oslo"]
