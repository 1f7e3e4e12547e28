"""Five runs recorded under the pydantic-ai floor and replayed under whatever is installed (issue #33's table).

`python -m tests.survival --record` (under the floor, `pip install -c .ci/constraints/floor.txt ...`) writes each
scenario's recording and the JSON of its `all_messages()` to `tests/data/survival/`; tests/test_survival.py
replays each strictly under the installed pydantic-ai and compares. Every model is a scripted `FunctionModel` and
every id and time is seeded, so a recording made again under the same release writes the same bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning, ReplayPins
from anagrapheus.timeline import EventTypeRegistry, PinLedger, RecordingHeader, SeededRun, SQLiteEventStore
from anagrapheus.timeline.recording import write_recording

DATA = Path(__file__).parent / "data" / "survival"
START = datetime(2026, 1, 5, 9, tzinfo=UTC)
PROMPT = "Round 1: state the UK position on cod."


class Position(BaseModel):
    """The structured output of one scenario."""

    stock: str
    quota_t: int


def _last_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1]
    return [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []


def _scripted(clock: Callable[[], datetime]) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = _last_returns(messages)
        if info.output_tools and not returns:
            args = {"stock": "cod", "quota_t": 12000}
            return ModelResponse(
                parts=[ToolCallPart(info.output_tools[0].name, args, tool_call_id="out-1")], timestamp=clock()
            )
        if info.function_tools and not returns:
            call = ToolCallPart(info.function_tools[0].name, {"stock": "cod"}, tool_call_id="survey-1")
            return ModelResponse(parts=[call], timestamp=clock())
        said = f" after {returns[0].content}" if returns else ""
        text = f"The UK holds firm on cod{said} ({len(info.instructions or '')} chars of instructions)."
        return ModelResponse(parts=[TextPart(text)], timestamp=clock())

    return answer


def _streamed(clock: Callable[[], datetime]) -> Callable[[list[ModelMessage], AgentInfo], Any]:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        del messages, info
        for chunk in ("The UK ", "holds firm ", "on cod."):
            yield chunk

    return stream


@dataclass(frozen=True)
class Scenario:
    """One run: how to build its agent and how to run it."""

    name: str
    build: Callable[[FunctionModel], Agent[None, Any]]
    streamed: bool = False


def _static(model: FunctionModel) -> Agent[None, Any]:
    return Agent(model, instructions="You negotiate for the UK. Be brief.")


def _dynamic(model: FunctionModel) -> Agent[None, Any]:
    agent = Agent(model)

    @agent.instructions
    def round_brief(ctx: RunContext[None]) -> str:  # pyright: ignore[reportUnusedFunction]
        return f"You negotiate for the UK. Run step {ctx.run_step}."

    return agent


def _tool(model: FunctionModel) -> Agent[None, Any]:
    agent = Agent(model, instructions="Survey before you answer.")

    @agent.tool_plain
    def stock_survey(stock: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read the latest survey of a stock."""
        return f"{stock}: biomass 81 kt, falling"

    return agent


def _structured(model: FunctionModel) -> Agent[None, Any]:
    return Agent(model, output_type=Position, instructions="Answer with the position.")


def _streaming(model: FunctionModel) -> Agent[None, Any]:
    return Agent(model, instructions="You negotiate for the UK.")


SCENARIOS = {
    scenario.name: scenario
    for scenario in (
        Scenario("static-instructions", _static),
        Scenario("dynamic-instructions", _dynamic),
        Scenario("function-tool", _tool),
        Scenario("structured-output", _structured),
        Scenario("run-stream", _streaming, streamed=True),
    )
}


def _model(name: str, run: SeededRun) -> FunctionModel:
    if SCENARIOS[name].streamed:
        return FunctionModel(stream_function=_streamed(run.now), model_name=f"scripted-{name}")
    return FunctionModel(_scripted(run.now), model_name=f"scripted-{name}")


async def run_once(name: str, pinning: Pinning, run: SeededRun) -> list[ModelMessage]:
    """Run scenario `name` once under `pinning`; return its `all_messages()`."""
    agent = SCENARIOS[name].build(_model(name, run))
    if SCENARIOS[name].streamed:
        async with agent.run_stream(PROMPT, capabilities=[pinning]) as result:
            await result.get_output()
        return result.all_messages()
    return (await agent.run(PROMPT, capabilities=[pinning])).all_messages()


