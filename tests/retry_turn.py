"""A turn whose model asks two tools at once, one of which fails the first time: the retry rule's scenario (#40).

Used by tests/provider/test_retries.py and the seeds, and by the script that recorded the fixtures
`tests/data/retry-before-the-rule-*.jsonl` with the code before the rule (see `record_before_the_rule`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.provider import PinnedModel, pinned_tool
from anagrapheus.timeline.resolving.resolver import PinResolver

WAYS = ("pinned", "pinning")
"""`PinnedModel` and `pinned_tool` over one resolver, or the `Pinning` capability."""


class Refused(Exception):
    """The world was reached where nothing should have been (a strict replay)."""


@dataclass
class Harbour:
    """The world one turn reaches: the model, a tide table and a radio that drops its first `drops` calls."""

    drops: int = 1
    refusing: bool = False
    reached: dict[str, int] = field(default_factory=lambda: {"model": 0, "tide": 0, "radio": 0})

    def _reach(self, what: str) -> None:
        if self.refusing:
            raise Refused(f"{what} was reached")
        self.reached[what] += 1

    def model(self) -> FunctionModel:
        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self._reach("model")
            if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
                return ModelResponse(parts=[TextPart("berth 4 at high tide, pilot told")])
            return ModelResponse(
                parts=[ToolCallPart("tide", {"port": "Brest"}), ToolCallPart("radio", {"to": "pilot"})]
            )

        return FunctionModel(answer, model_name="scripted-harbour")

    def tide(self, port: str) -> str:
        """Read the tide table."""
        self._reach("tide")
        return f"high tide at {port} 14:05"

    def radio(self, to: str) -> str:
        """Call someone on the radio."""
        self._reach("radio")
        if self.drops > 0:
            self.drops -= 1
            raise ConnectionError("the radio link dropped")
        return f"{to} acknowledged"

    def agent(self, way: str, resolver: PinResolver) -> Agent[None, str]:
        """The turn's agent, pinned `way` through `resolver`."""
        if way == "pinned":
            tools: list[Any] = [pinned_tool(resolver, self.tide), pinned_tool(resolver, self.radio)]
            return Agent(PinnedModel(self.model(), resolver), tools=tools)
        return Agent(self.model(), tools=[self.tide, self.radio], capabilities=[Pinning(resolver)])


PROMPT = "Book a berth for the Marie-Galante"


def try_until_done(agent: Agent[None, str], *, attempts: int = 3) -> tuple[int, str]:
    """Run the turn, trying again on a dropped link as an application would: (failures met, the output)."""
    for failed in range(attempts):
        try:
            return failed, agent.run_sync(PROMPT).output
        except ConnectionError:
            continue
    raise AssertionError("the turn never finished")


def record_before_the_rule(folder: Path, data: Path) -> None:  # pragma: no cover - run once, with the code before #40
    """Write the fixtures into `data`: a failed turn and its retry, recorded by the code before the retry rule."""
    from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore, pin_events, write_recording

    for way in WAYS:
        store = SQLiteEventStore(folder / f"{way}.db")
        types = EventTypeRegistry()
        ledger = PinLedger(store, types, unit_id=f"retry-before-the-rule-{way}")
        try_until_done(Harbour().agent(way, ledger))
        ledger.commit()
        write_recording(
            data / f"retry-before-the-rule-{way}.jsonl",
            pin_events(store.read()),
            header={
                "description": f"a failed turn and its retry ({way}), recorded before the retry rule (#40)",
                "recorded_with": "scripted-harbour (FunctionModel)",
                "rerecord": "cannot be: it holds what the code before issue #40 drew (tests/retry_turn.py)",
            },
        )
        store.close()