def messages_json(messages: list[ModelMessage]) -> str:
    """The messages as pydantic-ai dumps them, as JSON text."""
    return ModelMessagesTypeAdapter.dump_json(messages).decode()


def record(name: str, folder: Path) -> None:
    """Record scenario `name` live into `folder`: `<name>.jsonl` and `<name>.messages.json`."""
    run = SeededRun(f"survival-{name}", start=START)
    with TemporaryDirectory() as tmp:
        store = SQLiteEventStore(Path(tmp) / "run.db", clock=run.now, new_event_id=run.new_id)
        ledger = PinLedger(store, EventTypeRegistry(), unit_id=name)
        messages = asyncio.run(run_once(name, Pinning(ledger, clock=run.now, new_id=run.new_id), run))
        ledger.commit()
        header = RecordingHeader(
            description=f"Issue #33's survival scenario {name!r}, recorded under the pydantic-ai floor.",
            recorded_with="A scripted FunctionModel; seeded ids and clock; no provider reached.",
            rerecord="python -m tests.survival --record (under .ci/constraints/floor.txt)",
        )
        write_recording(folder / f"{name}.jsonl", store.read(namespace="anagrapheus"), header=header)
        store.close()
    (folder / f"{name}.messages.json").write_text(messages_json(messages) + "\n", encoding="utf-8")


def live(name: str) -> list[ModelMessage]:
    """Run scenario `name` live under the installed pydantic-ai, with the recording's seeds, into a throwaway log."""
    run = SeededRun(f"survival-{name}", start=START)
    with TemporaryDirectory() as tmp:
        store = SQLiteEventStore(Path(tmp) / "run.db", clock=run.now, new_event_id=run.new_id)
        ledger = PinLedger(store, EventTypeRegistry(), unit_id=name)
        try:
            return asyncio.run(run_once(name, Pinning(ledger, clock=run.now, new_id=run.new_id), run))
        finally:
            ledger.abandon(reason="a throwaway live run, compared and dropped")
            store.close()


def replay(name: str, folder: Path = DATA) -> list[ModelMessage]:
    """Replay scenario `name` strictly from its recording in `folder`; return its `all_messages()`."""
    pins = ReplayPins.from_recording(folder / f"{name}.jsonl", unit_id=name, provenance="ignore")
    # The replay's own clock and ids are never read: a strict replay answers them from the pins.
    run = SeededRun("never-read", start=datetime(2000, 1, 1, tzinfo=UTC))
    return asyncio.run(run_once(name, Pinning(pins), run))


def old_shape(new: Any, old: Any, dropped: list[str], at: str = "$") -> Any:
    """`new` (a JSON value) with only the object keys `old` has, naming each key left out in `dropped`."""
    if isinstance(new, dict) and isinstance(old, dict):
        kept: dict[str, Any] = {}
        for name, value in new.items():
            if name in old:
                kept[name] = old_shape(value, old[name], dropped, f"{at}.{name}")
            else:
                dropped.append(f"{at}.{name}")
        return kept
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [old_shape(n, o, dropped, f"{at}[{i}]") for i, (n, o) in enumerate(zip(new, old, strict=True))]
    return new


def main(argv: list[str] | None = None) -> None:
    """Record every scenario (`--record`) or replay each and print whether it matched."""
    parser = argparse.ArgumentParser(prog="python -m tests.survival")
    parser.add_argument("--record", action="store_true", help="record the scenarios into tests/data/survival/")
    args = parser.parse_args(argv)
    if args.record:
        DATA.mkdir(parents=True, exist_ok=True)
        for name in SCENARIOS:
            record(name, DATA)
        print(f"recorded {len(SCENARIOS)} scenarios into {DATA}")
        return
    for name in SCENARIOS:
        replayed = json.loads(messages_json(replay(name)))
        recorded = json.loads((DATA / f"{name}.messages.json").read_text(encoding="utf-8"))
        dropped: list[str] = []
        same = old_shape(replayed, recorded, dropped) == recorded
        print(f"{name}: {'equal' if same else 'DIFFERENT'}; fields only the installed release writes: {dropped}")


if __name__ == "__main__":
    main()
